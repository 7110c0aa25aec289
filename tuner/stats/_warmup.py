"""The warm-up test's threshold, simulated under the study's own noise model.

MSER (tuner.stats' ``mser_start``) picks the start d that minimises the rest's marginal
standard error. On a run with no warm-up it still picks some d > 0 in many runs, and it picks
the d whose leading steps happen to read slowest: a fixed "3 noise sds / sqrt(d)" cut ignores
both that selection and the steps' autocorrelation (with phi 0.5, 3-5% of plain runs lost
leading steps and read 1-5% high; docs/statistics.md, section 6).

Here the cut is the 99th percentile, among simulated runs without warm-up in which MSER chose
that same d, of the leading steps' relative shortfall ``(rest - head) / rest`` (tokens over
time of the rest and of the head). The runs are AR(1) with the study's pooled phi and
marginal sd (tuner.stats' NoiseModel), of the run's length; ``N_SIM`` of them, seeded, so the
cut is reproducible. A d that MSER chose in fewer than ``MIN_PER_D`` simulated runs takes the
99th percentile over every d > 0. So a run with no warm-up loses leading steps in about 1% of
cases whatever the study's noise, and a leak larger than the noise explains is still dropped.

Example:
    >>> cut = warmup_threshold(8, 0.5, 0.05, 2)
    >>> 0.05 < cut < 0.3
    True
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["warmup_threshold", "N_SIM", "LEVEL", "MIN_PER_D"]

N_SIM = 4000
LEVEL = 0.99
MIN_PER_D = 100
_MAX_FRAC = 0.5


def _mser_starts(x: np.ndarray) -> np.ndarray:
    """MSER's d for each row of ``x`` (the same rule as tuner.stats' mser_start, vectorised)."""
    n = x.shape[1]
    best = np.full(len(x), np.inf)
    out = np.zeros(len(x), dtype=int)
    for d in range(0, max(1, int(n * _MAX_FRAC)) + 1):
        rest = x[:, d:]
        if rest.shape[1] < 2:
            break
        score = ((rest - rest.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) / rest.shape[1] ** 2
        better = score < best - 1e-15
        best = np.where(better, score, best)
        out = np.where(better, d, out)
    return out


@functools.lru_cache(maxsize=256)
def _cuts(n: int, phi: float, sd: float) -> tuple[dict[int, float], float]:
    rng = np.random.default_rng(20261126)
    e = np.empty((N_SIM, n))
    e[:, 0] = rng.normal(0.0, 1.0, N_SIM)
    innov = rng.normal(0.0, np.sqrt(max(1e-12, 1 - phi * phi)), (N_SIM, n))
    for i in range(1, n):
        e[:, i] = phi * e[:, i - 1] + innov[:, i]
    rates = np.maximum(1.0 + sd * e, 1e-3)       # relative step rates about 1
    d = _mser_starts(rates)
    inv = 1.0 / rates                           # seconds per unit of tokens: tokens over time is harmonic
    csum = np.cumsum(inv, axis=1)
    rows = np.arange(N_SIM)
    safe = np.maximum(d, 1)
    head = safe / csum[rows, safe - 1]
    rest = (n - safe) / (csum[:, -1] - csum[rows, safe - 1])
    short = (rest - head) / rest
    picked = d > 0
    overall = float(np.quantile(short[picked], LEVEL)) if picked.sum() >= MIN_PER_D else float("inf")
    cuts = {int(k): float(np.quantile(short[d == k], LEVEL)) for k in np.unique(d[picked])
            if (d == k).sum() >= MIN_PER_D}
    return cuts, overall


def warmup_threshold(n: int, phi: float, sd: float, d: int) -> float:
    """The shortfall ``(rest - head) / rest`` the first ``d`` of ``n`` steps must exceed to be
    dropped as warm-up, under AR(1) noise (phi, marginal relative sd) (the module doc)."""
    cuts, overall = _cuts(int(n), round(float(phi), 3), round(float(sd), 4))
    return cuts.get(int(d), overall)
