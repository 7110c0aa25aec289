"""tuner.stats._surrogate: the ridge ANOVA surrogate behind knob importance (fit, leave-one-out R^2, lookups)."""

import itertools
import math

import numpy as np
import pytest

from tuner.stats._surrogate import ALPHAS, Surrogate, code_table


def _grid(levels=(3, 3, 2)):
    return np.array(list(itertools.product(*(range(n) for n in levels))), dtype=float)


def _fit(x, y, **kw):
    cats = [np.unique(x[:, c]).astype(np.int64) for c in range(x.shape[1])]
    return Surrogate(cats, lambda rows: rows, x, y, **kw)


def test_the_code_table_maps_each_columns_codes_to_its_one_hot_columns():
    table, bases, lens = code_table([np.array([0, 2]), np.array([0, 1, 2])], np.array([0, 2]))
    # column 0: codes 0 and 2 -> one-hot columns 0 and 1 (code 1 never seen: -1); slot 0 is code -1
    assert table[bases[0]:bases[0] + lens[0]].tolist() == [-1, 0, -1, 1]
    assert table[bases[1]:bases[1] + lens[1]].tolist() == [-1, 2, 3, 4]


def test_an_additive_surface_is_recovered_and_explains_nearly_all_the_variance():
    x = _grid()
    y = 100 + 10 * x[:, 0] - 5 * (x[:, 1] == 2) + 3 * x[:, 2]
    s = _fit(x, y)
    assert s.alpha in ALPHAS and s.alpha == min(ALPHAS)  # noiseless: the least penalty predicts best
    assert s.r2 > 0.99
    assert s.predict(x) == pytest.approx(y, abs=0.1)


def test_a_code_the_fit_never_saw_contributes_nothing():
    x = _grid()
    y = 100 + 10 * x[:, 0]
    s = _fit(x, y)
    unseen = np.array([[7.0, 0.0, 0.0]])
    seen_rest = s.predict(np.array([[0.0, 0.0, 0.0]]))[0] - s.beta[0]  # drop column 0's level-0 coefficient
    assert s.positions(unseen)[0, 0] == -1
    assert s.predict(unseen)[0] == pytest.approx(seen_rest)


def test_a_refit_at_a_given_penalty_is_the_same_ridge_solution_without_an_r2():
    rng = np.random.default_rng(0)
    x = _grid()
    y = 100 + 10 * x[:, 0] + rng.normal(0, 1, len(x))
    full = _fit(x, y)
    again = _fit(x, y, alphas=(full.alpha,))
    assert again.predict(x) == pytest.approx(full.predict(x), rel=1e-9)
    assert math.isnan(again.r2)


def test_few_trials_and_many_columns_give_the_same_fit_in_the_trials_space():
    x = _grid()
    y = 100 + 10 * x[:, 0] + 3 * x[:, 2]
    few = x[::3]  # 6 trials, 8 one-hot columns: the n x n path
    s = _fit(few, y[::3], alphas=(1.0,))
    f = s.onehot(few)
    fc = f - f.mean(axis=0)
    beta = np.linalg.solve(fc.T @ fc + np.eye(f.shape[1]), fc.T @ (y[::3] - y[::3].mean()))
    assert s.beta == pytest.approx(beta, abs=1e-9)
    assert _fit(few, y[::3]).predict(few) == pytest.approx(
        _fit(few, y[::3], alphas=(_fit(few, y[::3]).alpha,)).predict(few), rel=1e-9)


def test_a_constant_surface_has_no_r2():
    x = _grid()
    assert math.isnan(_fit(x, np.full(len(x), 5.0)).r2)
