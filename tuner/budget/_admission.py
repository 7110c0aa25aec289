"""Admission arithmetic, pure: what the coordinator's loop does next, given the budget ledger.

No storage, no Optuna objects: plain data in, a decision out. tuner.study's admission applies
it under the study's lock; bench/search_efficiency.py and the tests call the same function.

Example:
    >>> ledger = Ledger(limit_gpu_seconds=100.0, entries=())
    >>> adm = next_admission(ledger, first_estimate_gpu_seconds=10.0, search_limit_gpu_seconds=85.0,
    ...                      ablation=True, ablation_planned=False, queued=False)
    >>> adm.action, adm.estimate_gpu_seconds, adm.cap_gpu_seconds
    ('launch', 10.0, 30.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.budget._ledger import Ledger, estimate_trial_cost, trial_cap, trial_cap_basis

__all__ = ["Admission", "next_admission", "search_limit"]


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
        first_estimate_gpu_seconds: a trial's cost before any has finished (tuner.spec.StudySpec.first_estimate_gpu_seconds).
        search_limit_gpu_seconds: what the search may spend before the ablation runs.
        ablation: whether this study re-measures the best config and its one-knob reverts.
        ablation_planned: the ablation runs are already enqueued (once per budget).
        queued: some trial is WAITING (the baseline, a retry, an ablation run): it runs
            before any new search trial, budget permitting.
        estimate_gpu_seconds: the next trial's expected cost when the caller knows better
            than the ledger's median (a warm trial: tuner.budget.estimate_cost).
        search_exhausted: no unseen configuration is left (tuner.search): only queued runs.
        costliest_ok_gpu_seconds: the costliest ok trial so far (tuner.budget.cap_basis): the
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
