"""One launch of a config: its measured steps and its true long-run rate, per noise model.

A run of a config whose true long-run rate is ``config_rate`` tokens/s/GPU is a *launch*: it
draws a run-to-run factor exp(delta), delta ~ N(0, run_to_run_sd^2) (node placement, clocks,
the state of the network), then measures ``STEPS`` steps of ``TOKENS`` tokens each, whose
times carry the model's within-run noise. Each model keeps the config's long-run rate, over
launches, at ``config_rate``, and says what the launch's own long-run rate is (what a
full-length job on that launch would process per second):

- ``ar1``: step time x (1 + rel_sd x e_t), e_t a stationary Gaussian AR(1) with coefficient
  phi. The launch's rate: config_rate x exp(delta).
- ``stalls``: ``ar1`` plus a stall every P-th step, P drawn per launch from 4, 5, 6 at a
  random phase; a stall takes U(2, 3) times as long. The long run includes the stalls:
  config_rate is TOKENS over the expected step time over launches, and a launch's rate is
  config_rate x exp(delta) x STALL_MEAN / (1 + 1.5 / P) (within 5% of config_rate; the
  geometric mean over P is 0.08% above it).
- ``drift``: ``ar1`` plus a thermal fall: the step rate is the launch's plateau x
  (1 + a exp(-t / DRIFT_STEPS)), a ~ U(0.06, 0.12) per launch, so the measured steps fall
  5-10% from first to last. The long run is the plateau (a full job runs hours).
- ``legacy``: the step series of bench/noise_families.py (AR(1), t(3), stragglers, warm-up
  leak), at config_rate x exp(delta).

Example:
    >>> rng = np.random.default_rng(0)
    >>> run = launch(rng, Noise(kind="stalls", rel_sd=0.0, phi=0.0, run_to_run_sd=0.0), 1000.0)
    >>> slow = run.seconds / run.seconds.min()
    >>> len(run.rates), int((slow > 1.5).sum()) in (1, 2), bool(((slow > 1.5) <= (slow >= 2.0)).all())
    (8, True, True)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from bench.noise_families import step_series

__all__ = ["STEPS", "TOKENS", "STALL_PERIODS", "STALL_MEAN", "DRIFT_STEPS", "Noise", "Run", "launch",
           "run_log_var"]

STEPS = 8
"""Measured steps per run (the issue's studies: 60 trials of 8 steps)."""
TOKENS = 1000.0
STALL_PERIODS = (4, 5, 6)
STALL_EXTRA = (1.0, 2.0)
"""A stall step takes 1 + U(1, 2) times as long: 2-3x."""
STALL_MEAN = 1.0 + (sum(STALL_EXTRA) / 2) * sum(1.0 / p for p in STALL_PERIODS) / len(STALL_PERIODS)
"""Expected step time over launches, in steady steps (1.308)."""
DRIFT_STEPS = 4.0
"""Time constant of the thermal fall, in steps."""
DRIFT_AMPLITUDE = (0.06, 0.12)


@dataclass(frozen=True, kw_only=True)
class Noise:
    """How a config's runs scatter."""

    kind: str
    """`ar1`, `stalls`, `drift` or `legacy` (module doc)."""
    rel_sd: float = 0.05
    """Marginal sd of a step time's relative AR(1) noise."""
    phi: float = 0.5
    """Lag-1 autocorrelation of that noise."""
    run_to_run_sd: float = 0.02
    """sd of a launch's log offset from its config's rate."""
    legacy: str = ""
    """For `legacy`: the bench/noise_families.py family."""

    @property
    def label(self) -> str:
        return self.legacy if self.kind == "legacy" else f"{self.kind} phi {self.phi:g} sd {self.rel_sd:.0%}"


@dataclass(frozen=True)
class Run:
    rates: np.ndarray
    """tokens/s/GPU of each measured step."""
    seconds: np.ndarray
    launch_rate: float
    """The launch's true long-run tokens/s/GPU."""

    @property
    def value(self) -> float:
        """Tokens over time of the measured steps (the trial's value)."""
        return float(TOKENS * len(self.seconds) / self.seconds.sum())


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = np.empty(n)
    z = rng.normal(size=n)
    e[0] = z[0]   # stationary start: unit marginal variance
    for t in range(1, n):
        e[t] = phi * e[t - 1] + math.sqrt(1.0 - phi * phi) * z[t]
    return e


def launch(rng: np.random.Generator, noise: Noise, config_rate: float, steps: int = STEPS) -> Run:
    """One launch of a config whose true long-run rate is ``config_rate`` (module doc)."""
    offset = math.exp(rng.normal(0.0, noise.run_to_run_sd)) if noise.run_to_run_sd > 0 else 1.0
    rate = config_rate * offset
    if noise.kind == "legacy":
        rates, secs, _ = step_series(rng, noise.legacy, steps, rate)
        return Run(rates, secs, rate)
    wobble = np.maximum(1.0 + noise.rel_sd * _ar1(rng, steps, noise.phi), 0.2)
    if noise.kind == "ar1":
        secs = TOKENS / rate * wobble
        return Run(TOKENS / secs, secs, rate)
    if noise.kind == "stalls":
        period = int(rng.choice(STALL_PERIODS))
        phase = int(rng.integers(period))
        steady_s = TOKENS / rate / STALL_MEAN
        stall = (np.arange(steps) + phase) % period == period - 1
        secs = steady_s * wobble * np.where(stall, 1.0 + rng.uniform(*STALL_EXTRA, steps), 1.0)
        return Run(TOKENS / secs, secs, rate * STALL_MEAN / (1.0 + sum(STALL_EXTRA) / 2 / period))
    if noise.kind == "drift":
        amplitude = rng.uniform(*DRIFT_AMPLITUDE)
        secs = TOKENS / rate / (1.0 + amplitude * np.exp(-np.arange(steps) / DRIFT_STEPS)) * wobble
        return Run(TOKENS / secs, secs, rate)
    raise ValueError(f"unknown noise kind {noise.kind!r}")


@functools.cache
def run_log_var(noise: Noise, steps: int = STEPS, n: int = 4000, seed: int = 12345) -> float:
    """Variance of a run's log tokens over time about its config's rate, run-to-run included, by
    simulating ``n`` launches: what an oracle that knows the noise model puts on one run (the
    spread about the runs' own mean, so a model's bias, e.g. drift's, is not counted as width)."""
    rng = np.random.default_rng(seed)
    logs = np.array([math.log(launch(rng, noise, 1.0, steps).value) for _ in range(n)])
    return float(logs.var(ddof=1))
