"""BCa limits from any jackknife: scipy's own numbers with the leave-one-out one; BCa p-values
that agree with those limits."""

import numpy as np
import pytest
from scipy import stats

from tuner.stats import bca_limits, bca_p_values, grouped_jackknife


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


def test_a_bca_p_value_is_the_level_at_which_the_lower_limit_reaches_zero():
    # skewed data shifted so that 0 sits inside the resamples: bias and acceleration both nonzero
    x = np.random.default_rng(4).exponential(size=40) - 1.0
    stat = lambda i: np.array([x[i].mean()])  # noqa: E731
    rng = np.random.default_rng(5)
    dist = np.array([[x[rng.integers(0, 40, 40)].mean() for _ in range(2000)]])
    jack, theta = grouped_jackknife(stat, 40, 40, 0), stat(np.arange(40))
    p = float(bca_p_values(dist, theta, jack)[0])
    assert 0.005 < p < 0.5
    # the one-sided lower limit at 1 - alpha is the two-sided one at 1 - 2 alpha
    assert bca_limits(dist, theta, jack, 1 - 2 * p * 1.1)[0][0] > 0 > bca_limits(dist, theta, jack, 1 - 2 * p * 0.9)[0][0]
    # not the percentile bootstrap's share at or below 0: BCa corrects it
    assert p != pytest.approx(float((dist <= 0).mean()), abs=1e-3)


def test_a_bca_p_value_is_never_zero_or_one_and_falls_back_where_bca_is_undefined():
    far = np.array([np.linspace(5.0, 6.0, 200), np.full(200, 1.0)])
    p = bca_p_values(far, np.array([5.5, 1.0]), np.array([[5.4, 5.5, 5.6], [1.0, 1.0, 1.0]]))
    assert p[0] == pytest.approx(1 / 400, rel=0.5) and 0 < p[0]
    assert p[1] == pytest.approx(1 / 400)   # all resamples equal: the percentile p, kept off 0
