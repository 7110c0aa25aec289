"""tuner.model._predict: tuner's one door to helper's model (NCCL verdicts, checkpoints, the refit's trials)."""

from types import SimpleNamespace

import pytest

from helper.padding import DEFAULT_MEAN_TOKENS_PER_EXAMPLE
from tests.spine_helpers import fast_spec
from tuner.model import (
    FIT_ON_BEST,
    calibration_trials,
    checkpoint_cost,
    measured_mean_tokens,
    model_knows,
    n_params,
    nccl_problem,
)
from tuner.spec import load_spec

CLUSTER = dict(world_size=8, gpus_per_node=8, backend="nccl")


def test_nccl_verdicts_say_whether_the_rule_holds_on_every_version():
    assert nccl_problem(gpu="H100-80GB", nccl_algo="Ring", nccl_proto="Simple", **CLUSTER) is None
    tree = nccl_problem(gpu="H100-80GB", nccl_algo="Tree", nccl_proto="default", **CLUSTER)
    assert "AllGather" in tree[0] and tree[1] is False  # Tree all-gather: NCCL versions differ
    nvls = nccl_problem(gpu="A100-80GB", nccl_algo="NVLS", nccl_proto="default", **CLUSTER)
    assert nvls is not None and nvls[1] is True  # no NVSwitch multicast on an A100: never
    # not NCCL's cluster: no verdict
    assert nccl_problem(gpu="cpu", nccl_algo="Tree", nccl_proto="LL", world_size=2, gpus_per_node=2, backend="gloo") is None
    assert nccl_problem(gpu="H100-80GB", nccl_algo="Tree", nccl_proto="default", world_size=8, gpus_per_node=8,
                        backend="gloo") is None


def test_checkpoint_saves_fall_before_each_multiple_of_every_below_the_steps():
    sync = checkpoint_cost(1e9, mode="sync", every=5, steps=16, world_size=8, nodes=1, step_time_s=1.0)
    assert sync["saves"] == 3 and sync["background_s"] == 0.0  # before steps 5, 10, 15
    assert sync["total_blocking_s"] == pytest.approx(3 * sync["blocking_s"])
    never = checkpoint_cost(1e9, mode="async", every=0, steps=16, world_size=8, nodes=1, step_time_s=1.0)
    assert never["saves"] == 0 and never["total_blocking_s"] == 0.0
    async_ = checkpoint_cost(1e9, mode="async", every=5, steps=16, world_size=8, nodes=1, step_time_s=1.0)
    assert async_["blocking_s"] < sync["blocking_s"] and async_["background_s"] == pytest.approx(sync["blocking_s"])


def test_the_mean_example_length_comes_from_max_length_rows_or_is_helpers_default():
    assert measured_mean_tokens(2048, [("max_length", 0.25), ("packed", 1.0), ("max_length", 0.125)]) == 384.0
    assert measured_mean_tokens(2048, [("packed", 1.0), ("max_length", None)]) == DEFAULT_MEAN_TOKENS_PER_EXAMPLE


def test_the_refit_reads_the_best_trials_and_the_baseline_however_slow():
    ok = [SimpleNamespace(number=n, value=float(n), user_attrs={"role": "baseline" if n == 0 else "search"})
          for n in range(FIT_ON_BEST + 5)]
    chosen = calibration_trials(ok)
    assert [t.number for t in chosen[:FIT_ON_BEST]] == list(range(FIT_ON_BEST + 4, 4, -1))
    assert chosen[-1].number == 0 and len(chosen) == FIT_ON_BEST + 1


def test_helper_models_a_preset_on_a_gpu_it_knows_over_nccl_only(tmp_path):
    assert model_knows(load_spec("studies/sim-llama13b-h100x8.toml"))
    assert not model_knows(fast_spec(tmp_path))  # cpu over gloo
    assert n_params("llama-2-7b") == 6_738_415_616


def test_predict_module_doctests_run():
    import doctest

    import tuner.model._predict
    result = doctest.testmod(tuner.model._predict)
    assert result.failed == 0 and result.attempted > 0
