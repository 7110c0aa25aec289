"""Honest accounting: what a trial's end means for the budget and the search.

A trial killed because the budget ran out is not its config's timeout: it is recorded as
`stopped_by_budget` (Optuna state FAIL, charged what it ran, never retried), so it neither
steers the sampler (TPE ignores FAIL trials) nor lands in RECIPE's "Avoid" (statistics read
COMPLETE trials only). A trial killed at its cap (tuner.budget.trial_cap: 3x its cap basis) with
budget left, or at the spec's own timeout, stays a `timeout`: that is its config's cost.

Example:
    >>> from tuner.launch import TrialResult
    >>> r = TrialResult(status="timeout", launcher="sim", world_size=4, gpu_seconds=100.0, wall_seconds=25.0)
    >>> label_budget_stop(r, reserved_gpu_seconds=100.0, cap_basis_gpu_seconds=60.0, timeout_s=900).extra
    {'stopped_by_budget': True}
    >>> label_budget_stop(r, reserved_gpu_seconds=180.0, cap_basis_gpu_seconds=60.0, timeout_s=900).extra
    {}
"""

from __future__ import annotations

import dataclasses

from tuner.budget import CAP_FACTOR
from tuner.launch import TrialResult
from tuner.spec import StudySpec

__all__ = ["label_budget_stop", "launch_gpus", "STOPPED_BY_BUDGET"]

STOPPED_BY_BUDGET = "stopped_by_budget"


def label_budget_stop(result: TrialResult, *, reserved_gpu_seconds: float | None, cap_basis_gpu_seconds: float,
                      timeout_s: float) -> TrialResult:
    """``result`` marked ``extra["stopped_by_budget"]`` when the budget's end, not the config,
    killed it: a timeout at a cap that was what was left of the budget (less than 3x the
    cap basis, tuner.scheduling.Admission) and came before the spec's timeout."""
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
