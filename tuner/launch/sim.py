"""Simulated cluster launcher: trials from the helper's performance model, in milliseconds.

For rehearsing a study (and for benchmarking samplers) at a scale this machine cannot run.
Each trial's mean throughput is `helper.predict_throughput` for the spec's model and cluster;
on top of it:

- NCCL's real rules (helper.collectives): a forced algorithm a collective lacks (Tree for
  all-gather, NVLS off Hopper or for fp32 reduce-scatter, PAT above one GPU per node) fails
  at the first collective with NCCL's message;
- OOM where `helper.estimate_memory` exceeds the GPU's memory, after start-up and one step;
- start-up cost (`helper.estimate_startup_seconds`: interpreter, rendezvous, model build)
  that grows with model size and node count, charged to every trial;
- measurement noise: a per-trial offset (run-to-run variation, 1%), step-to-step AR(1)
  variation of the step time (phi 0.6, 3%), and an occasional straggler step (3% of steps,
  20-60% slower): step times of real jobs are autocorrelated (data-loader hiccups,
  communication contention), which is what the statistics stage must cope with;
- HSDP and tensor-parallel layouts, and DCP checkpoint saves, through helper.layouts and
  helper.checkpointing (tuner/launch/sim_layouts.py).

Everything is deterministic for a given (seed, trial number). Reported GPU-seconds are
simulated (world size x simulated wall time); the study is flagged `simulated`.
"""

from __future__ import annotations

import math

import numpy as np

from tuner import knobs
from tuner.launch.base import Launcher, TrialRequest, TrialResult
from tuner.launch.sim_layouts import checkpoint_cost, layout_adjustment
from tuner.measurement import stop_reason

__all__ = ["SimLauncher", "NOISE"]

NOISE = {"trial_offset_sd": 0.01, "ar1_phi": 0.6, "step_sd": 0.03,
         "straggler_prob": 0.03, "straggler_slowdown": (1.2, 1.6)}
"""Noise of the simulated measurements (relative to the step time); see the module doc."""


class SimLauncher(Launcher):
    name = "sim"
    simulated = True

    def launch(self, request: TrialRequest) -> TrialResult:
        from helper.collectives import UnsupportedCollective
        from helper.gpus import get_gpu
        from helper.memory import estimate_memory
        from helper.throughput import estimate_startup_seconds, predict_throughput

        spec, p = request.spec, request.params  # every knob's value (TrialRequest: complete_params)
        c = spec.cluster
        world = c.world_size
        model = spec.model.preset or spec.model.path
        rng = np.random.default_rng(np.random.SeedSequence([spec.study.seed, request.number, 0x5EED]))
        startup_s = float(estimate_startup_seconds(model, world, gpu=c.gpu, gpus_per_node=c.gpus_per_node))
        common = dict(launcher=self.name, world_size=world, startup_seconds=startup_s)

        micro_batch, grad_accum = int(p["micro_batch"]), int(p["grad_accum"])
        padding = p["padding"]
        ckpt = bool(p["activation_checkpointing"])
        reshard = knobs.fsdp_reshard_after_forward(p)  # shard_grad_op: FSDP2 without it
        row_len, efficiency, examples_per_row = _rows(padding, spec.model.seq_len, micro_batch)

        try:
            prediction = predict_throughput(
                model, world, gpu=c.gpu, seq_len=row_len, micro_batch=micro_batch,
                activation_checkpointing=ckpt, grad_accum=grad_accum, gpus_per_node=c.gpus_per_node,
                nccl_algo=p["nccl_algo"], nccl_proto=p["nccl_proto"],
                num_workers=int(p["num_workers"]), prefetch_factor=p.get("prefetch_factor"),
                padding_efficiency=efficiency, examples_per_sequence=examples_per_row,
                reshard_after_forward=reshard)
        except UnsupportedCollective as exc:  # fails at the first collective, after start-up
            return TrialResult(status="error", message=str(exc), gpu_seconds=world * startup_s,
                               wall_seconds=startup_s, **common)

        tokens_per_sec_per_gpu = float(prediction)
        real_tokens_per_step = efficiency * micro_batch * grad_accum * row_len * world
        step_time_s = real_tokens_per_step / (tokens_per_sec_per_gpu * world)
        memory = estimate_memory(model, world, sharding="zero3", micro_batch=micro_batch,
                                        seq_len=row_len, activation_checkpointing=ckpt,
                                        grad_accum=grad_accum, reshard_after_forward=reshard, gpu=c.gpu)
        layout = layout_adjustment(model, p, gpu=c.gpu, world_size=world, gpus_per_node=c.gpus_per_node,
                                   micro_batch=micro_batch, seq_len=row_len, activation_checkpointing=ckpt,
                                   grad_accum=grad_accum, reshard_after_forward=reshard)
        if layout:  # HSDP / TP: helper.layouts' ratio and memory delta; a TP group's rows count once
            step_time_s *= layout["step_time_ratio"]
            real_tokens_per_step /= layout["tp"]
            fsdp_tokens_per_sec_per_gpu = tokens_per_sec_per_gpu
            tokens_per_sec_per_gpu = real_tokens_per_step / (step_time_s * world)
            mfu_scale = tokens_per_sec_per_gpu / fsdp_tokens_per_sec_per_gpu
            memory = {**memory, "total": memory["total"] + layout["memory_delta_gb"]}
        capacity_gb = get_gpu(c.gpu).memory_gb
        peak_mem_gib = memory["total"] * 1e9 / 2**30
        if memory["total"] > capacity_gb:
            wall = startup_s + step_time_s
            return TrialResult(status="oom", gpu_seconds=world * wall, wall_seconds=wall,
                               peak_mem_gib=peak_mem_gib,
                               message=(f"CUDA out of memory (simulated): needs {memory['total']:.1f} GB "
                                        f"of {capacity_gb:.0f} GB per GPU"), **common)

        times = _step_times(rng, step_time_s, spec.trial.warmup_steps + spec.trial.measure_steps)
        warmup = spec.trial.warmup_steps
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
            saves = checkpoint_cost(_n_params(model),
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
        details = prediction.details
        data_wait = details["data_stall_s"] / details["step_time_s"]
        return TrialResult(status="ok", step_values=tuple(values), step_seconds=step_seconds, gpu_seconds=world * wall,
                           wall_seconds=wall, peak_mem_gib=peak_mem_gib, data_wait_frac=data_wait,
                           extra={"simulated": True, "noiseless_tokens_per_sec_per_gpu": tokens_per_sec_per_gpu,
                                  "mfu": details.get("mfu") and details["mfu"] * (mfu_scale if layout else 1.0),
                                  "model_source": prediction.source,
                                  "padding_efficiency": efficiency, "measured_steps": len(values),
                                  "stopped_early": stopped or None,
                                  "layout": layout["layout"] if layout else None, "checkpoint": saves,
                                  "measure_seconds": wall - startup_s},
                           **common)


def _n_params(model: str) -> float:
    from helper.sizes import parse_model_size
    return parse_model_size(model).n_params


def _rows(padding: str, seq_len: int, micro_batch: int) -> tuple[int, float, float]:
    """(computed row length, non-padding share, examples per row) for a padding mode."""
    from helper.throughput import DEFAULT_MEAN_TOKENS_PER_EXAMPLE, estimate_padding_efficiency

    mean = min(float(DEFAULT_MEAN_TOKENS_PER_EXAMPLE), float(seq_len))
    efficiency = estimate_padding_efficiency(padding, seq_len=seq_len, micro_batch=micro_batch,
                                             mean_tokens_per_example=mean)
    if padding == "packed":
        return seq_len, 1.0, seq_len / mean
    if padding == "longest":
        row = min(seq_len, max(1, math.ceil(mean / efficiency)))
        return row, mean / row, 1.0
    return seq_len, efficiency, 1.0


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
