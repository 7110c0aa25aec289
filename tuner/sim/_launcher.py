"""Simulated cluster launcher: trials from the helper's performance model, in milliseconds.

For rehearsing a study (and for benchmarking samplers) at a scale this machine cannot run.
Each trial's mean throughput is `helper.predict_throughput` for the spec's model and cluster;
on top of it:

- NCCL's real rules (helper.collectives): a forced algorithm a collective lacks (Tree for
  all-gather, NVLS off Hopper or for fp32 reduce-scatter, PAT above one GPU per node) fails
  at the first collective with NCCL's message;
- OOM where `helper.estimate_memory` exceeds the GPU's memory, after start-up and one step;
- start-up cost (`helper.estimate_startup_seconds`: interpreter, rendezvous, model build)
  that grows with model size and node count, charged to every cold trial; with
  ``[trial] resident`` a worker stays up after an ok trial, and the next pays only its
  in-place reconfiguration (tuner.budget.setup_seconds) and trial.warm_warmup_steps; an
  OOM or NCCL error (every rank fails alike) is recovered in place, a timeout ends the
  worker, as in objectives/resident.py;
- measurement noise: a per-trial offset (run-to-run variation, 1%), step-to-step AR(1)
  variation of the step time (phi 0.6, 3%), and an occasional straggler step (3% of steps,
  20-60% slower): step times of real jobs are autocorrelated (data-loader hiccups,
  communication contention), which is what the statistics stage must cope with;
- HSDP and tensor-parallel layouts, and DCP checkpoint saves, through helper.layouts and
  helper.checkpointing (tuner/model/_predict.py).

Everything is deterministic for a given (seed, trial number). Reported GPU-seconds are
simulated (world size x simulated wall time); the study is flagged `simulated`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from tuner import model
from tuner.launch import Launcher, TrialRequest, TrialResult
from tuner.measurement import stop_reason
from tuner.sim._physics import SimTruth, physics_for
from tuner.sim._physics import preflight as physics_preflight
from tuner.sim._physics import truth as physics_truth

__all__ = ["SimLauncher", "NOISE"]

NOISE = {"trial_offset_sd": 0.01, "ar1_phi": 0.6, "step_sd": 0.03,
         "straggler_prob": 0.03, "straggler_slowdown": (1.2, 1.6)}
"""Noise of the simulated measurements (relative to the step time); see the module doc."""


class SimLauncher(Launcher):
    name = "sim"
    simulated = True
    _worker: dict | None = None  # the params of the resident worker's last trial
    _failed = False  # whether that trial failed

    def warm(self) -> bool:
        return self.spec.trial.resident and self._worker is not None

    def close(self) -> None:
        self._worker = None

    def preflight_nccl(self, spec, nccl_algo: str, nccl_proto: str) -> str | None:
        """A simulated seconds-long NCCL collective test (tuner.search): its error, or None."""
        c = spec.cluster
        return physics_preflight(physics_for(c.sim_physics, c.gpu), gpu=c.gpu, world=c.world_size,
                                 gpus_per_node=c.gpus_per_node, nccl_algo=nccl_algo, nccl_proto=nccl_proto)

    def launch(self, request: TrialRequest) -> TrialResult:
        from tuner import budget

        warm = request.spec.trial.resident and self._worker is not None
        # after a failure the worker takes a new model and communicators (budget.switch_level)
        level = budget.switch_level(budget.Worker(params=self._worker, failed=self._failed) if warm else None,
                                      request.params)
        result = self._launch(request, lambda parts: budget.setup_seconds(level, parts),
                              warmup_steps=min(request.spec.trial.warmup_steps, request.spec.trial.warm_warmup_steps)
                              if warm and level != "process" else request.spec.trial.warmup_steps)
        # an OOM or a refused collective fails on every rank alike: the worker recovers in place
        # (objectives/resident.py); a timeout kills it
        self._worker = dict(request.params) if request.spec.trial.resident and result.status != "timeout" else None
        self._failed = result.status != "ok"
        world = result.world_size
        extra = {**result.extra, "setup_gpu_seconds": world * (result.startup_seconds or 0.0)}
        if request.spec.trial.resident:
            extra.update(warm=warm, reconfigured=level)
            if not warm:
                extra["worker_startup_gpu_seconds"] = world * (result.startup_seconds or 0.0)
        return dataclasses.replace(result, extra=extra)

    def _launch(self, request: TrialRequest, setup: Callable[[dict[str, float]], float], *,
                warmup_steps: int) -> TrialResult:
        spec, p = request.spec, request.params  # every knob's value (TrialRequest: complete_params)
        c = spec.cluster
        world = c.world_size
        model_name = spec.model.preset or spec.model.path
        rng = np.random.default_rng(np.random.SeedSequence([spec.study.seed, request.number, 0x5EED]))
        startup_s = setup(model.startup_parts(model_name, world_size=world, gpu=c.gpu, gpus_per_node=c.gpus_per_node))
        common = dict(launcher=self.name, world_size=world, startup_seconds=startup_s)

        physics = physics_for(c.sim_physics, c.gpu)
        inputs = model.spec_model_inputs(p, spec, mean_tokens=physics.mean_tokens())
        micro_batch, grad_accum = inputs.micro_batch, inputs.grad_accum
        capacity_gb = model.gpu_memory_gb(c.gpu)
        if physics.matched:
            try:
                prediction = model.predict(inputs)
            except model.UnsupportedCollective as exc:  # fails at the first collective, after start-up
                return TrialResult(status="error", message=str(exc), gpu_seconds=world * startup_s,
                                   wall_seconds=startup_s, **common)
            memory_gb = model.memory_gb(inputs)
            truth = SimTruth(status="ok" if memory_gb <= capacity_gb else "oom",
                             tokens_per_sec_per_gpu=float(prediction), peak_mem_gb=memory_gb,
                             capacity_gb=capacity_gb, padding_efficiency=inputs.padding_efficiency,
                             data_wait_frac=prediction.details["data_stall_s"] / prediction.details["step_time_s"],
                             row_len=inputs.seq_len, step_time_s=prediction.details["step_time_s"],
                             message=_oom_message(memory_gb, capacity_gb),
                             details={"mfu": prediction.details.get("mfu"), "model_source": prediction.source})
        else:  # a cluster whose physics differ from helper's (tuner.sim's physics)
            truth = physics_truth(physics, inputs)
            if truth.status == "error":
                return TrialResult(status="error", message=truth.message, gpu_seconds=world * startup_s,
                                   wall_seconds=startup_s, **common)
        row_len, efficiency = truth.row_len, truth.padding_efficiency

        tokens_per_sec_per_gpu = truth.tokens_per_sec_per_gpu
        real_tokens_per_step = efficiency * micro_batch * grad_accum * row_len * world
        peak_mem_gb, status, message = truth.peak_mem_gb, truth.status, truth.message
        mfu = truth.details.get("mfu")
        layout = model.layout_adjustment(dataclasses.replace(inputs, seq_len=row_len))
        if layout:  # HSDP / TP on top of this cluster's FSDP: helper.layouts' ratio and memory delta
            step_time_s = real_tokens_per_step / (tokens_per_sec_per_gpu * world) * layout["step_time_ratio"]
            real_tokens_per_step /= layout["tp"]  # a TP group's rows count once
            scale = real_tokens_per_step / (step_time_s * world) / tokens_per_sec_per_gpu
            tokens_per_sec_per_gpu *= scale
            mfu = mfu and mfu * scale
            peak_mem_gb += layout["memory_delta_gb"]
            if status in ("ok", "oom"):  # TP can make an FSDP-OOM config fit, and HSDP the reverse
                status = "oom" if peak_mem_gb > truth.capacity_gb else "ok"
                if status == "oom" and truth.status == "ok":
                    message = _oom_message(peak_mem_gb, truth.capacity_gb)
        peak_mem_gib = model.gib(peak_mem_gb)
        if status == "oom":
            step_time_s = truth.step_time_s or 1.0
            wall = startup_s + step_time_s
            return TrialResult(status="oom", gpu_seconds=world * wall, wall_seconds=wall,
                               peak_mem_gib=peak_mem_gib, message=message, **common)
        step_time_s = real_tokens_per_step / (tokens_per_sec_per_gpu * world)

        times = _step_times(rng, step_time_s, warmup_steps + spec.trial.measure_steps)
        warmup = warmup_steps
        values: list[tuple[int, float]] = []
        stopped = ""
        for i in range(warmup, len(times)):
            values.append((i, real_tokens_per_step / times[i] / world))
            if spec.trial.adaptive:
                stopped = stop_reason([v for _, v in values], min_steps=spec.trial.min_steps,
                                      target_rel_ci=spec.trial.target_rel_ci,
                                      stop_below=request.stop_below_tokens_per_sec_per_gpu)
                if stopped:
                    break
        saves = None
        if spec.trial.checkpoint_every:  # saved outside the timed step: wall time, not tokens/s
            saves = model.checkpoint_cost(model.n_params(model_name),
                                    mode=spec.trial.checkpoint_mode, every=spec.trial.checkpoint_every,
                                    steps=warmup + len(values), world_size=world, nodes=c.nodes,
                                    step_time_s=step_time_s)
        wall = startup_s + float(np.sum(times[: warmup + len(values)])) + (saves["total_blocking_s"] if saves else 0.0)
        cap = request.max_gpu_seconds
        if cap is not None and world * wall > cap:  # the budget's cap stops the job there
            elapsed = np.cumsum(times) + startup_s
            n_done = int(np.searchsorted(elapsed, cap / world, side="right"))
            values = [(i, v) for i, v in values if i < n_done]
            wall = cap / world
            if len(values) < min(spec.trial.min_steps, spec.trial.measure_steps):
                return TrialResult(status="timeout", step_values=tuple(values), gpu_seconds=cap,
                                   wall_seconds=wall, peak_mem_gib=peak_mem_gib,
                                   message=f"stopped at its budget cap of {cap:.0f} GPU-seconds", **common)
            stopped = "budget_cap"
        step_seconds = tuple(float(times[i]) for i, _ in values)
        return TrialResult(status="ok", step_values=tuple(values), step_seconds=step_seconds, gpu_seconds=world * wall,
                           wall_seconds=wall, peak_mem_gib=peak_mem_gib, data_wait_frac=truth.data_wait_frac,
                           extra={"simulated": True, "noiseless_tokens_per_sec_per_gpu": tokens_per_sec_per_gpu,
                                  "mfu": mfu, "model_source": truth.details.get("model_source"),
                                  "sim_physics": None if physics.matched else physics.name,
                                  "padding_efficiency": efficiency, "measured_steps": len(values),
                                  "stopped_early": stopped or None,
                                  "layout": layout["layout"] if layout else None, "checkpoint": saves,
                                  "measure_seconds": wall - startup_s},
                           **common)


def _oom_message(needs_gb: float, capacity_gb: float) -> str:
    """A simulated OOM, in GiB as PyTorch's own CUDA OOM says it."""
    return f"CUDA out of memory (simulated): needs {model.gib(needs_gb):.1f} GiB of {model.gib(capacity_gb):.1f} GiB per GPU"


def _step_times(rng: np.random.Generator, step_time_s: float, n: int) -> np.ndarray:
    offset = rng.normal(0.0, NOISE["trial_offset_sd"])
    phi, sd = NOISE["ar1_phi"], NOISE["step_sd"]
    e = np.empty(n)
    e[0] = rng.normal(0.0, sd)
    for t in range(1, n):
        e[t] = phi * e[t - 1] + math.sqrt(1 - phi * phi) * rng.normal(0.0, sd)
    slow = np.where(rng.random(n) < NOISE["straggler_prob"],
                    rng.uniform(*NOISE["straggler_slowdown"], size=n), 1.0)
    return step_time_s * (1.0 + offset) * np.exp(e) * slow
