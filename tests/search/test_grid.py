"""tuner.search._grid: the model-guided sampler's grid over the knobs helper's model knows."""

import numpy as np
import pytest

from tuner import knobs
from tuner.search._grid import MODEL_KNOBS, ModelGrid, knobs_active
from tuner.spec import load_spec

SPEC = """
[study]
name = "grid"
[budget]
limit = "40gpuh"
[model]
preset = "llama-2-13b"
seq_len = 2048
[cluster]
launcher = "sim"
nodes = 1
gpus_per_node = 8
backend = "nccl"
gpu = "A100-80GB"
[trial]
estimate_gpu_seconds = 2400
[space]
nccl_algo = ["default", "Tree", "NVLS"]
num_workers = [0, 2]
prefetch_factor = [2, 4]
micro_batch = [1, 2]
padding = ["max_length", "packed"]
"""


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    path = tmp_path_factory.mktemp("grid") / "grid.toml"
    path.write_text(SPEC)
    return ModelGrid(load_spec(path))


def test_prefetch_factor_applies_only_with_workers():
    assert knobs_active({"num_workers": 2, "prefetch_factor": 4})
    assert not knobs_active({"num_workers": 0, "prefetch_factor": 4})
    assert knobs_active({"micro_batch": 2})  # no workers knob: nothing to drop


def test_the_grid_holds_each_config_once_without_an_inactive_prefetch_factor(grid):
    assert grid.names == ["nccl_algo", "num_workers", "prefetch_factor", "micro_batch", "padding"]
    assert set(grid.names) <= set(MODEL_KNOBS)
    # workers: 0 (one config) or 2 with two prefetch factors = 3; x 3 algos x 2 micro-batches x 2 paddings
    assert len(grid.configs) == 3 * 3 * 2 * 2
    assert all("prefetch_factor" not in c for c in grid.configs if c["num_workers"] == 0)
    assert len({grid.key(c) for c in grid.configs}) == len(grid.configs)
    assert grid.codes.shape == (36, 5) and set(grid.codes[:, 2].tolist()) == {-1, 0, 1}


def test_a_trials_params_find_their_config_and_an_inactive_prefetch_factor_is_ignored(grid):
    params = {"nccl_algo": "Tree", "num_workers": 0, "prefetch_factor": 4, "micro_batch": 2, "padding": "packed",
              "nccl_proto": "default"}
    i = grid.index[grid.key_of_trial(params)]
    assert grid.configs[i] == {"nccl_algo": "Tree", "num_workers": 0, "micro_batch": 2, "padding": "packed"}
    assert grid.key_of_trial({"micro_batch": 2}) is None  # too few of the grid's knobs


def test_a_config_helpers_nccl_rules_say_cannot_run_stands_in_with_its_twin_that_runs(grid):
    for i, c in enumerate(grid.configs):
        if c["nccl_algo"] in ("NVLS", "Tree"):
            # NVLS: no NVSwitch multicast on an A100, on every NCCL version; Tree: a rule that
            # depends on the NCCL version. Either may be wrong about the cluster, so either has a
            # prediction (its twin's) and the sampler can propose it; before the twin, a config
            # behind a version-dependent rule was never proposed (issue 28)
            assert grid.nccl[i] is not None and grid.nccl[i][1] is (c["nccl_algo"] == "NVLS")
            twin = grid.nccl_twin[i]
            assert grid.configs[twin] == {**c, "nccl_algo": "default"} and grid.nccl[twin] is None
            assert grid.nccl_may_run[i]
        else:
            assert grid.nccl[i] is None and grid.nccl_twin[i] == -1


def test_packed_rows_carry_more_real_tokens_per_step_than_padded_ones(grid):
    tokens = grid.tokens_per_gpu_step(256.0)
    for i, c in enumerate(grid.configs):
        if c["padding"] == "packed":
            assert tokens[i] == pytest.approx(2048 * c["micro_batch"])  # every token real
        else:
            assert tokens[i] == pytest.approx(256 * c["micro_batch"])  # one 256-token example per row
    assert (grid.mem_gb > 0).all() and np.all(grid.row_len <= 2048)


def test_without_a_worker_every_config_needs_a_new_process(grid):
    assert (grid.switch_levels(None) == knobs.RECONFIGURE.index("process")).all()
