"""Per-trial CIs of tokens over time with a pooled noise model, on series with known truth."""


import math

import numpy as np
import pytest

from bench.noise_families import FAMILIES, step_series
from tuner.stats import mser_start, ratio_of_sums, study_noise, study_trial_cis, trial_ci


def _coverage(family, steps, studies, trials, seed):
    rng = np.random.default_rng(seed)
    hits = total = 0
    for _ in range(studies):
        series = [step_series(rng, family, steps, t) for t in rng.uniform(500, 2000, trials)]
        for (_, _, truth), ci in zip(series, study_trial_cis([r for r, _, _ in series], [s for _, s, _ in series])):
            total += 1
            hits += ci.low <= truth <= ci.high
    return hits / total


@pytest.mark.parametrize("family", FAMILIES)
def test_coverage_at_8_steps_in_every_noise_family(family):
    # nominal 95%; issue 12 asks >= 90% at 8 steps (bench/ci_coverage.py has the full table)
    assert _coverage(family, 8, studies=6, trials=40, seed=3) >= 0.90


def test_twelve_trial_studies_still_cover():
    assert _coverage("ar1-0.8", 8, studies=25, trials=12, seed=4) >= 0.90


def test_value_is_tokens_over_time_not_the_mean_of_rates():
    rates, secs = np.array([100.0, 100.0, 100.0, 25.0]), np.array([1.0, 1.0, 1.0, 4.0])   # a straggler step
    assert ratio_of_sums(rates, secs) == pytest.approx(400.0 / 7.0)       # 400 tokens in 7 s
    assert np.mean(rates) > ratio_of_sums(rates, secs) * 1.4                                # the old bias
    assert ratio_of_sums([100.0, 50.0]) == pytest.approx(2 / (1 / 100 + 1 / 50))          # equal tokens


def test_never_zero_width_and_effective_sample_size():
    ci = trial_ci([1000.0] * 8)
    assert ci.low < 1000.0 < ci.high
    ci7 = trial_ci([1000.0] * 4 + [500.0] * 3)          # adaptive stopping left 7 steps: all used
    assert ci7.n_steps == 7 and ci7.high - ci7.low > 0
    rng = np.random.default_rng(0)
    series = [step_series(rng, "ar1-0.9", 8, 1000.0) for _ in range(40)]
    noise = study_noise([r for r, _, _ in series], [s for _, s, _ in series])
    assert noise.phi > 0.6
    ci = trial_ci(series[0][0], series[0][1], noise=noise)
    assert ci.n_eff < 4                                   # 8 strongly correlated steps are worth few


def test_warmup_leak_is_detected_and_dropped():
    assert mser_start([60.0, 85.0, 100.0, 101.0, 99.0, 100.0, 100.5, 99.5]) == 2
    rng = np.random.default_rng(1)
    series = [step_series(rng, "warmup", 8, 1000.0) for _ in range(30)]
    cis = study_trial_cis([r for r, _, _ in series], [s for _, s, _ in series])
    assert np.mean([c.warmup_steps > 0 for c in cis]) > 0.5
    flat = [step_series(rng, "ar1-0", 8, 1000.0) for _ in range(30)]
    cis = study_trial_cis([r for r, _, _ in flat], [s for _, s, _ in flat])
    assert np.mean([c.warmup_steps > 0 for c in cis]) < 0.1



def test_the_pooled_noise_does_not_depend_on_the_order_of_trials_of_mixed_lengths():
    """Series of one length are pooled as one matrix: each series' own variance (the prior's
    degrees of freedom read them beside their lengths) must stay with its series."""
    rng = np.random.default_rng(2)
    rates = [1000 * np.exp(rng.normal(0, 0.05, n)) for n in (8, 5, 12, 8, 5, 12, 6, 8, 12, 5)]
    rates[2] = rates[2] * np.exp(rng.normal(0, 0.15, 12))   # one noisy long series, one quiet short one
    rates[4] = 1000 * np.exp(rng.normal(0, 0.005, 5))
    ones = [np.ones(len(r)) for r in rates]
    a = study_noise(rates, ones)
    order = rng.permutation(len(rates))
    b = study_noise([rates[i] for i in order], [ones[i] for i in order])
    assert a.phi == b.phi and a.rel_var == pytest.approx(b.rel_var, rel=1e-12)
    assert a.df_prior == pytest.approx(b.df_prior, rel=1e-9) and math.isfinite(a.df_prior)
