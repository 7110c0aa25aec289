"""tuner.search._grid_model: the model's refit is kept until the trials it reads change."""

from types import SimpleNamespace

import numpy as np

from tuner.model import FIT_ON_BEST
from tuner.search._grid import ModelGrid
from tuner.search._grid_model import GridModel, predict
from tuner.spec import load_spec

SPEC = "studies/sim-llama13b-h100x8.toml"


def _trial(number, params, value):
    return SimpleNamespace(number=number, params=dict(params), value=value, user_attrs={"status": "ok"})


def test_a_refit_only_when_a_trial_enters_the_fit_and_its_predictions_match_a_fresh_computation():
    spec = load_spec(SPEC)
    grid = ModelGrid(spec)
    gm = GridModel(spec, grid)
    configs = grid.configs
    ok = [_trial(n, configs[n * 7], 3000.0 + 10 * n) for n in range(FIT_ON_BEST)]
    gm.update(ok, 600.0)
    assert gm.refits == 1
    idx = np.arange(0, len(configs), 5)
    first = gm.predict(idx)
    again = gm.predict(idx)                                   # read back from the cache
    fresh = predict(grid, idx, gm._constants, 600.0)          # noqa: SLF001 - the same constants, no cache
    twin = grid.nccl_twin[idx]                                # helper's NCCL rules out: the twin stands in
    stand_in = (fresh == 0) & (twin >= 0)
    fresh[stand_in] = predict(grid, twin[stand_in], gm._constants, 600.0)  # noqa: SLF001
    assert np.array_equal(first, again) and np.array_equal(first, fresh) and (first > 0).any()
    gm.update(ok + [_trial(99, configs[3], 100.0)], 600.0)   # slower than every fitted trial: not in the fit
    assert gm.refits == 1 and np.array_equal(gm.predict(idx), first)
    gm.update(ok + [_trial(100, configs[4], 9000.0)], 600.0)  # a new best enters the fit: refit
    assert gm.refits == 2
    gm.update(ok + [_trial(100, configs[4], 9000.0)], 650.0)  # the mean tokens changed: refit
    assert gm.refits == 3
