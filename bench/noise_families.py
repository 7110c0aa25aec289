"""Step series with known tokens-over-time, one generator per noise family (shared by the
coverage benches and tests/stats/test_trial_ci.py).

Each step carries the same tokens; its time is ``step_s x (1 + e_t)`` with e_t the family's
noise (5% marginal sd), so the true tokens over time is tokens / E[step time]. Families:

- ``ar1-<phi>``: Gaussian AR(1) step-time noise;
- ``t3``: AR(1) phi 0.5 with Student-t(3) innovations (heavy tails);
- ``straggler``: AR(1) phi 0.5 plus 3% of steps taking 2x-4x as long (truth includes them);
- ``warmup``: AR(1) phi 0.5 plus warm-up leaking into the first measured steps (first two
  steps 40% and 15% slower; truth is the steady state).
"""

from __future__ import annotations

import math

import numpy as np

FAMILIES = ("ar1-0", "ar1-0.5", "ar1-0.8", "ar1-0.9", "t3", "straggler", "warmup")
REL_SD = 0.05
STRAGGLER_P = 0.03
STRAGGLER_MEAN_EXTRA = 2.0  # a straggler step takes 1 + U(1, 3) times as long: mean +2x


def _ar1(rng: np.random.Generator, n: int, phi: float, heavy: bool) -> np.ndarray:
    if heavy:  # t(3) has variance 3: scale to unit variance
        innov = rng.standard_t(3, size=n + 50) / math.sqrt(3)
    else:
        innov = rng.normal(size=n + 50)
    e = np.empty(n + 50)
    e[0] = innov[0]
    for t in range(1, n + 50):
        e[t] = phi * e[t - 1] + math.sqrt(1 - phi * phi) * innov[t]
    return e[50:]  # burn-in: stationary


def step_series(rng: np.random.Generator, family: str, n: int, true_rate: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(rates, seconds, true tokens-over-time) of one trial of ``n`` measured steps."""
    phi = float(family.split("-")[1]) if family.startswith("ar1-") else 0.5
    e = _ar1(rng, n, phi, heavy=family == "t3")
    tokens = 1000.0
    # the noiseless step time that gives true_rate once the family's mean slowdown is added
    slow = 1.0 + (STRAGGLER_P * STRAGGLER_MEAN_EXTRA if family == "straggler" else 0.0)
    step_s = tokens / true_rate / slow
    secs = step_s * np.maximum(1.0 + REL_SD * e, 0.2)
    if family == "straggler":
        hit = rng.random(n) < STRAGGLER_P
        secs = secs + hit * step_s * rng.uniform(1.0, 3.0, n)
    if family == "warmup":
        secs[:2] *= (1.40, 1.15)[: min(2, n)] if n >= 2 else 1.40
    return tokens / secs, secs, true_rate
