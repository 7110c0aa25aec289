"""The scheduling core, pure: what to admit next, and what a launcher's result becomes.

No storage, no Optuna objects: plain data in, decisions out. The coordinator's loop
(tuner.coordinator) applies them under its lock; bench/search_efficiency.py and the tests
call the same functions.

Example:
    >>> from tuner.budget import Ledger
    >>> ledger = Ledger(limit_gpu_seconds=100.0, entries=())
    >>> adm = next_admission(ledger, first_estimate_gpu_seconds=10.0, search_limit_gpu_seconds=85.0,
    ...                      ablation=True, ablation_planned=False, queued=False)
    >>> adm.action, adm.estimate_gpu_seconds, adm.cap_gpu_seconds
    ('launch', 10.0, 30.0)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.budget import Ledger, estimate_trial_cost, trial_cap, trial_cap_basis
from tuner.launch.base import TrialResult
from tuner.measurement import batch_means_ci
from tuner.spec import StudySpec

__all__ = ["Admission", "next_admission", "first_estimate", "search_limit", "best_lower_bound",
           "Outcome", "outcome", "infrastructure_failure"]


def infrastructure_failure(extra: Mapping[str, Any]) -> bool:
    """Whether a result's extras (or the trial attrs they became) say the infrastructure
    failed, not the config: a node failure, preemption, an allocation that never came."""
    return bool(extra.get("slurm_failure") or extra.get("infrastructure_failure"))


def first_estimate(spec: StudySpec) -> float:
    """GPU-seconds of a trial before any has finished: the spec's estimate, else its timeout
    x world size (the most a trial may cost)."""
    if spec.trial.estimate_gpu_seconds is not None:
        return spec.trial.estimate_gpu_seconds
    return spec.trial.timeout_s * spec.cluster.world_size


def search_limit(limit_gpu_seconds: float, ablation_share: float, *, ablation: bool) -> float:
    """The part of the budget the search may spend; the rest is kept for the ablation runs."""
    return limit_gpu_seconds * (1.0 - ablation_share) if ablation else limit_gpu_seconds


@dataclass(frozen=True, kw_only=True)
class Admission:
    """The next step of the loop."""

    action: str
    """`launch` (ask a trial and reserve ``cap_gpu_seconds``), `plan_ablation` (enqueue the
    ablation runs, then decide again) or `stop` (nothing fits)."""
    estimate_gpu_seconds: float
    cap_gpu_seconds: float | None = None
    cap_basis_gpu_seconds: float | None = None
    """What the cap is CAP_FACTOR times when the budget is not short (tuner.budget.trial_cap)."""
    reason: str = ""


def next_admission(ledger: Ledger, *, first_estimate_gpu_seconds: float, search_limit_gpu_seconds: float,
                   ablation: bool, ablation_planned: bool, queued: bool,
                   estimate_gpu_seconds: float | None = None, search_exhausted: bool = False,
                   costliest_ok_gpu_seconds: float | None = None) -> Admission:
    """What the loop does next, given the budget ledger and the study's state.

    Args:
        ledger: the budget ledger of every trial so far.
        first_estimate_gpu_seconds: a trial's cost before any has finished (:func:`first_estimate`).
        search_limit_gpu_seconds: what the search may spend before the ablation runs.
        ablation: whether this study re-measures the best config and its one-knob reverts.
        ablation_planned: the ablation runs are already enqueued (once per budget).
        queued: some trial is WAITING (the baseline, a retry, an ablation run): it runs
            before any new search trial, budget permitting.
        estimate_gpu_seconds: the next trial's expected cost when the caller knows better
            than the ledger's median (a warm trial: tuner.batching.estimate_cost).
        search_exhausted: no unseen configuration is left (tuner.repeats): only queued runs.
        costliest_ok_gpu_seconds: the costliest ok trial so far (tuner.batching.cap_basis): the
            cap is never under CAP_FACTOR x it (tuner.budget.trial_cap).

    Once the ablation runs are done, what they left of their share goes back to the search:
    a large budget is spent, not left over.
    """
    estimate = estimate_gpu_seconds if estimate_gpu_seconds is not None else estimate_trial_cost(
        ledger.measured_costs, first_estimate_gpu_seconds=first_estimate_gpu_seconds)
    over_search = ledger.used_gpu_seconds + estimate > search_limit_gpu_seconds
    if not queued and ablation and not ablation_planned and (over_search or search_exhausted):
        return Admission(action="plan_ablation", estimate_gpu_seconds=estimate)
    if not queued and (search_exhausted or (over_search and not (ablation and ablation_planned))):
        return Admission(action="stop", estimate_gpu_seconds=estimate,
                         reason="search exhausted" if search_exhausted else "budget")
    cap = trial_cap(ledger, estimate, costliest_ok_gpu_seconds)
    if cap is None:
        return Admission(action="stop", estimate_gpu_seconds=estimate, reason="budget")
    return Admission(action="launch", estimate_gpu_seconds=estimate, cap_gpu_seconds=cap,
                     cap_basis_gpu_seconds=trial_cap_basis(estimate, costliest_ok_gpu_seconds))


def best_lower_bound(step_series: Iterable[Sequence[float]]) -> float | None:
    """The highest 95% CI lower bound among ok trials' step series (adaptive measurement's
    "clearly worse" line), or None when no trial has a CI yet.

    Example:
        >>> round(best_lower_bound([[100.0] * 8, [200.0, 201.0, 199.0, 200.0]]), 1)
        193.6
    """
    bounds = [ci.low for ci in map(batch_means_ci, step_series) if ci is not None]
    return max(bounds) if bounds else None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a launcher's result is recorded on its trial."""

    state: str
    """`COMPLETE` (the config's own result, ok or not) or `FAIL` (not the config's fault)."""
    value: float | None
    """tokens/s/GPU for ok trials, 0.0 for failed ones (COMPLETE), None for FAIL."""
    failed: float | None
    """The Optuna constraint `failed`: 0.0 ok, 1.0 failed (samplers steer away); None for FAIL."""
    steps: tuple[tuple[int, float], ...] = ()
    """Intermediate values: (step, tokens/s/GPU)."""
    attrs: dict[str, Any] = field(default_factory=dict)
    """User attrs to set (JSON-ready, no empty values)."""
    retry: bool = False
    """Enqueue the config again (once)."""


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def outcome(result: TrialResult) -> Outcome:
    """What a launcher's result becomes on its trial.

    A failed trial is COMPLETE with value 0 and a violated constraint: samplers learn to
    avoid its region (TPE ignores FAIL trials), and ``best_trial`` never picks it. A node
    failure, preemption or allocation that never came is not the config's fault: FAIL,
    charged, retried once, and no constraint steers the sampler away.
    """
    attrs = {"status": result.status, "gpu_seconds": result.gpu_seconds,
             "wall_seconds": result.wall_seconds, "world_size": result.world_size,
             "launcher": result.launcher, "peak_mem_gib": result.peak_mem_gib,
             "data_wait_frac": result.data_wait_frac, "startup_seconds": result.startup_seconds,
             "log_path": result.log_path, "message": result.message,
             "step_seconds": list(result.step_seconds) or None}  # tokens over time's weights
    for key, value in result.extra.items():
        attrs.setdefault(key, value)
    attrs = {k: _jsonable(v) for k, v in attrs.items() if v is not None and v != ""}
    if result.extra.get("stopped_by_budget"):  # the budget's end, not the config (tuner.accounting)
        attrs["status"] = "stopped_by_budget"
        return Outcome(state="FAIL", value=None, failed=None, steps=result.step_values, attrs=attrs, retry=False)
    if infrastructure_failure(result.extra):
        return Outcome(state="FAIL", value=None, failed=None, steps=result.step_values, attrs=attrs, retry=True)
    value = result.tokens_per_sec_per_gpu
    return Outcome(state="COMPLETE", value=value if value is not None else 0.0,
                   failed=0.0 if value is not None else 1.0, steps=result.step_values, attrs=attrs)
