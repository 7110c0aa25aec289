"""tuner.search: the model-guided sampler's pure math."""

import numpy as np

import tuner.search._surrogate as surrogate


def test_residual_gp_learns_near_measurements_and_keeps_prior_spread_far_away():
    x_obs = np.array([[0, 0, 0]])
    mean, sd = surrogate.residual_gp(x_obs, np.array([0.3]), np.array([[0, 0, 0], [0, 0, 1], [2, 2, 2]]),
                                     signal_sd=0.1, noise_sd=0.01)
    assert mean[0] > mean[1] > mean[2] > 0
    assert sd[0] < sd[1] < sd[2] <= 0.1


def test_residual_gp_with_no_data_is_the_prior():
    mean, sd = surrogate.residual_gp(np.zeros((0, 2)), np.zeros(0), np.array([[0, 1]]), signal_sd=0.2, noise_sd=0.01)
    assert mean.tolist() == [0.0] and sd.tolist() == [0.2]


def test_expected_improvement_prefers_higher_mean_then_higher_uncertainty():
    ei = surrogate.expected_improvement(np.array([0.0, 0.1, 0.0]), np.array([0.05, 0.05, 0.2]), 0.05)
    assert ei[1] > ei[0] and ei[2] > ei[0]


def test_prob_fits_is_monotone_in_predicted_memory():
    p = surrogate.prob_fits(np.array([60.0, 78.0, 90.0]), 80.0, 0.0, 0.05)
    assert p[0] > p[1] > p[2] and p[0] > 0.99 and p[2] < 0.05


def test_diverse_top_skips_configs_close_to_what_was_tried():
    codes = np.array([[0, 0, 0], [0, 0, 1], [1, 1, 0]])
    assert surrogate.diverse_top(np.array([3.0, 2.0, 1.0]), codes, np.array([[0, 0, 0]])) == 2
    assert surrogate.diverse_top(np.array([3.0, 2.0, 1.0]), codes, np.zeros((0, 3))) == 0


# ------------------------------------------------------------------ evidence overrules the model (issue 28)
def _configs(n_knobs=4, levels=3):
    import itertools

    return np.array(list(itertools.product(range(levels), repeat=n_knobs)))


def test_evidence_gp_keeps_a_model_that_explains_the_measurements():
    from tuner.search._surrogate import evidence_gp

    x = _configs()
    model = 0.1 * x[:, 0] - 0.05 * x[:, 1]  # the model's log predictions
    rng = np.random.default_rng(0)
    tried = rng.choice(len(x), 12, replace=False)
    y = model[tried] + 0.3 + rng.normal(0, 0.01, 12)  # the model, off by a constant
    mean, _, weight = evidence_gp(x[tried], y, model[tried], x, model, level_sd=0.05, interaction_sd=0.02,
                                  noise_sd=0.02)
    assert 0.8 < weight < 1.2
    assert x[np.argmax(mean)][:2].tolist() == [2, 0]  # the model's best (knobs 2 and 3 do not matter)


def test_evidence_gp_drops_a_wrong_model_and_learns_each_knobs_levels_from_measurements():
    from tuner.search._surrogate import evidence_gp

    x = _configs()
    model = 0.1 * x[:, 0]  # the model: knob 0 matters, knob 2 is neutral
    truth = -0.02 * x[:, 0] + 0.08 * (x[:, 2] == 1)  # here knob 0 barely matters and knob 2's level 1 wins
    rng = np.random.default_rng(1)
    tried = rng.choice(len(x), 15, replace=False)
    mean, sd, weight = evidence_gp(x[tried], truth[tried], model[tried], x, model, level_sd=0.05,
                                   interaction_sd=0.02, noise_sd=0.02)
    assert weight < 0.4  # the model's differences do not explain the measurements: its weight drops
    best = x[np.argmax(mean)]
    assert best[2] == 1  # a level the model calls neutral, learned from the configs that have it
    untried = np.setdiff1d(np.arange(len(x)), tried)
    assert np.corrcoef(mean[untried], truth[untried])[0, 1] > 0.8


def test_cover_gain_counts_levels_never_measured():
    from tuner.search._surrogate import cover_gain

    covered = np.zeros((2, 3), dtype=bool)
    covered[0, 0] = covered[1, 0] = True
    assert cover_gain(np.array([[0, 0], [1, 2], [0, 2]]), covered).tolist() == [0, 2, 1]
