"""GPU-second accounting: parsing budgets, the ledger over a study's trials, admission.

Pure functions over plain data; the coordinator feeds them the study's trials. The ledger
lives in the study itself (user attrs `gpu_seconds` and `reserved_gpu_seconds`), so every
coordinator that joins a study sees the same budget.

Example:
    >>> parse_budget("40gpuh")
    144000.0
    >>> format_gpu_hours(5400.0)
    '1.50 GPU-h'
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.errors import BudgetError

__all__ = [
    "parse_budget", "format_gpu_hours", "LedgerEntry", "Ledger", "ledger_from_trials",
    "estimate_trial_cost", "admits", "trial_cap", "trial_cap_basis", "CAP_FACTOR", "charged_gpu_seconds", "LEDGER_ATTRS",
]

_UNITS = {"gpuh": 3600.0, "gpum": 60.0, "gpus": 1.0}
_BUDGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(gpuh|gpum|gpus)\s*$", re.IGNORECASE)


def parse_budget(text: str) -> float:
    """GPU-seconds from a budget string: ``40gpuh``, ``90gpum``, ``600gpus``.

    Raises:
        BudgetError: naming the text and the accepted forms.
    """
    m = _BUDGET_RE.match(str(text))
    if not m:
        raise BudgetError(
            f"bad budget {text!r}: write a positive number and a unit, e.g. 40gpuh, 90gpum, 600gpus")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value):
        raise BudgetError(f"bad budget {text!r}: not a finite number")
    if value <= 0:
        raise BudgetError(f"bad budget {text!r}: must be more than zero")
    return value


def format_gpu_hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600.0:.2f} GPU-h"


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """What one trial costs the budget."""

    number: int
    state: str
    """Optuna state name: COMPLETE, RUNNING, FAIL, WAITING, PRUNED."""
    gpu_seconds: float | None
    """Measured by the launcher when the trial finished."""
    reserved_gpu_seconds: float | None
    """Reserved at admission; counts while running."""
    ran_gpu_seconds: float | None = None
    """What the trial had run by its last heartbeat (tuner.study); a dead coordinator's
    trial is charged this, not its reservation."""

    @property
    def charged_gpu_seconds(self) -> float:
        return charged_gpu_seconds(self.state, self.gpu_seconds, self.reserved_gpu_seconds, self.ran_gpu_seconds)


def charged_gpu_seconds(state: str, gpu_seconds: float | None, reserved_gpu_seconds: float | None,
                        ran_gpu_seconds: float | None = None) -> float:
    """What one trial costs the budget: the GPU-seconds measured when it finished; while it
    runs, what was reserved for it; when its coordinator died, the time it ran by its last
    heartbeat (its reservation when it never beat); else nothing.

    Example:
        >>> charged_gpu_seconds("RUNNING", None, 300.0), charged_gpu_seconds("COMPLETE", 120.0, 300.0)
        (300.0, 120.0)
        >>> charged_gpu_seconds("FAIL", None, 300.0, ran_gpu_seconds=40.0)
        40.0
    """
    if gpu_seconds is not None:
        return float(gpu_seconds)
    if state == "FAIL" and ran_gpu_seconds is not None:
        return float(ran_gpu_seconds) if reserved_gpu_seconds is None else min(float(ran_gpu_seconds),
                                                                             float(reserved_gpu_seconds))
    if state in ("RUNNING", "FAIL") and reserved_gpu_seconds is not None:
        return float(reserved_gpu_seconds)
    return 0.0


@dataclass(frozen=True, kw_only=True)
class Ledger:
    limit_gpu_seconds: float
    entries: tuple[LedgerEntry, ...]

    @property
    def used_gpu_seconds(self) -> float:
        return sum(e.charged_gpu_seconds for e in self.entries)

    @property
    def left_gpu_seconds(self) -> float:
        return max(0.0, self.limit_gpu_seconds - self.used_gpu_seconds)

    @property
    def measured_costs(self) -> list[float]:
        """GPU-seconds of finished trials, in trial order (the basis of cost estimates)."""
        return [e.gpu_seconds for e in sorted(self.entries, key=lambda e: e.number)
                if e.state == "COMPLETE" and e.gpu_seconds is not None]


LEDGER_ATTRS = ("gpu_seconds", "reserved_gpu_seconds", "ran_gpu_seconds", "recovered_from", "status", "warm",
                "worker_startup_gpu_seconds")
"""The user attrs that :func:`ledger_from_trials`, ``costs_from_trials`` and ``cap_basis`` read:
trials carrying only these (tuner.storage.ledger_view, the admission lock's one-query read) give
them the same numbers as full trials."""


def ledger_from_trials(trials: Iterable[Any], limit_gpu_seconds: float) -> Ledger:
    """Build the ledger from Optuna FrozenTrials (or anything with number/state/user_attrs).

    A trial found stale whose result was later recovered from the spool (tuner.study) costs
    nothing itself: the recovered trial carries the GPU-seconds it measured.
    """
    trials = list(trials)
    recovered = {t.user_attrs.get("recovered_from") for t in trials} - {None}
    entries = []
    for t in trials:
        attrs: Mapping[str, Any] = t.user_attrs
        gone = t.number in recovered
        entries.append(LedgerEntry(
            number=t.number, state=t.state.name,
            gpu_seconds=0.0 if gone else _float_or_none(attrs.get("gpu_seconds")),
            reserved_gpu_seconds=_float_or_none(attrs.get("reserved_gpu_seconds")),
            ran_gpu_seconds=_float_or_none(attrs.get("ran_gpu_seconds"))))
    return Ledger(limit_gpu_seconds=limit_gpu_seconds, entries=tuple(entries))


def _float_or_none(v: Any) -> float | None:
    return None if v is None else float(v)


def estimate_trial_cost(measured_costs: list[float], *, first_estimate_gpu_seconds: float) -> float:
    """Expected GPU-seconds of the next trial.

    Before any trial finished, the spec's estimate. Afterwards the median of the recent
    finished trials (the last 10): robust to one slow outlier, and tracks drift as the
    sampler moves into other regions of the space.
    """
    if not measured_costs:
        return first_estimate_gpu_seconds
    return float(statistics.median(measured_costs[-10:]))


def admits(ledger: Ledger, cost_gpu_seconds: float) -> bool:
    """True when a trial of this estimated cost fits in what is left."""
    return cost_gpu_seconds <= ledger.left_gpu_seconds


CAP_FACTOR = 3.0
"""A trial may cost up to this many times the estimate before it is stopped."""


def trial_cap_basis(estimate_gpu_seconds: float, costliest_ok_gpu_seconds: float | None = None) -> float:
    """What a trial's cap is CAP_FACTOR times when the budget is not short: the larger of the
    estimate and the study's costliest ok trial (tuner.budget.cap_basis; see trial_cap)."""
    return max(estimate_gpu_seconds, costliest_ok_gpu_seconds or 0.0)


def trial_cap(ledger: Ledger, estimate_gpu_seconds: float, costliest_ok_gpu_seconds: float | None = None) -> float | None:
    """GPU-seconds to reserve for the next trial (and stop it at), or None when it does not fit.

    Reserving the cap, not the estimate, is what keeps concurrent coordinators inside the
    budget: every in-flight trial holds its worst case until it reports what it really
    cost, and the launcher stops it at the cap.

    The cap is CAP_FACTOR x the larger of the estimate and ``costliest_ok_gpu_seconds`` (the
    costliest trial of the study that ran ok: tuner.budget.cap_basis). The estimate is a
    median, and with adaptive measurement most trials stop after a few steps: a cap of 3x
    their median cut the best configs short and timed out every config that rebuilt its
    model (13B x 8 H100 sim: 30 of ~800 launched trials, all with activation checkpointing,
    recorded as the config's timeout; docs/benchmarks.md). The study's own costliest ok run
    is what a full-length trial with a fresh start-up costs here.
    """
    if not admits(ledger, estimate_gpu_seconds):
        return None
    return min(ledger.left_gpu_seconds, CAP_FACTOR * trial_cap_basis(estimate_gpu_seconds, costliest_ok_gpu_seconds))
