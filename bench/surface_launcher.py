"""A launcher that serves any benchmark truth (bench/surface_truth.py) with measurement noise.

The truth says what a config does, noiselessly (bench/surfaces.py, a random surface;
bench/first_principles_cluster.py, a cluster from datasheets). This launcher turns it into
trials as tuner's sim launcher does (tuner/sim/_launcher.py), so the whole pipeline runs on it:

- **cold** (``[trial] resident = false``): every trial pays the truth's start-up
  (``setup_seconds("process")``);
- **warm** (``resident = true``, the default): the first trial starts a worker and is charged
  its start-up (extra ``worker_startup_gpu_seconds``); each next one pays only the
  reconfiguration of the heaviest knob level it changes (tuner.knobs.reconfiguration), at
  least new communicators after a failed config, and ``trial.warm_warmup_steps`` warm-up
  steps; an OOM or NCCL error is recovered in place, a timeout ends the worker. Extras
  ``warm``, ``reconfigured``, ``setup_gpu_seconds``; ``startup_seconds`` is the set-up paid;
- **failures**: an NCCL refusal after start-up, an OOM after start-up and one step;
- **noise** (:data:`NOISE`, the sim's): a run-to-run offset, AR(1) step-to-step variation and
  straggler steps;
- **limits**: the budget's cap (``request.max_gpu_seconds``) stops a trial there: ok with the
  steps it measured when they reach ``min_steps``, else `timeout`; ``trial.timeout_s`` kills it
  (`timeout`); adaptive stopping (tuner.measurement.stop_reason) as the sim and the objective do.

Deterministic for a given (study seed, trial number).
"""

from __future__ import annotations

import math

import numpy as np

from bench.surface_truth import SETUP_LEVELS, Truth
from tuner import knobs
from tuner.launch import Launcher, TrialRequest, TrialResult
from tuner.measurement import stop_reason

__all__ = ["SurfaceLauncher", "NOISE"]

assert SETUP_LEVELS == knobs.RECONFIGURE, "surface_truth.SETUP_LEVELS must follow tuner.knobs.RECONFIGURE"

NOISE = {"trial_offset_sd": 0.01, "ar1_phi": 0.6, "step_sd": 0.03, "straggler_prob": 0.03,
         "straggler_slowdown": (1.2, 1.6)}
"""Relative to the step time; the values of tuner/sim/_launcher.py's NOISE (a run-to-run offset of
1%, AR(1) phi 0.6 with 3% sd, 3% of steps 20-60% slower), so both benches measure alike."""


class SurfaceLauncher(Launcher):
    """Trials of a :class:`surface_truth.Truth` (see the module doc)."""

    name = "surface"
    simulated = True

    def __init__(self, spec, truth: Truth) -> None:
        super().__init__(spec)
        self.truth = truth
        self._worker: dict | None = None  # the resident worker's last params
        self._failed = False  # whether that config failed

    def warm(self) -> bool:
        return self.spec.trial.resident and self._worker is not None

    def close(self) -> None:
        self._worker = None

    def preflight_nccl(self, spec, nccl_algo: str, nccl_proto: str) -> str | None:
        """The truth's seconds-long collective test (tuner.search calls it)."""
        return self.truth.preflight_nccl(nccl_algo, nccl_proto)

    def level(self, params: dict) -> str:
        """What running ``params`` next needs of the worker (a RECONFIGURE level)."""
        if not self.warm():
            return "process"
        level = knobs.reconfiguration(self._worker, params)
        return max(level, "communicators", key=knobs.RECONFIGURE.index) if self._failed else level

    def launch(self, request: TrialRequest) -> TrialResult:
        warm, level = self.warm(), self.level(request.params)
        result = self._run(request, level, warm)
        resident = request.spec.trial.resident
        self._worker = dict(request.params) if resident and result.status != "timeout" else None
        self._failed = result.status != "ok"
        setup_gpu_s = result.world_size * (result.startup_seconds or 0.0)
        result.extra.update(setup_gpu_seconds=setup_gpu_s)
        if resident:
            result.extra.update(warm=warm, reconfigured=level)
            if not warm:
                result.extra["worker_startup_gpu_seconds"] = setup_gpu_s
        return result

    def _run(self, request: TrialRequest, level: str, warm: bool) -> TrialResult:
        spec, t = request.spec, request.spec.trial
        world = self.truth.world_size
        startup_s = self.truth.setup_seconds(level, request.params)
        outcome = self.truth.evaluate(request.params)
        limit_s = t.timeout_s if request.max_gpu_seconds is None else min(t.timeout_s, request.max_gpu_seconds / world)
        capped = request.max_gpu_seconds is not None and request.max_gpu_seconds / world < t.timeout_s
        common = dict(launcher=self.name, world_size=world, startup_seconds=startup_s)
        extra = {"simulated": True, "noiseless_tokens_per_sec_per_gpu": outcome.tokens_per_sec_per_gpu}

        def killed(steps: tuple = (), step_seconds: tuple = ()) -> TrialResult:
            why = (f"stopped at its budget cap of {request.max_gpu_seconds:.0f} GPU-seconds" if capped
                   else f"killed at the {t.timeout_s:g}s timeout (trial.timeout_s)")
            return TrialResult(status="timeout", gpu_seconds=world * limit_s, wall_seconds=limit_s, message=why,
                               step_values=steps, step_seconds=step_seconds, extra=extra, **common)

        if outcome.status == "error":  # the first collective refuses, right after start-up
            wall = startup_s + 1.0
            if wall > limit_s:
                return killed()
            return TrialResult(status="error", gpu_seconds=world * wall, wall_seconds=wall, message=outcome.message,
                               extra=extra, **common)
        if outcome.status == "oom":  # the first step's backward runs out
            wall = startup_s + outcome.step_time_s
            if wall > limit_s:
                return killed()
            return TrialResult(status="oom", gpu_seconds=world * wall, wall_seconds=wall, message=outcome.message,
                               peak_mem_gib=outcome.peak_mem_gib, extra=extra, **common)

        rng = np.random.default_rng(np.random.SeedSequence([spec.study.seed, request.number, 0x5EED5]))
        warmup = min(t.warmup_steps, t.warm_warmup_steps) if warm and level != "process" else t.warmup_steps
        times = step_times(rng, outcome.step_time_s, warmup + t.measure_steps)
        per_gpu_tokens = outcome.tokens_per_step / world
        values: list[tuple[int, float]] = []
        stopped = ""
        for i in range(warmup, len(times)):
            values.append((i, per_gpu_tokens / times[i]))
            if t.adaptive:
                stopped = stop_reason([v for _, v in values], min_steps=t.min_steps, target_rel_ci=t.target_rel_ci,
                                      stop_below=request.stop_below_tokens_per_sec_per_gpu)
                if stopped:
                    break
        n_run = warmup + len(values)
        wall = startup_s + float(np.sum(times[:n_run]))
        if wall > limit_s:  # the cap or the timeout ends the job part-way
            done = int(np.searchsorted(np.cumsum(times) + startup_s, limit_s, side="right"))
            values = [(i, v) for i, v in values if i < done]
            if not capped or len(values) < min(t.min_steps, t.measure_steps):
                return killed(tuple(values), tuple(float(times[i]) for i, _ in values))
            wall, stopped = limit_s, "budget_cap"
        extra.update(measured_steps=len(values), stopped_early=stopped or None, measure_seconds=wall - startup_s,
                     **({"mfu": outcome.details["mfu"]} if "mfu" in outcome.details else {}))
        return TrialResult(status="ok", step_values=tuple(values), step_seconds=tuple(float(times[i]) for i, _ in values),
                           gpu_seconds=world * wall, wall_seconds=wall, peak_mem_gib=outcome.peak_mem_gib,
                           data_wait_frac=outcome.data_wait_frac, extra=extra, **common)


def step_times(rng: np.random.Generator, step_time_s: float, n: int) -> np.ndarray:
    """``n`` noisy step times around ``step_time_s`` (:data:`NOISE`)."""
    offset = rng.normal(0.0, NOISE["trial_offset_sd"])
    phi, sd = NOISE["ar1_phi"], NOISE["step_sd"]
    e = np.empty(n)
    e[0] = rng.normal(0.0, sd)
    for k in range(1, n):
        e[k] = phi * e[k - 1] + math.sqrt(1 - phi * phi) * rng.normal(0.0, sd)
    slow = np.where(rng.random(n) < NOISE["straggler_prob"], rng.uniform(*NOISE["straggler_slowdown"], size=n), 1.0)
    return step_time_s * (1.0 + offset) * np.exp(e) * slow
