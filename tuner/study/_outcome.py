"""What a launcher's result becomes on its trial, pure: the Optuna state, value, constraint,
user attrs and whether it is retried; and honest accounting of trials the budget's end cut.

No storage, no Optuna objects: plain data in, decisions out. The coordinator
(tuner.study's loop) applies them.

A trial killed because the budget ran out is not its config's timeout: it is recorded as
`stopped_by_budget` (Optuna state FAIL, charged what it ran, never retried), so it neither
steers the sampler (TPE ignores FAIL trials) nor lands in RECIPE's "Avoid" (statistics read
COMPLETE trials only). A trial killed at its cap (tuner.budget.trial_cap: 3x its cap basis) with
budget left, or at the spec's own timeout, stays a `timeout`: that is its config's cost.

Example:
    >>> r = TrialResult(status="timeout", launcher="sim", world_size=4, gpu_seconds=100.0, wall_seconds=25.0)
    >>> label_budget_stop(r, reserved_gpu_seconds=100.0, cap_basis_gpu_seconds=60.0, timeout_s=900).extra
    {'stopped_by_budget': True}
    >>> label_budget_stop(r, reserved_gpu_seconds=180.0, cap_basis_gpu_seconds=60.0, timeout_s=900).extra
    {}
    >>> outcome(r).state, outcome(r).failed
    ('COMPLETE', 1.0)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.budget import CAP_FACTOR
from tuner.launch import TrialResult
from tuner.measurement import batch_means_ci
from tuner.spec import StudySpec
from tuner.storage import with_retries

__all__ = ["adaptive_bar", "best_lower_bound", "Outcome", "outcome", "infrastructure_failure", "label_budget_stop", "launch_gpus",
           "STOPPED_BY_BUDGET", "LOST", "INTERRUPTED", "NO_RESULT"]

LOST = "lost"
"""FAIL status of a trial another coordinator found stale: its own stopped beating (died,
frozen, or cut off from the storage past the grace period). Retried once."""
INTERRUPTED = "interrupted"
"""FAIL status of a trial its own coordinator stopped through no fault of its config: Ctrl-C,
a heartbeat it could not record (before a peer would count it dead), a launcher that broke,
an admission a storage error cut short. Retried once."""
NO_RESULT = (None, LOST, INTERRUPTED)
"""Statuses of a FAIL that holds no result of its config (None: a study written before
every FAIL carried a status)."""


def infrastructure_failure(extra: Mapping[str, Any]) -> bool:
    """Whether a result's extras (or the trial attrs they became) say the infrastructure
    failed, not the config: a node failure, preemption, an allocation that never came."""
    return bool(extra.get("slurm_failure") or extra.get("infrastructure_failure"))


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
    if result.extra.get("stopped_by_budget"):  # the budget's end, not the config (label_budget_stop, below)
        attrs["status"] = "stopped_by_budget"
        return Outcome(state="FAIL", value=None, failed=None, steps=result.step_values, attrs=attrs, retry=False)
    if infrastructure_failure(result.extra):
        # every FAIL says why (docs/contracts.md), also when the launcher gave no message
        attrs.setdefault("message", f"{result.status}: the infrastructure failed (a node, a preemption, an "
                                    "allocation that never came), not the config; retried once")
        return Outcome(state="FAIL", value=None, failed=None, steps=result.step_values, attrs=attrs, retry=True)
    value = result.tokens_per_sec_per_gpu
    return Outcome(state="COMPLETE", value=value if value is not None else 0.0,
                   failed=0.0 if value is not None else 1.0, steps=result.step_values, attrs=attrs)


STOPPED_BY_BUDGET = "stopped_by_budget"


def label_budget_stop(result: TrialResult, *, reserved_gpu_seconds: float | None, cap_basis_gpu_seconds: float,
                      timeout_s: float) -> TrialResult:
    """``result`` marked ``extra["stopped_by_budget"]`` when the budget's end, not the config,
    killed it: a timeout at a cap that was what was left of the budget (less than 3x the
    cap basis, tuner.budget.Admission) and came before the spec's timeout."""
    if result.status != "timeout" or reserved_gpu_seconds is None or result.world_size <= 0:
        return result
    budget_was_short = reserved_gpu_seconds < CAP_FACTOR * cap_basis_gpu_seconds * (1 - 1e-9)
    before_timeout = reserved_gpu_seconds / result.world_size < timeout_s
    if not (budget_was_short and before_timeout):
        return result
    message = (f"stopped by the budget: the last {reserved_gpu_seconds:,.0f} GPU-s of the budget ran out "
               f"before the trial finished (not its config's timeout)")
    return dataclasses.replace(result, message=message, extra={**result.extra, STOPPED_BY_BUDGET: True})


def launch_gpus(spec: StudySpec) -> int:
    """GPUs a trial holds while it runs (the local launcher runs one node whatever the spec says)."""
    return spec.cluster.gpus_per_node if spec.cluster.launcher == "local" else spec.cluster.world_size


def adaptive_bar(study: optuna.Study, spec: StudySpec, trials: list[optuna.trial.FrozenTrial] | None = None, *,
                 run: Mapping[str, Any] | None = None) -> float | None:
    """Adaptive measurement's bar for the next trial (None: adaptive measurement off, no CI yet, or
    measured until precise); ``trials``: the study as just read, ``run``: the trial's user attrs.
    A search trial's bar is the best ok trial's 95% CI lower bound (best_lower_bound); a revert's,
    its round's re-measurement of the best (none yet: no bar), not the search's luckiest trial.
    The baseline and re-measurements measure until precise (docs/statistics.md, section 2)."""
    if not spec.trial.adaptive:
        return None
    run = run or {}
    revert = run.get("role") == "ablation" and run.get("ablation_knob") is not None and not run.get("remeasure")
    if run.get("role") and not revert:
        return None
    if trials is None:
        trials = with_retries(lambda: study.get_trials(deepcopy=False), what="reading finished trials")
    ok = (t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok")
    if revert:
        round_ = run.get("ablation_round", 1)
        ok = (t for t in ok if t.user_attrs.get("remeasure") == "best"
              and t.user_attrs.get("ablation_round", 1) == round_)
    return best_lower_bound([t.intermediate_values[k] for k in sorted(t.intermediate_values)] for t in ok)
