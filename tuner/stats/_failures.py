"""How often configs fail: per knob level and per config, with exact binomial CIs.

A run is a *failure of its config* when its status is `oom`, `timeout` or `error`. Any other
status that is not `ok` (`fail`: the coordinator died; `skipped`, `pruned`,
`stopped_by_budget`: never ran or was stopped by the tuner) says nothing about the config and
is left out of both the numerator and the denominator. CIs are Clopper-Pearson
(``scipy.stats.binomtest(...).proportion_ci(method="exact")``).

A config's failure probability is estimated from every run of the study, not only its own
(one success at a level that fails most of the time proves little): a logistic regression of
failure on the knobs' levels (one-hot, L2-penalised: scikit-learn's objective and solver,
fitted with SciPy), which separates a level
that fails from levels that merely ran alongside it, gives a prior; the config's own runs
update it as ``PRIOR_RUNS`` pseudo-runs would (a beta-binomial posterior mean), leaving out
the search run that put the config on the shortlist (it succeeded by selection). A config is
**flaky** when that estimate is at least ``FLAKY_FAILURE_RATE``; a failed re-measurement thus
demotes the config it re-measured.

Example:
    >>> failure_rate(3, 12)["rate"]
    0.25
    >>> failure_rate(3, 12)["ci95"][0] < 0.25 < failure_rate(3, 12)["ci95"][1]
    True
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.stats._record import TrialRecord

__all__ = ["FAILURE_STATUSES", "FLAKY_FAILURE_RATE", "failure_rate", "level_failures", "config_failure", "neighbour_risk",
           "is_failure", "is_attempt", "config_key", "failure_model", "attempts_by_config"]

FAILURE_STATUSES = ("oom", "timeout", "error")
FLAKY_FAILURE_RATE = 0.25
"""A config failing this often is never recommended silently (issue 12)."""
MIN_LEVEL_RUNS = 4
PRIOR_RUNS = 4.0
"""Weight of the study-wide failure model against a config's own runs, in runs."""
RISK_CONFIDENCE = 0.90
"""The one-sided level of the risk flag's bound (:func:`neighbour_risk`): a warning, where a
miss costs a team a config that fails a quarter of its launches and a false alarm costs one
line of RECIPE. At 95% it missed 3 of 66 such recommendations in 800 studies, at 90% none,
with no false flag there or in 400 other studies (docs/benchmarks.md)."""


def is_failure(t: TrialRecord) -> bool:
    return t.state == "COMPLETE" and t.status in FAILURE_STATUSES


def is_attempt(t: TrialRecord) -> bool:
    """A run that tells whether its config works: ok, or a failure of the config."""
    return t.state == "COMPLETE" and (t.status == "ok" or t.status in FAILURE_STATUSES)


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def attempts_by_config(trials: Sequence[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """config_key -> the config's attempts (:func:`is_attempt`) in trial order: the index
    :func:`config_failure` reads when it is asked about many configs of one study."""
    out: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if is_attempt(t):
            out.setdefault(config_key(t.params), []).append(t)
    return out


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


def failure_model(trials: Sequence[TrialRecord], knobs: Sequence[str]):
    """A function params -> the study-wide failure probability of that config (see the module doc)."""
    runs = [t for t in trials if is_attempt(t)]
    y = np.array([is_failure(t) for t in runs], float)
    if not runs or y.sum() == 0 or y.sum() == len(y):
        rate = float(y.mean()) if runs else 0.0
        return lambda params: rate
    columns: dict[tuple[int, str], int] = {}   # (knob, level) -> one-hot column, levels sorted per knob
    for j, k in enumerate(knobs):
        for level in sorted({_level(t.params.get(k)) for t in runs}):
            columns[(j, level)] = len(columns)
    x = np.zeros((len(runs), len(columns)))
    for i, t in enumerate(runs):
        x[i, [columns[(j, _level(t.params.get(k)))] for j, k in enumerate(knobs)]] = 1.0
    coef, intercept = _l2_logistic(x, y, c=10.0)
    # the fitted model is linear in the one-hot codes: a config's log-odds is the intercept plus
    # one coefficient per knob level (a level the fit never saw adds 0), read from a dict
    weights = {key: float(coef[col]) for key, col in columns.items()}

    def probability(params: dict[str, Any]) -> float:
        z = intercept + sum(weights.get((j, _level(params.get(k))), 0.0) for j, k in enumerate(knobs))
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    return probability


def _l2_logistic(x: np.ndarray, y: np.ndarray, *, c: float) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of an L2-penalised logistic regression, the intercept
    unpenalised: scikit-learn's ``LogisticRegression(C=c)`` objective and lbfgs solver
    (mean log-loss + ||w||^2 / (2 c n), SciPy's L-BFGS-B from zero, gtol 1e-4), without
    importing scikit-learn (and pandas with it: a third of `tuner analyze`'s start-up).
    tests/stats/test_failures.py holds its probabilities to scikit-learn's."""
    from scipy.optimize import minimize
    from scipy.special import expit

    n, m = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    strength = 1.0 / (c * n)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = xb @ w
        # log(1 + e^z) - y z, stably; its gradient is (sigmoid(z) - y)
        value = float(np.mean(np.logaddexp(0.0, z) - y * z)) + 0.5 * strength * float(w[:m] @ w[:m])
        grad = xb.T @ (expit(z) - y) / n
        grad[:m] += strength * w[:m]
        return value, grad

    fit = minimize(loss, np.zeros(m + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": 1000, "gtol": 1e-4, "ftol": 64 * np.finfo(float).eps, "maxls": 50})
    return fit.x[:m], float(fit.x[m])


def config_failure(params: dict[str, Any], trials: Sequence[TrialRecord],
                   levels: dict[str, dict[str, dict[str, Any]]], model=None, *,
                   attempts: dict[str, list[TrialRecord]] | None = None) -> dict[str, Any]:
    """A config's own failure rate, the study-wide model's estimate, the combined estimate,
    the worst of its levels (for the report), and whether it is flaky. ``attempts``: the
    study's :func:`attempts_by_config`, for callers that ask about many configs (without it,
    each call scans every trial)."""
    key = config_key(params)
    own_runs = (list(attempts.get(key, ())) if attempts is not None
                else [t for t in trials if is_attempt(t) and config_key(t.params) == key])
    # the search run that put a config on the shortlist succeeded by selection: it is no
    # evidence of reliability
    first_ok = next((t for t in own_runs if t.status == "ok" and t.role is None), None)
    own_runs = [t for t in own_runs if t is not first_ok]
    n_fail = sum(is_failure(t) for t in own_runs)
    own = failure_rate(n_fail, len(own_runs))
    prior = model(params) if model is not None else 0.0
    estimate = (n_fail + PRIOR_RUNS * prior) / (len(own_runs) + PRIOR_RUNS)
    worst = None
    for k, by_level in levels.items():
        d = by_level.get(_level(params.get(k)))
        if d and d["runs"] >= MIN_LEVEL_RUNS and (worst is None or d["rate"] > worst["rate"]):
            worst = {"knob": k, "level": _level(params.get(k)), **d}
    return {"own": own, "model": prior, "worst_level": worst, "estimate": estimate,
            "flaky": estimate >= FLAKY_FAILURE_RATE}


def neighbour_risk(params: dict[str, Any], trials: Sequence[TrialRecord], knobs: Sequence[str]) -> dict[str, Any] | None:
    """The config's neighbourhood that fails most surely: of the runs sharing one of its levels,
    or two of them (an interaction: micro_batch 8 fails with one setting of checkpointing and
    not with the other), the group whose exact one-sided 90% lower bound on the failure rate
    (``lower90``: Clopper-Pearson, the exact binomial test that the rate exceeds it at 10%,
    :data:`RISK_CONFIDENCE`) is highest; its two-sided 95% CI beside it. Groups of fewer than MIN_LEVEL_RUNS runs are left
    out. A lower bound at or above FLAKY_FAILURE_RATE says the config's own levels fail that
    often, whatever the additive model (tuner.stats.failure_model) says; None when no group
    qualifies."""
    from scipy import stats

    runs = [(t, {k: _level(t.params.get(k)) for k in knobs}) for t in trials if is_attempt(t)]
    lv = {k: _level(params.get(k)) for k in knobs}
    cells = [(k,) for k in knobs] + [(a, b) for i, a in enumerate(knobs) for b in knobs[i + 1:]]
    best = None
    for cell in cells:
        group = [t for t, tl in runs if all(tl[k] == lv[k] for k in cell)]
        if len(group) < MIN_LEVEL_RUNS:
            continue
        failed = sum(is_failure(t) for t in group)
        lower = float(stats.binomtest(failed, len(group), alternative="greater").proportion_ci(
            confidence_level=RISK_CONFIDENCE, method="exact").low)
        if best is None or lower > best["lower90"]:
            best = {"knobs": {k: lv[k] for k in cell}, **failure_rate(failed, len(group)), "lower90": lower}
    return best
