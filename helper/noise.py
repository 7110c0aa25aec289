"""Measurement noise from repeated trials: what weighs data against priors in a fit.

Trials that ran the same configuration (same model, cluster and knob values) differ only by
noise. The pooled standard deviation of their log throughput, over every repeated
configuration, estimates the relative noise (``s_pooled = sqrt(sum (n_i - 1) s_i^2 /
sum (n_i - 1))``, the usual pooled variance of a one-way layout).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from helper.measurements import config_key

__all__ = ["estimate_noise_rel"]

_FLOOR = 0.005  # below 0.5 % the log-normal weighting would let one repeat dominate a fit


def estimate_noise_rel(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled relative noise of repeated configurations.

    Returns:
        ``noise_rel`` (None when nothing is repeated), ``repeated_configs`` and
        ``degrees_of_freedom``.

    Example:
        >>> m = [{"preset": "tiny", "micro_batch": 1, "tokens_per_sec_per_gpu": v}
        ...      for v in (100.0, 110.0, 90.0)]
        >>> round(estimate_noise_rel(m)["noise_rel"], 3)
        0.1
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for m in measurements:
        v = m.get("tokens_per_sec_per_gpu")
        if isinstance(v, (int, float)) and v > 0:
            groups[config_key(m)].append(math.log(v))
    ss, dof, repeated = 0.0, 0, 0
    for logs in groups.values():
        if len(logs) > 1:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
            repeated += 1
    noise = max(math.sqrt(ss / dof), _FLOOR) if dof else None
    return {"noise_rel": noise, "repeated_configs": repeated, "degrees_of_freedom": dof}
