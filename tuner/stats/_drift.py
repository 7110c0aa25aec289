"""Where throughput drifts inside runs: each run's long-run rate from one pooled fit, with the
uncertainty of how far the drift goes.

A full job runs for hours; a trial measures a few steps. Where the rate inside runs falls
(thermal throttling, a filling cache) or rises (warm-up the truncation left in) and settles,
the mean of the measured steps does not read the long run: a falling run's mean reads high.
When tuner.stats' drift check flags a study (a pooled within-run slope, p < 0.001, at least 1%
over a run), every ok run's number is moved to its plateau under one model fitted to all runs:

    log rate(t) = log plateau_run + a exp(-t / tau) + AR(1) noise,

``t`` the step's index since the run started (warm-up steps included), ``a`` and ``tau``
shared by the study's runs (one cluster, one thermal behaviour), each run its own plateau.

- For each settling time ``tau`` of a grid, ``a`` is the pooled within-run least-squares slope
  on ``exp(-t / tau)`` (run means removed: the plateaus drop out). The ``tau`` with the smallest
  residual sum of squares (SSE) gives the estimate: a run's plateau is its measured log mean
  minus ``a`` x the mean of ``exp(-t / tau)`` over its measured steps.
- How far the drift goes past the last measured step is what a short run knows least: a drift
  settling in 4 steps and one settling in 16 can fit 8 steps about equally well and put the
  plateau far apart. Every ``tau`` the data do not reject (a profile likelihood ratio,
  ``n_eff log(SSE_tau / SSE_best) <= 3.84``, 95%, with ``n_eff`` the steps discounted for
  their lag-1 autocorrelation ``phi`` as (1 - phi) / (1 + phi)) gives its own plateau; their
  range, read as +-1.96 sd, is added to each run's variance, with the slope's own variance
  (``var(a)``, the same discount).
- A launch's own ``a`` scatters about the pooled one (one run throttles harder than the next),
  and moving that run by the pooled ``a`` leaves its own part in its plateau: an error that its
  steps cannot average away. Each run's own slope ``a_i`` at the best ``tau`` estimates it, and
  the spread of the ``a_i`` beyond their sampling variance (the DerSimonian-Laird moment over
  runs) is the launch-to-launch sd of ``a``; ``g_i`` x that sd (``g_i`` the mean of
  ``exp(-t / tau)`` over the run's measured steps) is added to each run's variance too. Without
  it the moved runs' CIs covered their launch's own plateau in 0.89 of drift studies' runs
  (docs/statistics.md, section 6).
- ``phi`` is the lag-1 autocorrelation of the fit's residuals, bias-corrected for the run
  means removed (a drifting series makes the
  study's pooled AR(1) model read a trend as phi near 1, and its per-run se with it): a moved
  run's se is the fit's residual variance over its steps, discounted the same way.

The estimand is stated in analysis.json: the long-run (plateau) rate of a full job.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> t = np.arange(8)
    >>> runs = [np.log(1000.0 * (1 + 0.1 * np.exp(-t / 4))) + rng.normal(0, 0.01, 8) for _ in range(60)]
    >>> fit = drift_fit([(t, r) for r in runs])
    >>> round(fit.amplitude, 2), fit.tau_steps, fit.tau_range[0] <= 4.0 <= fit.tau_range[1]
    (0.1, 4.0, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.stats._ar1_moments import ar1_moments, correlation, residual_part
from tuner.stats._configs import SHARED_SE
from tuner.stats._diagnostics import drift_check
from tuner.stats._stalls import stall_corrected
from tuner.stats._trial_ci import trial_cis

__all__ = ["DriftFit", "drift_fit", "drift_corrected", "run_cis", "moved_values", "TAU_GRID", "LR_CUT"]

TAU_GRID = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 64.0)
"""Candidate settling times, in steps."""
LR_CUT = 3.84
"""The profile likelihood ratio a settling time may reach and stay in the range (chi2(1), 95%)."""
_MIN_RUNS = 3


@dataclass(frozen=True)
class DriftFit:
    amplitude: float
    """``a``: the log rate at t = 0 above (> 0) or below (< 0) the plateau, at the best ``tau``."""
    amplitude_se: float
    tau_steps: float
    """How many steps the drift takes to fall to 1/e of its start (the best fit)."""
    tau_range: tuple[float, float]
    """The settling times the data do not reject (the module doc)."""
    amplitudes: tuple[tuple[float, float], ...]
    """(tau, a) for each settling time in the range."""
    residual_phi: float
    residual_var: float
    """The steps' log variance about the fit (per step, before the autocorrelation discount)."""
    n_runs: int
    amplitude_launch_sd: float = 0.0
    """The sd of a launch's own ``a`` about the pooled one, at the best ``tau`` (the module doc)."""

    def run_se(self, n_steps: int) -> float:
        """A run's relative se under the fitted noise: the residual variance over its steps,
        discounted for their autocorrelation."""
        phi = self.residual_phi
        return math.sqrt(self.residual_var / max(1, n_steps) * (1 + phi) / (1 - phi))

    def shift(self, t: np.ndarray) -> float:
        """A run's measured log mean minus its plateau (the best fit), ``t``: its steps' indices."""
        return self.amplitude * float(np.mean(np.exp(-np.asarray(t, float) / self.tau_steps)))

    def shift_sd(self, t: np.ndarray) -> float:
        """The sd of :meth:`shift` as the run's plateau error: the fit's own
        (:meth:`shared_shift_sd`) and the launch's own ``a`` about the pooled one
        (:attr:`amplitude_launch_sd`)."""
        g = float(np.mean(np.exp(-np.asarray(t, float) / self.tau_steps)))
        return math.sqrt(self.shared_shift_sd(t) ** 2 + (g * self.amplitude_launch_sd) ** 2)

    def shared_shift_sd(self, t: np.ndarray) -> float:
        """The part of :meth:`shift_sd` that comes from the one fit every run is moved by: the
        slope's own sd and the spread of the plateaus the settling times in range give (their
        range as +-1.96 sd). It moves every run of the study the same way: it does not average
        away over a config's runs, and cancels between two configs (tuner.stats.SHARED_SE)."""
        t = np.asarray(t, float)
        shifts = [a * float(np.mean(np.exp(-t / tau))) for tau, a in self.amplitudes]
        g = float(np.mean(np.exp(-t / self.tau_steps)))
        spread = (max(shifts) - min(shifts)) / (2 * 1.96) if shifts else 0.0
        return math.sqrt((g * self.amplitude_se) ** 2 + spread**2)

    def as_dict(self) -> dict[str, Any]:
        return {"amplitude": self.amplitude, "amplitude_se": self.amplitude_se, "tau_steps": self.tau_steps,
                "tau_range_steps": list(self.tau_range), "amplitude_launch_sd": self.amplitude_launch_sd,
                "residual_phi": self.residual_phi, "n_runs": self.n_runs}


def drift_fit(runs: Sequence[tuple[np.ndarray, np.ndarray]], *, taus: Sequence[float] = TAU_GRID) -> DriftFit | None:
    """The pooled fit of the module doc over ``runs``: (step indices since the run started, log
    rates) per run. None with fewer than 3 runs of 3 steps or more."""
    runs = [(np.asarray(t, float), np.asarray(y, float)) for t, y in runs if len(y) >= 3]
    if len(runs) < _MIN_RUNS:
        return None
    yc = np.concatenate([y - y.mean() for _, y in runs])
    fits = []   # (sse, tau, a, sxx, residuals)
    for tau in taus:
        gc = np.concatenate([np.exp(-t / tau) - np.exp(-t / tau).mean() for t, _ in runs])
        sxx = float(gc @ gc)
        if sxx <= 1e-12:
            continue
        a = float(gc @ yc) / sxx
        resid = yc - a * gc
        fits.append((float(resid @ resid), float(tau), a, sxx, resid))
    if not fits:
        return None
    sse, tau, a, sxx, resid = min(fits, key=lambda f: f[0])
    ends = np.cumsum([len(y) for _, y in runs])
    lag = np.ones(len(resid), bool)
    lag[0] = False
    lag[ends[:-1]] = False            # no lag pair across two runs
    # lag-1 autocorrelation of the residuals, less the downward bias of removing each short
    # run's mean (Marriott & Pope 1954: about -(1 + 3 phi) / n for runs of n steps)
    raw = float((resid[1:] * resid[:-1])[lag[1:]].sum() / max(sse, 1e-300))
    phi = float(np.clip(raw + (1 + 3 * raw) / (len(yc) / len(runs)), 0.0, 0.95))
    discount = (1 - phi) / (1 + phi)
    n_eff = len(yc) * discount
    kept = [(f[1], f[2]) for f in fits if n_eff * math.log(max(f[0], 1e-300) / max(sse, 1e-300)) <= LR_CUT]
    dof = max(1, len(yc) - len(runs) - 2)
    var_a = sse / dof / sxx / discount
    return DriftFit(amplitude=a, amplitude_se=math.sqrt(var_a), tau_steps=tau,
                    tau_range=(min(k[0] for k in kept), max(k[0] for k in kept)), amplitudes=tuple(kept),
                    residual_phi=phi, residual_var=sse / dof, n_runs=len(runs),
                    amplitude_launch_sd=_launch_sd(runs, tau))


def _launch_sd(runs: Sequence[tuple[np.ndarray, np.ndarray]], tau: float) -> float:
    """The sd of the runs' own slopes on ``exp(-t / tau)`` beyond their sampling variance: the
    DerSimonian-Laird moment estimator over runs, 0 where they scatter no more than their
    noise. A slope's sampling variance under AR(1) steps is sigma^2 g'Rg / (g'g)^2 (``g`` the
    run's centred regressor, R_jk = phi^|j - k|), phi and sigma^2 read from the residuals about
    each run's own mean and slope by moments that count what those fits take away
    (tuner.stats' ``ar1_moments``). Over 8 steps the usual lag-1 estimate reads phi 0.5 as
    about 0.4, and the mean's discount (1 + phi) / (1 - phi) misstates a slope's variance 1.9x:
    either reads a scatter where there is none, or hides one."""
    parts, slopes, leverages = [], [], []
    for t, y in runs:
        g = np.exp(-t / tau)
        g = g - g.mean()
        sxx = float(g @ g)
        if sxx <= 1e-12:
            continue
        parts.append(residual_part(t, y, g))
        slopes.append(float(g @ (y - y.mean())) / sxx)
        leverages.append((t, g, sxx))
    if len(slopes) < _MIN_RUNS:
        return 0.0
    phi, sigma2 = ar1_moments(parts)
    if sigma2 <= 0:
        return 0.0
    a = np.asarray(slopes)
    w = 1.0 / np.array([sigma2 * float(g @ correlation(t, phi) @ g) / sxx**2 for t, g, sxx in leverages])
    q = float(w @ (a - (w @ a) / w.sum()) ** 2)
    return math.sqrt(max(0.0, (q - (len(a) - 1)) / (w.sum() - (w @ w) / w.sum())))


def drift_corrected(trials: Sequence[Any], cis: dict[int, dict[str, Any]]) -> tuple[dict[int, dict[str, Any]],
                                                                                 DriftFit | None]:
    """(every ok run's CI moved to its plateau, the fit): ``cis`` as tuner.stats.trial_cis gives
    them, the fit over their measured steps (warm-up dropped). A run keeps its CI where the fit
    is not possible; each moved CI says so (``drift_shift``: the log change applied)."""
    runs, numbers = [], []
    for t in trials:
        ci = cis.get(t.number)
        if ci is None or t.status != "ok":
            continue
        d = int(ci.get("warmup_steps_dropped") or 0)
        r = np.asarray(t.steps[d:], float)
        if len(r) >= 3 and np.all(r > 0):
            runs.append((d + np.arange(len(r)), np.log(r)))
            numbers.append(t.number)
    fit = drift_fit(runs)
    if fit is None:
        return cis, None
    out = dict(cis)
    for number, (t, _) in zip(numbers, runs):
        ci = cis[number]
        shift = fit.shift(t)
        factor = math.exp(-shift)
        # the run's own se under the fit's noise (the study's AR(1) model read the drift as
        # noise, phi near 1), plus the plateau's: the slope's and the settling time's
        new_rel_se = math.sqrt(fit.run_se(len(t)) ** 2 + fit.shift_sd(t) ** 2)
        q = (ci["ci95"][1] - ci["mean"]) / ci["se"] if ci["se"] > 0 else 1.96   # the CI's t quantile
        mean = ci["mean"] * factor
        out[number] = {**ci, "mean": mean, "se": new_rel_se * mean,
                       "ci95": [mean * (1 - q * new_rel_se), mean * (1 + q * new_rel_se)], "drift_shift": shift,
                       SHARED_SE: fit.shared_shift_sd(t)}
    return out, fit


def run_cis(trials: Sequence[Any]) -> tuple[dict[int, dict[str, Any]], Any, DriftFit | None, Any]:
    """(every ok run's CI, the pooled noise model, the drift fit or None, the stall fit or None)
    as the analysis reads them: tuner.stats.trial_cis, moved to each run's plateau where the
    drift check flags the study (:func:`drift_corrected`), else read on their steady steps where
    the stalls check flags it and the stalls cost every config alike (tuner.stats'
    ``stall_corrected``). The ablation's planning reads the runs the same way."""
    cis, noise = trial_cis(trials)
    if drift_check(trials, cis)["flagged"]:   # the steps do not read the long run: each run's plateau instead
        corrected, fit = drift_corrected(trials, cis)
        return corrected, noise, fit, None
    corrected, stalls = stall_corrected(trials, cis)
    return corrected, noise, None, stalls


def moved_values(cis: dict[int, dict[str, Any]]) -> dict[int, float]:
    """{trial number: its CI's mean} of the runs :func:`run_cis` read elsewhere than over their
    measured window (a plateau, steady steps): what the search's surrogate reads for them."""
    return {n: ci["mean"] for n, ci in cis.items() if "drift_shift" in ci or "stall_overhead" in ci}
