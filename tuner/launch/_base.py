"""What every launcher takes and returns."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.spec import StudySpec

__all__ = ["TrialRequest", "TrialResult", "Launcher", "STATUSES", "wall_limit_s", "wall_limit_reason"]

STATUSES = ("ok", "oom", "timeout", "error")


@dataclass(frozen=True, kw_only=True)
class TrialRequest:
    """One trial to run."""

    study_name: str
    number: int
    """Optuna trial number."""
    params: dict[str, Any]
    """Every knob's value (searched knobs and the spec's defaults)."""
    spec: StudySpec
    run_dir: Path
    """A folder of this trial's own: config, result file and log go there."""
    seed: int = 0
    max_gpu_seconds: float | None = None
    """The budget's cap for this trial (what was reserved): launchers stop the trial there."""
    stop_below_tokens_per_sec_per_gpu: float | None = None
    """Adaptive measurement: the best trial's CI lower bound so far; a trial whose CI upper
    bound falls below it may stop early (launchers that support it)."""


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    """What a launcher measured. Statistics are not done here: only the raw record."""

    status: str
    """`ok`, `oom`, `timeout` or `error`."""
    launcher: str
    world_size: int
    gpu_seconds: float
    """World size x wall time, start-up included, measured by the launcher."""
    wall_seconds: float
    step_values: tuple[tuple[int, float], ...] = ()
    """(step index, tokens/s/GPU of that measured step), warm-up excluded."""
    step_seconds: tuple[float, ...] = ()
    """Wall seconds of each measured step (same order as step_values); empty if unknown."""
    peak_mem_gib: float | None = None
    data_wait_frac: float | None = None
    startup_seconds: float | None = None
    """Launch to the first measured step: model build, communicators, warm-up."""
    message: str = ""
    """Why a trial failed (NCCL's reason, the OOM text, the timeout)."""
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """More diagnostics from the summary line (mfu, nccl_env, token counting)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @property
    def tokens_per_sec_per_gpu(self) -> float | None:
        """Tokens over time of the measured steps (the trial's value): sum of tokens / sum of
        seconds (tuner.stats.ratio_of_sums); None unless the trial is `ok`."""
        if self.status != "ok" or not self.step_values:
            return None
        rates = [v for _, v in self.step_values]
        secs = self.step_seconds if len(self.step_seconds) == len(rates) else [1.0 / v for v in rates]
        return sum(r * s for r, s in zip(rates, secs)) / sum(secs)


def wall_limit_s(request: TrialRequest, world_size: int) -> float:
    """The trial's wall-clock limit: its timeout, or sooner if its GPU-second cap runs out."""
    limit = request.spec.trial.timeout_s
    if request.max_gpu_seconds is not None:
        limit = min(limit, request.max_gpu_seconds / world_size)
    return limit


def wall_limit_reason(request: TrialRequest, world_size: int) -> str:
    """Which limit `wall_limit_s` applies, in words for the trial's timeout message."""
    limit = wall_limit_s(request, world_size)
    if limit < request.spec.trial.timeout_s:
        return (f"killed at {limit:g}s, when its budget cap of {request.max_gpu_seconds:g} GPU-s "
                f"({world_size} ranks) ran out, before the {request.spec.trial.timeout_s:g}s timeout; "
                "the cap is 3x the estimated trial cost (trial.estimate_gpu_seconds, then measured)")
    return f"killed at the {limit:g}s timeout (trial.timeout_s)"


class Launcher(abc.ABC):
    """Turns a trial request into a running job and a TrialResult."""

    name: str = ""
    simulated: bool = False

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec

    @abc.abstractmethod
    def launch(self, request: TrialRequest) -> TrialResult:
        """Run one trial to the end (ok, failure or timeout). KeyboardInterrupt stops it and
        propagates after the job is gone."""

    def warm(self) -> bool:
        """Whether the next trial runs in a resident worker that is already up (its start-up
        paid): budget admission then expects a warm trial's cost. Cold launchers: False."""
        return False

    def close(self) -> None:
        """Release what the launcher holds (e.g. a Slurm allocation, a resident worker)."""
