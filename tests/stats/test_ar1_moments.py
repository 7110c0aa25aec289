"""AR(1) noise read from short runs' residuals by moments that count what each run's fit took away."""

import math

import numpy as np
import pytest

from tuner.stats import ar1_correlation as correlation
from tuner.stats import ar1_moments, residual_part


def ar1(rng, phi, n):
    e = np.empty(n)
    e[0] = rng.normal()
    for j in range(1, n):
        e[j] = phi * e[j - 1] + math.sqrt(1 - phi * phi) * rng.normal()
    return e


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.8])
def test_phi_and_the_variance_of_8_step_runs_are_read_without_the_short_runs_bias(phi):
    rng = np.random.default_rng(int(phi * 10))
    t = np.arange(8.0)
    plain, sloped = [], []
    for _ in range(1500):
        e = 0.02 * ar1(rng, phi, 8)
        plain.append(residual_part(t, e))
        sloped.append(residual_part(t, e + 0.1 * np.exp(-t / 4), np.exp(-t / 4)))   # each run's own slope removed
    for parts in (plain, sloped):
        got_phi, sigma2 = ar1_moments(parts)
        assert got_phi == pytest.approx(phi, abs=0.07)
        assert math.sqrt(sigma2) == pytest.approx(0.02, rel=0.1)
    # the usual lag-1 estimate over the demeaned runs reads phi low
    r = np.concatenate([p.r for p in plain])
    naive = sum(float(p.r[1:] @ p.r[:-1]) for p in plain) / float(r @ r)
    assert naive < phi - 0.1


def test_steps_left_out_break_the_chain_and_the_mean_of_the_rest_has_its_exact_variance():
    rng = np.random.default_rng(7)
    parts, means = [], []
    for _ in range(1500):
        e = ar1(rng, 0.6, 10)
        keep = np.setdiff1d(np.arange(10), rng.choice(10, 2, replace=False))   # two steps dropped (stalls)
        parts.append(residual_part(keep.astype(float), e[keep]))
        means.append((keep, e[keep].mean()))
    phi, sigma2 = ar1_moments(parts)
    assert phi == pytest.approx(0.6, abs=0.07)
    z = [m / math.sqrt(sigma2 * correlation(k.astype(float), phi).sum() / len(k) ** 2) for k, m in means]
    assert np.std(z) == pytest.approx(1.0, abs=0.08)


def test_runs_without_residual_freedom_give_nothing():
    assert ar1_moments([residual_part(np.arange(1.0), np.array([3.0]))]) == (0.0, 0.0)
