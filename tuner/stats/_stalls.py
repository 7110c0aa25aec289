"""Where a study's runs stall: configs compared on their steady steps, the stalls' cost pooled.

A stall (a checkpoint write, garbage collection, a data-shard boundary) takes a step two or
three times as long, every few steps. A full job's long-run rate includes its stalls (the
estimand), but over a trial of 8 steps one stall more or less moves a run's mean by 10-20%:
per-run CIs are then wide, and one-knob effects and near-tied configs drown in it. Where the
stalls check (tuner.stats' ``noise_diagnostics``) flags a study and the stalls cost every
config alike, each ok run is read as

    rate_run = steady rate_run / O,

its tokens over time on its steady steps (the steps not flagged as stalls, by the check's own
cut), over the study's stall overhead ``O``: the mean over runs of a run's mean step time
over its steady steps' mean step time. ``O`` is one estimate shared by every run (its log se
is marked tuner.stats ``SHARED_SE``: counted once in a config's interval, cancelled between two
configs); a run's own se is its steady steps' AR(1) noise (phi and sigma^2 read from their
residuals about each run's steady mean, at the steps' own indices, by tuner.stats'
``ar1_moments``; the exact variance of a mean of AR(1) steps). Runs too short to read (under 4
steps, or under 3 steady ones) keep their plain CI.

**The guard.** Stalls that some knob causes (no DataLoader workers starving every few
steps) are a real effect on throughput, and pooling them would hide it. So each knob's levels
are compared in their runs' log overhead (one-way ANOVA over its levels, a level run once
included, and a knob a run does not set counted as a level of its own); where any knob's p,
times the number of knobs tested, is under :data:`GUARD_ALPHA`,
the study is read with the plain means (every run's stalls its own) and the check says which
knob the stalls follow.

Per-trial numbers stay about their launch (its own stalls): analysis.json's trials keep the
plain CI, carried as each moved run's ``launch`` entry.

Example:
    >>> import numpy as np
    >>> from tuner.stats import TrialRecord, trial_cis
    >>> rng = np.random.default_rng(0)
    >>> runs = []
    >>> for n in range(40):
    ...     rate = 1000.0 * (1.2 if n % 2 else 1.0) * np.exp(rng.normal(0, 0.02, 8))
    ...     rate[rng.integers(4)::4] /= 2.5                       # a stall every 4th step
    ...     runs.append(TrialRecord(number=n, state="COMPLETE", status="ok", params={"k": n % 2},
    ...                             steps=tuple(rate), value=float(rate.mean())))
    >>> moved, fit = stall_corrected(runs, trial_cis(runs)[0])
    >>> round(fit.overhead, 2), fit.guard["refused"]
    (1.38, False)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.stats._ar1_moments import ar1_moments, correlation, residual_part
from tuner.stats._configs import SHARED_SE
from tuner.stats._diagnostics import stall_check

__all__ = ["StallFit", "stall_corrected", "GUARD_ALPHA"]

GUARD_ALPHA = 0.01
"""The guard's level: stalls that follow a knob (Bonferroni over the knobs tested) are not pooled."""
_MIN_RUNS = 6
_MIN_STEADY = 3


@dataclass(frozen=True)
class StallFit:
    overhead: float
    """``O``: the mean over runs of (mean step time / steady steps' mean step time)."""
    overhead_log_se: float
    """The sd of log ``O`` (the runs' spread over their number): shared by every moved run."""
    steady_rel_sd: float
    """The steady steps' pooled log sd about their run's steady mean."""
    steady_phi: float
    """Their AR(1) coefficient (tuner.stats' ``ar1_moments``)."""
    stall_step_share: float
    n_runs: int
    guard: dict[str, Any]
    """{"refused": bool, "knob": the knob the stalls follow most, "p_value": its p (Bonferroni)}."""

    def as_dict(self) -> dict[str, Any]:
        return {"overhead": self.overhead, "overhead_log_se": self.overhead_log_se,
                "steady_rel_sd": self.steady_rel_sd, "steady_phi": self.steady_phi,
                "stall_step_share": self.stall_step_share, "n_runs": self.n_runs, "guard": self.guard}


def _runs(trials: Sequence[Any], cis: dict[int, dict[str, Any]], cut: float) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """(trial, log rates, stall mask) of each ok run with at least _MIN_STEADY steady steps."""
    out = []
    for t in trials:
        ci = cis.get(t.number)
        if ci is None or t.status != "ok":
            continue
        r = np.asarray(t.steps[int(ci.get("warmup_steps_dropped") or 0):], float)
        if len(r) < 4 or not np.all(r > 0):
            continue
        y = np.log(r)
        stall = y - np.median(y) < -cut
        if int((~stall).sum()) >= _MIN_STEADY:
            out.append((t, y, stall))
    return out


def _guard(runs: list[tuple[Any, np.ndarray, np.ndarray]], log_overhead: np.ndarray) -> dict[str, Any]:
    from scipy import stats

    knobs = sorted({k for t, _, _ in runs for k in t.params})
    by_knob: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (t, _, _), lo in zip(runs, log_overhead):
        for knob in knobs:   # a knob a run does not set (inactive) is a level of its own
            by_knob[knob][repr(t.params.get(knob, "<unset>"))].append(float(lo))
    tested = {}
    for knob, levels in by_knob.items():
        # a level run once is compared too (a rarely visited slow level is where a knob's stalls
        # hide): the other levels' spread is the yardstick
        groups = list(levels.values())
        if len(groups) >= 2 and any(len(g) >= 2 and np.ptp(g) > 0 for g in groups):
            tested[knob] = float(stats.f_oneway(*groups).pvalue)
    if not tested:
        return {"refused": False, "knob": None, "p_value": None}
    knob = min(tested, key=tested.get)
    p = min(1.0, tested[knob] * len(tested))
    return {"refused": bool(p < GUARD_ALPHA), "knob": knob, "p_value": p}


def stall_corrected(trials: Sequence[Any], cis: dict[int, dict[str, Any]]) -> tuple[dict[int, dict[str, Any]],
                                                                                StallFit | None]:
    """(the runs' CIs read as the module doc says, the fit): ``cis`` unchanged and None where
    the stalls check does not flag the study or too few runs can be read; ``cis`` unchanged and
    the fit (``guard.refused``) where the stalls follow a knob."""
    check = stall_check(trials, cis)
    if not check["flagged"]:
        return cis, None
    runs = _runs(trials, cis, check["log_cut"])
    if len(runs) < _MIN_RUNS:
        return cis, None
    overheads, parts = [], []
    for _, y, stall in runs:
        time = np.exp(-y)   # a step's time per token, up to a constant
        overheads.append(float(time.mean() / time[~stall].mean()))
        # the steady steps at their own indices: a stall between two leaves a gap in the AR(1) chain
        parts.append(residual_part(np.flatnonzero(~stall), y[~stall]))
    o = np.asarray(overheads)
    overhead = float(o.mean())
    log_se = float(o.std(ddof=1) / math.sqrt(len(o)) / overhead)
    phi, var = ar1_moments(parts)
    guard = _guard(runs, np.log(o))
    fit = StallFit(overhead=overhead, overhead_log_se=log_se, steady_rel_sd=math.sqrt(var), steady_phi=phi,
                   stall_step_share=float(check["slow_step_share"]), n_runs=len(runs), guard=guard)
    if guard["refused"]:
        return cis, fit
    out = dict(cis)
    for (t, y, stall), part in zip(runs, parts):
        ci = cis[t.number]
        steady_rate = float(1.0 / np.exp(-y[~stall]).mean())    # tokens over time on the steady steps
        mean = steady_rate / overhead
        own = math.sqrt(var * float(correlation(part.t, phi).sum()) / len(part.t) ** 2)   # AR(1): 1'R1 / n^2
        rel = math.sqrt(own**2 + log_se**2)
        q = (ci["ci95"][1] - ci["mean"]) / ci["se"] if ci["se"] > 0 else 1.96
        out[t.number] = {**ci, "mean": mean, "se": rel * mean, "ci95": [mean * math.exp(-q * rel), mean * math.exp(q * rel)],
                         SHARED_SE: log_se, "launch": {"mean": ci["mean"], "ci95": ci["ci95"]},
                         "stall_overhead": overhead}
    return out, fit
