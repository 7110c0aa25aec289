"""The warm-up test, calibrated by simulation under the study's own noise model.

MSER (tuner.stats' ``mser_start``) picks the start d that minimises the rest's marginal
standard error. On a run with no warm-up it still picks some d > 0 in many runs, the d whose
leading steps happen to read slowest, and the steps are autocorrelated: a fixed "3 noise sds /
sqrt(d)" cut ignores both (with phi 0.5, 3-5% of plain runs lost leading steps and read 1-5%
high; docs/statistics.md, section 6).

The test here is a scan over the run's possible heads: for every d' up to half the steps, the
shortfall of the first d' steps against the rest, ``(rest - head) / rest`` (tokens over
time of each), over its sd among runs without warm-up; the statistic is the largest of these.
Its 99th percentile among ``N_SIM`` simulated runs without warm-up (AR(1) with the study's
pooled phi and marginal sd, the run's length, seeded: reproducible) is the cut. When the
statistic exceeds it, MSER's d steps are dropped. So about 1% of runs without warm-up lose
steps whatever the study's noise, and a leak is found whichever head shows it: a test of
MSER's own d alone missed leaks that MSER's d diluted with ordinary steps.

Example:
    >>> sd, cut = scan_null(8, 0.5, 0.05)
    >>> len(sd), bool(2.0 < cut < 5.0)
    (4, True)
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["leaked", "scan_null", "N_SIM", "LEVEL"]

N_SIM = 4000
LEVEL = 0.99
_MAX_FRAC = 0.5


def _shortfalls(rates: np.ndarray, seconds: np.ndarray, most: int) -> np.ndarray:
    """(runs x most) shortfall of the first d' steps (d' = 1..most) against the rest, in tokens
    over time (sum of rate x seconds over sum of seconds)."""
    tokens = np.cumsum(rates * seconds, axis=1)
    secs = np.cumsum(seconds, axis=1)
    d = np.arange(1, most + 1)
    head = tokens[:, d - 1] / secs[:, d - 1]
    rest = (tokens[:, -1:] - tokens[:, d - 1]) / (secs[:, -1:] - secs[:, d - 1])
    return (rest - head) / rest


@functools.lru_cache(maxsize=256)
def scan_null(n: int, phi: float, sd: float) -> tuple[np.ndarray, float]:
    """(each head's shortfall sd, the 99th percentile of the scan statistic) among simulated
    n-step runs without warm-up (the module doc)."""
    rng = np.random.default_rng(20261126)
    e = np.empty((N_SIM, n))
    e[:, 0] = rng.normal(0.0, 1.0, N_SIM)
    innov = rng.normal(0.0, np.sqrt(max(1e-12, 1 - phi * phi)), (N_SIM, n))
    for i in range(1, n):
        e[:, i] = phi * e[:, i - 1] + innov[:, i]
    rates = np.maximum(1.0 + sd * e, 1e-3)   # relative step rates about 1; each step carries equal tokens
    short = _shortfalls(rates, 1.0 / rates, _most(n))
    spread = np.maximum(short.std(axis=0), 1e-12)
    return spread, float(np.quantile((short / spread).max(axis=1), LEVEL))


def _most(n: int) -> int:
    return max(1, min(int(n * _MAX_FRAC), n - 2))


def leaked(rates: np.ndarray, seconds: np.ndarray, phi: float, sd: float) -> bool:
    """Whether the run's leading steps are slower than AR(1) noise (phi, marginal relative sd)
    explains (the scan test of the module doc)."""
    n = len(rates)
    if n < 4:
        return False
    spread, cut = scan_null(int(n), round(float(phi), 3), round(float(sd), 4))
    short = _shortfalls(np.asarray(rates, float)[None, :], np.asarray(seconds, float)[None, :], _most(n))[0]
    return bool((short / spread).max() > cut)
