"""Per-trial CIs of tokens over time, with a noise model pooled over the study's trials.

The estimand of a trial is **tokens over time**: sum of its measured steps' tokens over the
sum of their seconds (a ratio of sums; per GPU). A mean of per-step rates is not that: slow
(straggler) steps weigh as much as fast ones, which biases it upward.

Eight autocorrelated steps carry too little information for a trial to estimate its own
autocorrelation, so the noise model is shared: the study's trials ran on the same hardware
and software, so their step-to-step noise has the same shape. Each step's relative
deviation from its trial's ratio estimate (the ratio estimator's linearisation,
Cochran, *Sampling Techniques*, 3rd ed., sec. 6.4) is modelled as AR(1) with one
coefficient phi for the whole study, estimated by REML over all trials at once (restricted
likelihood, Patterson & Thompson 1971, which removes the bias a per-trial mean puts on phi
in short series). A trial's variance is its own residual variance moderated towards the
pooled one, with the prior's degrees of freedom estimated from the spread of the trials'
variances (empirical Bayes, Smyth 2004, *Stat. Appl. Genet. Mol. Biol.* 3(1), "limma").
The CI is a t-interval with the moderated degrees of freedom.

Warm-up that leaks into the measured steps is found by MSER truncation (White 1997,
*Simulation* 69(6)): the start d minimising the marginal standard error of the rest; it
is flagged, and those steps are dropped, only when they are slower than the rest by more
than the noise explains.

Example:
    >>> cis = study_trial_cis([[100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.0, 99.0]] * 3)
    >>> ci = cis[0]
    >>> ci.low < 100.0 < ci.high and ci.n_eff > 0
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.stats._warmup import leaked

__all__ = ["TrialCI", "NoiseModel", "ratio_of_sums", "mser_start", "pooled_noise", "trial_ci", "trial_cis",
           "study_trial_cis", "REL_SE_FLOOR"]

REL_SE_FLOOR = 1e-4
"""Smallest relative standard error given (0.01%, the order of a step timer's resolution
relative to a step): no interval is ever zero-width."""
_PHI_GRID = np.linspace(0.0, 0.97, 98)
_MIN_STEPS = 2


@dataclass(frozen=True)
class NoiseModel:
    """The study's pooled step-noise model (relative residuals, AR(1))."""

    phi: float
    """Lag-1 autocorrelation, REML over all trials."""
    rel_var: float
    """Pooled marginal variance of a step's relative residual."""
    df_prior: float
    """Degrees of freedom the pooled variance lends each trial (inf: full pooling)."""
    n_trials: int
    df_total: int
    """Residual degrees of freedom over all trials (sum of steps - 1)."""
    phi_inflation: dict = field(default_factory=dict)
    """Steps -> E[sigma^2 factor(phi)] / (sigma^2 factor(phi_hat)) over phi's likelihood."""

    df_mean_var: dict = field(default_factory=dict)
    """Steps -> degrees of freedom of the pooled variance of an n-step mean (Satterthwaite)."""

    def df_for(self, n: int) -> float:
        if n in self.df_mean_var:
            return self.df_mean_var[n]
        return min(self.df_mean_var.values(), default=math.inf)

    def inflation(self, n: int) -> float:
        if n in self.phi_inflation:
            return self.phi_inflation[n]
        return max(self.phi_inflation.values(), default=1.0)


@dataclass(frozen=True)
class TrialCI:
    """A trial's tokens-over-time estimate and its CI."""

    mean: float
    low: float
    high: float
    se: float
    df: float
    n_steps: int
    """Steps used (after any warm-up truncation)."""
    n_eff: float
    """Effective sample size: steps x (variance of a mean of independent steps / actual)."""
    warmup_steps: int
    """Leading measured steps MSER flagged as warm-up and left out."""

    def as_dict(self) -> dict:
        return {"mean": self.mean, "ci95": [self.low, self.high], "se": self.se, "df": self.df,
                "n_steps": self.n_steps, "n_eff": self.n_eff, "warmup_steps_dropped": self.warmup_steps}


def ratio_of_sums(rates: Sequence[float], seconds: Sequence[float] | None = None) -> float:
    """Tokens over time from per-step rates and seconds: sum(rate x seconds) / sum(seconds).

    Without seconds every step is taken to carry the same tokens, and tokens over time is the
    harmonic mean of the rates.

    Example:
        >>> round(ratio_of_sums([100.0, 50.0]), 2)   # 1 token each: 2 tokens in 0.03 s
        66.67
    """
    r = np.asarray(rates, float)
    s = np.asarray(seconds, float) if seconds is not None and len(seconds) == len(r) else 1.0 / r
    return float(np.sum(r * s) / np.sum(s))


def _residuals(rates: np.ndarray, seconds: np.ndarray) -> tuple[float, np.ndarray]:
    """(R, relative linearised residuals): u_i = (k_i - R s_i) / (R mean(s))."""
    k = rates * seconds
    ratio = k.sum() / seconds.sum()
    return float(ratio), (k - ratio * seconds) / (ratio * seconds.mean())


def _ar1_corr(n: int, phi: float) -> np.ndarray:
    idx = np.arange(n)
    return phi ** np.abs(idx[:, None] - idx[None, :])


def _var_factor(n: int, phi: float) -> float:
    """1' C(phi) 1 / n: variance of a mean of n AR(1) steps, in units of sigma^2 / n."""
    if phi == 0.0:
        return 1.0
    return float(_ar1_corr(n, phi).sum() / n)


def mser_start(x: Sequence[float], *, max_frac: float = 0.5) -> int:
    """MSER truncation point (White 1997): the d minimising sum((x_i - mean_d)^2) / (n - d)^2
    over i >= d, for d up to ``max_frac`` of the series.

    Example:
        >>> mser_start([50.0, 80.0, 100.0, 101.0, 99.0, 100.0, 100.5, 99.5])
        2
    """
    x = np.asarray(x, float)
    n = len(x)
    best, best_d = math.inf, 0
    for d in range(0, max(1, int(n * max_frac)) + 1):
        rest = x[d:]
        if len(rest) < 2:
            break
        score = float(np.sum((rest - rest.mean()) ** 2)) / len(rest) ** 2
        if score < best - 1e-15:
            best, best_d = score, d
    return best_d


@functools.lru_cache(maxsize=4096)
def _ar1_inverse(n: int, phi: float) -> tuple[np.ndarray, float, float]:
    """(C^-1, log det C + log 1'C^-1 1, 1'C^-1 1) of an n-step AR(1) correlation matrix."""
    c = _ar1_corr(n, phi)
    ci = np.linalg.inv(c)
    a = float(ci.sum())
    return ci, float(np.linalg.slogdet(c)[1]) + math.log(a), a


def _reml_terms(u: np.ndarray, phi: float) -> tuple[float, float, int]:
    """(log det terms, quadratic form, residual df) of one series under AR(1) phi (unit var)."""
    quads, logdet = _reml_quads({len(u): (np.array([0]), np.asarray(u, float)[None, :])}, 1, phi)
    return logdet, float(quads[0]), len(u) - 1


def _reml_quads(by_length: dict[int, tuple[np.ndarray, np.ndarray]], count: int,
                phi: float) -> tuple[np.ndarray, float]:
    """The REML terms of many series under AR(1) phi (unit variance), those of one length as one
    matrix (``by_length``: length -> (their positions, their rows)): (each series' quadratic
    form, in the series' order; the sum of their log det terms)."""
    quads, logdet = np.empty(count), 0.0
    for n, (where, u) in by_length.items():
        ci, ld, a = _ar1_inverse(n, phi)
        e = u - ((u @ ci.sum(axis=0)) / a)[:, None]
        quads[where] = np.einsum("ij,jk,ik->i", e, ci, e)
        logdet += ld * len(where)
    return quads, logdet


def pooled_noise(residual_series: Sequence[np.ndarray]) -> NoiseModel | None:
    """REML AR(1) phi and variances over trials' relative residual series; None if too few."""
    series = [np.asarray(u, float) for u in residual_series if len(u) >= _MIN_STEPS]
    if not series:
        return None
    df_total = sum(len(u) - 1 for u in series)
    grid = _PHI_GRID if any(len(u) >= 3 for u in series) else np.array([0.0])
    lengths = np.array([len(u) for u in series])
    by_length = {int(n): (np.flatnonzero(lengths == n), np.array([series[i] for i in np.flatnonzero(lengths == n)]))
                 for n in np.unique(lengths)}
    lls, sigmas, quads_at = [], [], []
    for phi in grid:
        quads, logdet = _reml_quads(by_length, len(series), float(phi))
        quad = float(quads.sum())
        if quad <= 0:
            return NoiseModel(phi=0.0, rel_var=0.0, df_prior=math.inf, n_trials=len(series), df_total=df_total)
        sigma2 = quad / df_total
        lls.append(-0.5 * (logdet + df_total * math.log(sigma2)))
        sigmas.append(sigma2)
        quads_at.append(quads)
    lls_a = np.array(lls)
    i = int(np.argmax(lls_a))
    phi, sigma2 = float(grid[i]), sigmas[i]
    # phi is uncertain and the mean's variance is convex in it: average sigma^2 x factor over
    # phi's (flat-prior) restricted likelihood instead of plugging in the mode
    w = np.exp(lls_a - lls_a.max())
    w /= w.sum()
    inflation, df_mean_var = {}, {}
    for n in sorted({len(u) for u in series}):
        v = np.array([sk * _var_factor(n, float(g)) for sk, g in zip(sigmas, grid)])
        mean_v = float(w @ v)
        inflation[n] = max(1.0, mean_v / (sigma2 * _var_factor(n, phi)))
        # Satterthwaite: how many degrees of freedom the mean's variance is known to, from
        # its spread over phi's likelihood plus sigma^2's own chi-square spread
        var_v = float(w @ (v - mean_v) ** 2) + 2 * mean_v**2 / df_total
        df_mean_var[n] = 2 * mean_v**2 / var_v if var_v > 0 else math.inf
    dfs = (lengths - 1).astype(float)
    own = quads_at[i] / dfs
    return NoiseModel(phi=phi, rel_var=sigma2, df_prior=_prior_df(own, dfs), n_trials=len(series),
                      df_total=df_total, phi_inflation=inflation, df_mean_var=df_mean_var)


def _prior_df(variances: np.ndarray, dfs: np.ndarray) -> float:
    """Smyth's (2004) moment estimate of the prior degrees of freedom d0 from log variances."""
    from scipy import special

    keep = variances > 0
    if keep.sum() < 3:
        return math.inf
    z = np.log(variances[keep])
    d = dfs[keep]
    e = z - special.digamma(d / 2) + np.log(d / 2)
    excess = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, d / 2)))
    if excess <= 0:
        return math.inf
    # solve trigamma(d0 / 2) = excess by bisection on log d0
    lo, hi = math.log(0.1), math.log(1e4)
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(special.polygamma(1, math.exp(mid) / 2)) > excess:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def trial_ci(rates: Sequence[float], seconds: Sequence[float] | None = None, *,
             noise: NoiseModel | None = None, confidence: float = 0.95,
             drop_warmup: bool = True) -> TrialCI | None:
    """One trial's tokens-over-time CI under a pooled noise model (None: this trial alone,
    phi 0 and its own variance). None with fewer than 2 steps."""
    from scipy import stats

    r = np.asarray(rates, float)
    s = np.asarray(seconds, float) if seconds is not None and len(seconds) == len(r) else 1.0 / r
    if len(r) < _MIN_STEPS or np.any(r <= 0) or np.any(s <= 0):
        return None
    d = warmup_start(r, s, noise) if drop_warmup else 0
    r, s = r[d:], s[d:]
    n = len(r)
    ratio, u = _residuals(r, s)
    phi = noise.phi if noise is not None else 0.0
    own = _reml_terms(u, phi)[1] / (n - 1) if n >= 2 else 0.0
    factor = _var_factor(n, phi)
    if noise is not None and noise.rel_var > 0:
        d0 = noise.df_prior
        moderated = noise.rel_var if math.isinf(d0) else (d0 * noise.rel_var + (n - 1) * own) / (d0 + n - 1)
        # never below the pooled variance: a trial that saw none of the study's rare slow
        # steps (stragglers) in 8 steps still has them in its long-run mean
        var = max(moderated, noise.rel_var)
        df = min(float(noise.df_total) if math.isinf(d0) else d0 + n - 1, noise.df_for(n))
        factor *= noise.inflation(n)
    else:
        var, df = own, float(n - 1)
    rel_se = max(math.sqrt(max(var, 0.0) * factor / n), REL_SE_FLOOR)
    half = float(stats.t.ppf(0.5 + confidence / 2, max(df, 1.0))) * rel_se
    return TrialCI(mean=ratio, low=ratio * (1 - half), high=ratio * (1 + half), se=ratio * rel_se, df=df,
                   n_steps=n, n_eff=n / factor, warmup_steps=d)


def warmup_start(rates: np.ndarray, seconds: np.ndarray, noise: NoiseModel | None) -> int:
    """Leading steps to drop as leaked warm-up: MSER's truncation point, kept only when those
    steps are slower than the rest by more than the noise explains. Under the study's pooled
    noise model that is a scan test simulated under it (tuner.stats' ``leaked``: about 1% of
    runs without warm-up lose steps); before it exists (the pooling's own first pass), 3 of
    the rest's sds / sqrt(d), one-sided."""
    d = mser_start(rates)
    if d == 0 or len(rates) - d < _MIN_STEPS:
        return 0
    if noise is not None and noise.rel_var > 0:
        return d if leaked(rates, seconds, noise.phi, math.sqrt(noise.rel_var)) else 0
    rest = ratio_of_sums(rates[d:], seconds[d:])
    head = ratio_of_sums(rates[:d], seconds[:d])
    sd = float(np.std(rates[d:] / rest, ddof=1))
    return d if (rest - head) / rest > 3 * sd / math.sqrt(d) else 0


def study_trial_cis(rate_series: Sequence[Sequence[float]],
                    seconds_series: Sequence[Sequence[float] | None] | None = None, *,
                    confidence: float = 0.95) -> list[TrialCI | None]:
    """Every trial's CI with the noise model pooled over all of them (the module doc)."""
    secs = list(seconds_series) if seconds_series is not None else [None] * len(rate_series)
    noise = study_noise(rate_series, secs)
    return [trial_ci(r, s, noise=noise, confidence=confidence) for r, s in zip(rate_series, secs)]


def study_noise(rate_series: Sequence[Sequence[float]],
                seconds_series: Sequence[Sequence[float] | None] | None = None) -> NoiseModel | None:
    """The pooled noise model alone (for analysis.json's method section)."""
    secs = list(seconds_series) if seconds_series is not None else [None] * len(rate_series)
    resid = []
    for r, s in zip(rate_series, secs):
        r = np.asarray(r, float)
        if len(r) < _MIN_STEPS or np.any(r <= 0):
            continue
        s = np.asarray(s, float) if s is not None and len(s) == len(r) else 1.0 / r
        d = warmup_start(r, s, None)
        if len(r) - d >= _MIN_STEPS:
            resid.append(_residuals(r[d:], s[d:])[1])
    return pooled_noise(resid)


def trial_cis(trials: Sequence[Any]) -> tuple[dict[int, dict[str, Any]], Any]:
    """Every ok trial's tokens-over-time CI (TrialCI.as_dict) under the study's pooled noise
    model, and that model."""
    ok = [t for t in trials if t.status == "ok" and len(t.steps) >= 2]
    noise = study_noise([t.steps for t in ok], [t.step_seconds or None for t in ok])
    out = {}
    for t in ok:
        ci = trial_ci(t.steps, t.step_seconds or None, noise=noise)
        if ci is not None:
            out[t.number] = ci.as_dict()
    return out, noise
