"""Adaptive measurement: when a trial has measured enough.

Stop once the mean's 95% CI half-width is below `target_rel_ci` of the mean, or once the
trial is clearly worse than the best so far (its CI upper bound below the best's lower
bound), and never before `min_steps` measured steps. The CI is a batch-means interval: step
values are autocorrelated, and batch means of consecutive steps are close to independent
(Law & Kelton, Simulation Modeling and Analysis, ch. 9), as in the statistics stage
(`tuner.analysis.mean_ci`), though with ~sqrt(n) batches here against 4 or 6 there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

__all__ = ["batch_means_ci", "stop_reason"]


def batch_means_ci(values: Sequence[float], *, confidence: float = 0.95) -> tuple[float, float, float] | None:
    """(mean, lo, hi) from non-overlapping batch means; None with fewer than 4 values.

    Batch size ~ sqrt(n) (at least 1), giving ~sqrt(n) batches; t-quantile with batches - 1
    degrees of freedom.
    """
    n = len(values)
    if n < 4:
        return None
    size = max(1, int(math.sqrt(n)))
    k = n // size
    batches = [sum(values[i * size:(i + 1) * size]) / size for i in range(k)]
    mean = sum(values[: k * size]) / (k * size)
    var = sum((b - mean) ** 2 for b in batches) / (k - 1)
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * math.sqrt(var / k)
    return mean, mean - half, mean + half


def stop_reason(values: Sequence[float], *, min_steps: int, target_rel_ci: float,
                stop_below: float | None) -> str:
    """Why to stop measuring now (`precise`, `clearly_worse`), or "" to go on."""
    if len(values) < max(min_steps, 4) or (target_rel_ci <= 0 and stop_below is None):
        return ""
    ci = batch_means_ci(values)
    if ci is None:
        return ""
    mean, lo, hi = ci
    if target_rel_ci > 0 and mean > 0 and (hi - lo) / 2 <= target_rel_ci * mean:
        return "precise"
    if stop_below is not None and hi < stop_below:
        return "clearly_worse"
    return ""
