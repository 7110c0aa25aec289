"""The CI of a trial's step series, and adaptive measurement: when a trial has measured enough.

This is the trial's own interval, all a training rank has while it runs: early stopping
(:func:`stop_reason`, run inside the trial workload and the sim launcher) and the
coordinator's "clearly worse" bar use it. The report's per-trial CIs are wider-informed:
``tuner.stats`` pools the noise model over the study's trials (docs/statistics.md), and
this interval undercovers at strong autocorrelation (bench/ci_coverage.py). Step values are autocorrelated;
means of batches of consecutive steps are close to independent (Law & Kelton, Simulation
Modeling and Analysis, ch. 9): ~sqrt(n) batches of ~sqrt(n) steps, a t-quantile with
batches - 1 degrees of freedom.

Adaptive measurement stops once the 95% CI half-width is below ``target_rel_ci`` of the
mean, or once the trial is clearly worse than the best so far (its CI upper bound below the
best's lower bound), and never before ``min_steps`` measured steps.

Standard library (and scipy, imported when a CI is computed): the workload imports it.
Never zero-width: the standard error has a floor of ``REL_SE_FLOOR`` of the mean.

Example:
    >>> ci = batch_means_ci([100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0])
    >>> round(ci.mean, 1), ci.df, ci.low < 100.0 < ci.high
    (100.0, 3, True)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BatchMeansCI", "batch_means_ci", "stop_reason", "MIN_STEPS_FOR_CI"]

MIN_STEPS_FOR_CI = 4
"""Fewer measured steps give no CI."""
REL_SE_FLOOR = 1e-4
"""Smallest relative standard error (0.01%, the order of a step timer's resolution relative to
a step), so no interval is zero-width (tuner.stats uses the same floor)."""


@dataclass(frozen=True)
class BatchMeansCI:
    """A batch-means confidence interval of a step series' mean."""

    mean: float
    """Mean of all the steps."""
    low: float
    high: float
    se: float
    """Standard error of the mean, from the batch means."""
    df: int
    """Degrees of freedom of the t-quantile: batches - 1."""


@functools.lru_cache(maxsize=1024)
def _t_quantile(q: float, df: int) -> float:
    """Student's t quantile (SciPy's; a study asks for the same few thousands of times)."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


def batch_means_ci(values: Sequence[float], *, confidence: float = 0.95) -> BatchMeansCI | None:
    """The mean's CI from non-overlapping batch means; None with fewer than 4 values.

    Batch size ~ sqrt(n) (at least 1), giving ~sqrt(n) batches; t-quantile with batches - 1
    degrees of freedom.
    """
    n = len(values)
    if n < MIN_STEPS_FOR_CI:
        return None
    size = max(1, int(math.sqrt(n)))
    k = n // size
    # every step counts: the last batch takes the remainder (n = 7 -> batches of 2, 2, 3)
    bounds = [i * size for i in range(k)] + [n]
    batches = [sum(values[a:b]) / (b - a) for a, b in zip(bounds, bounds[1:])]
    mean = sum(values) / n
    var = sum((bm - mean) ** 2 for bm in batches) / (k - 1)
    se = max(math.sqrt(var / k), REL_SE_FLOOR * abs(mean))
    half = _t_quantile(0.5 + confidence / 2, k - 1) * se
    return BatchMeansCI(mean=mean, low=mean - half, high=mean + half, se=se, df=k - 1)


def stop_reason(values: Sequence[float], *, min_steps: int, target_rel_ci: float,
                stop_below: float | None) -> str:
    """Why to stop measuring now (`precise`, `clearly_worse`), or "" to go on."""
    if len(values) < max(min_steps, MIN_STEPS_FOR_CI) or (target_rel_ci <= 0 and stop_below is None):
        return ""
    ci = batch_means_ci(values)
    if ci is None:
        return ""
    if target_rel_ci > 0 and ci.mean > 0 and (ci.high - ci.low) / 2 <= target_rel_ci * ci.mean:
        return "precise"
    if stop_below is not None and ci.high < stop_below:
        return "clearly_worse"
    return ""
