"""How often configs fail: per knob level and per config, with exact binomial CIs.

A run is a *failure of its config* when its status is `oom`, `timeout` or `error`. Any other
status that is not `ok` (`fail`: the coordinator died; `skipped`, `pruned`,
`stopped_by_budget`: never ran or was stopped by the tuner) says nothing about the config and
is left out of both the numerator and the denominator. CIs are Clopper-Pearson
(``scipy.stats.binomtest(...).proportion_ci(method="exact")``).

A config is **flaky** when its estimated failure probability is at least
``FLAKY_FAILURE_RATE``: the larger of its own runs' failure rate and the worst rate among its
knob levels (levels with at least ``MIN_LEVEL_RUNS`` runs). The level part is conservative:
a config that succeeded once at a level that fails most of the time is not trusted on one
success.

Example:
    >>> failure_rate(3, 12)["rate"]
    0.25
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tuner.record import TrialRecord

__all__ = ["FAILURE_STATUSES", "FLAKY_FAILURE_RATE", "failure_rate", "level_failures", "config_failure",
           "is_failure", "is_attempt", "config_key"]

FAILURE_STATUSES = ("oom", "timeout", "error")
FLAKY_FAILURE_RATE = 0.25
"""A config failing this often is never recommended silently (issue 12)."""
MIN_LEVEL_RUNS = 4


def is_failure(t: TrialRecord) -> bool:
    return t.state == "COMPLETE" and t.status in FAILURE_STATUSES


def is_attempt(t: TrialRecord) -> bool:
    """A run that tells whether its config works: ok, or a failure of the config."""
    return t.state == "COMPLETE" and (t.status == "ok" or t.status in FAILURE_STATUSES)


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def failure_rate(failures: int, runs: int) -> dict[str, Any]:
    """{"failures", "runs", "rate", "ci95"} with a Clopper-Pearson interval; rate None if no run."""
    from scipy import stats

    if runs <= 0:
        return {"failures": 0, "runs": 0, "rate": None, "ci95": None}
    ci = stats.binomtest(failures, runs).proportion_ci(confidence_level=0.95, method="exact")
    return {"failures": failures, "runs": runs, "rate": failures / runs, "ci95": [float(ci.low), float(ci.high)]}


def _level(value: Any) -> str:
    return "n/a" if value is None else json.dumps(value)


def level_failures(trials: Sequence[TrialRecord], knobs: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """knob -> level -> failure_rate over every attempt (search, baseline, ablation runs)."""
    runs = [t for t in trials if is_attempt(t)]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for k in knobs:
        levels: dict[str, list[TrialRecord]] = {}
        for t in runs:
            levels.setdefault(_level(t.params.get(k)), []).append(t)
        out[k] = {lv: failure_rate(sum(is_failure(t) for t in ts), len(ts)) for lv, ts in sorted(levels.items())}
    return out


def config_failure(params: dict[str, Any], trials: Sequence[TrialRecord],
                   levels: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """A config's own failure rate, the worst of its levels', and whether it is flaky."""
    key = config_key(params)
    own_runs = [t for t in trials if is_attempt(t) and config_key(t.params) == key]
    own = failure_rate(sum(is_failure(t) for t in own_runs), len(own_runs))
    worst = None
    for k, by_level in levels.items():
        d = by_level.get(_level(params.get(k)))
        if d and d["runs"] >= MIN_LEVEL_RUNS and (worst is None or d["rate"] > worst["rate"]):
            worst = {"knob": k, "level": _level(params.get(k)), **d}
    estimate = max(own["rate"] or 0.0, worst["rate"] if worst else 0.0)
    return {"own": own, "worst_level": worst, "estimate": estimate, "flaky": estimate >= FLAKY_FAILURE_RATE}
