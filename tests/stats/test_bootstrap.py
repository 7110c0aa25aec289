"""BCa limits from any jackknife: scipy's own numbers with the leave-one-out one."""

import numpy as np
import pytest
from scipy import stats

from tuner.stats import bca_limits, grouped_jackknife


def test_with_the_leave_one_out_jackknife_the_limits_are_scipys():
    x = np.random.default_rng(0).exponential(size=60)
    stat = lambda i: np.array([x[i].mean(), np.log(x[i].var())])  # noqa: E731
    res = stats.bootstrap((np.arange(60),), lambda i: stat(np.asarray(i, int)), vectorized=False, method="BCa",
                          n_resamples=300, random_state=np.random.default_rng(1))
    jack = grouped_jackknife(stat, 60, 60, 0)
    lo, hi = bca_limits(np.asarray(res.bootstrap_distribution), stat(np.arange(60)), jack, 0.95)
    assert lo == pytest.approx(res.confidence_interval.low, rel=1e-9)
    assert hi == pytest.approx(res.confidence_interval.high, rel=1e-9)
    # a second level from the same resamples and the same jackknife (importance's Bonferroni
    # level beside its 95%): scipy's BCa at that level, which refits the jackknife to get it
    strict = stats.bootstrap((np.arange(60),), lambda i: stat(np.asarray(i, int)), vectorized=False, method="BCa",
                             confidence_level=0.994, n_resamples=0, bootstrap_result=res)
    lo, hi = bca_limits(np.asarray(res.bootstrap_distribution), stat(np.arange(60)), jack, 0.994)
    assert lo == pytest.approx(strict.confidence_interval.low, rel=1e-9)
    assert hi == pytest.approx(strict.confidence_interval.high, rel=1e-9)


def test_a_grouped_jackknife_gives_nearly_the_same_limits():
    x = np.random.default_rng(2).exponential(size=2000)
    stat = lambda i: np.array([x[i].mean()])  # noqa: E731
    rng = np.random.default_rng(3)
    dist = np.array([[x[rng.integers(0, 2000, 2000)].mean() for _ in range(400)]])
    exact = bca_limits(dist, stat(np.arange(2000)), grouped_jackknife(stat, 2000, 2000, 0), 0.95)
    grouped = bca_limits(dist, stat(np.arange(2000)), grouped_jackknife(stat, 2000, 50, 0), 0.95)
    assert np.allclose(exact, grouped, rtol=2e-3)
