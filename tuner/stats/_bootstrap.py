"""BCa bootstrap limits from a bootstrap distribution and any jackknife (Efron 1987).

scipy.stats.bootstrap computes BCa with the leave-one-out jackknife: one evaluation of the
statistic per observation. Where the statistic is a model refit (tuner.stats' importance) and
a study has thousands of trials, :func:`grouped_jackknife` gives the acceleration from a
jackknife over random groups instead (Efron & Tibshirani, *An Introduction to the Bootstrap*,
1993, sec. 11.5: delete-d jackknife), and :func:`bca_limits` applies scipy's formulas to it.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=50)
    >>> dist = np.array([[x[rng.integers(0, 50, 50)].mean() for _ in range(500)]])
    >>> jack = grouped_jackknife(lambda i: np.array([x[i].mean()]), 50, 10, 0)
    >>> lo, hi = bca_limits(dist, np.array([x.mean()]), jack, 0.95)
    >>> bool(lo[0] < x.mean() < hi[0])
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["bca_limits", "bca_p_values", "grouped_jackknife"]


def grouped_jackknife(statistic, n: int, groups: int, seed: int) -> np.ndarray:
    """The statistic (a function of row indices) with each of ``groups`` random groups of the
    ``n`` rows left out: shape (components, groups). ``groups = n`` is the leave-one-out
    jackknife, in a random order."""
    order = np.random.default_rng(seed + 2).permutation(n)
    keep = np.ones(n, bool)
    out = []
    for g in np.array_split(order, groups):
        keep[:] = True
        keep[g] = False
        out.append(statistic(np.flatnonzero(keep)))
    return np.array(out).T


def _bias_and_acceleration(dist: np.ndarray, theta: np.ndarray, jack: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BCa's bias correction z0 (from the resamples' share below the estimate, ties counted
    half) and acceleration (from the jackknife's skew), per component, as scipy computes them;
    nan where the jackknife does not vary."""
    from scipy.special import ndtri

    pct = ((dist < theta[:, None]).sum(-1) + (dist <= theta[:, None]).sum(-1)) / (2 * dist.shape[-1])
    dev = jack.mean(-1, keepdims=True) - jack
    with np.errstate(all="ignore"):
        return ndtri(pct), (dev**3).sum(-1) / (6 * (dev**2).sum(-1) ** 1.5)


def bca_limits(dist: np.ndarray, theta: np.ndarray, jack: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """BCa limits (Efron 1987) as scipy.stats.bootstrap computes them, from the bootstrap
    distribution (components x resamples), the full-sample estimate and jackknife values
    (components x groups). Where BCa is undefined for a component (its resamples nearly all
    equal), the percentile interval of the same resamples; a limit always holds the estimate."""
    from scipy.special import ndtr, ndtri

    alpha = (1 - level) / 2
    z0, acc = _bias_and_acceleration(dist, theta, jack)
    out = []
    for z in (ndtri(alpha), ndtri(1 - alpha)):
        a = ndtr(z0 + (z0 + z) / (1 - acc * (z0 + z)))
        out.append(np.array([np.percentile(d, 100 * q) if np.isfinite(q) else np.nan for d, q in zip(dist, a)]))
    low, high = out
    bad = ~np.isfinite(low) | ~np.isfinite(high)
    if bad.any():
        low = np.where(bad, np.nanpercentile(dist, 50 * (1 - level), axis=-1), low)
        high = np.where(bad, np.nanpercentile(dist, 100 - 50 * (1 - level), axis=-1), high)
    return np.minimum(low, theta), np.maximum(high, theta)


def bca_p_values(dist: np.ndarray, theta: np.ndarray, jack: np.ndarray) -> np.ndarray:
    """One-sided p-values of each component being <= 0, the BCa way: the alpha at which the BCa
    lower limit of one-sided level 1 - alpha (:func:`bca_limits` at two-sided 1 - 2 alpha) reaches 0,
    found by inverting BCa's quantile map at the resamples' share at or below 0 (Efron &
    Tibshirani 1993, sec. 15.4: the BCa interval's achieved significance level). Without bias
    or acceleration this is that share itself (the percentile bootstrap's p). The share is kept
    within 1 / (2 resamples) of 0 and 1, so p is never exactly 0 or 1; a component whose BCa is
    undefined (resamples nearly all equal, or an acceleration that folds the map) gets the
    percentile p.

    Example:
        >>> import numpy as np
        >>> dist = np.array([np.linspace(-1, 3, 101)])    # a quarter of the resamples <= 0
        >>> p = bca_p_values(dist, np.array([1.0]), np.array([[0.9, 1.0, 1.1]]))
        >>> round(float(p[0]), 2)
        0.25
    """
    from scipy.special import ndtr, ndtri
    b = dist.shape[-1]
    z0, acc = _bias_and_acceleration(dist, theta, jack)
    share = np.clip(((dist < 0).sum(-1) + (dist <= 0).sum(-1)) / (2 * b), 1 / (2 * b), 1 - 1 / (2 * b))
    with np.errstate(all="ignore"):
        w = ndtri(share) - z0
        p = ndtr(w / (1 + acc * w) - z0)
    return np.where(np.isfinite(p) & (1 + acc * w > 0), p, share)
