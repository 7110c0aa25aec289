"""tuner.spec._params: the team's baseline and every knob's value a trial runs with."""

from tests.spine_helpers import fast_spec
from tuner.spec import baseline_params, complete_params, parse_spec


def test_baseline_and_defaults(tmp_path):
    spec = fast_spec(tmp_path)
    base = baseline_params(spec)
    assert base == {"micro_batch": 1, "padding": "max_length", "nccl_algo": "default"}
    full = complete_params(base, spec)
    assert full["nccl_proto"] == "default" and full["activation_checkpointing"] is False
    assert baseline_params(fast_spec(tmp_path, baseline=False)) is None


def test_a_knob_the_space_does_not_search_takes_the_models_setting_and_a_trials_value_wins():
    spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny", "activation_checkpointing": True},
                       "space": {"micro_batch": [1, 2]}})
    assert complete_params({"micro_batch": 2}, spec)["activation_checkpointing"] is True
    assert complete_params({"micro_batch": 2, "activation_checkpointing": False}, spec)["activation_checkpointing"] is False


def test_an_inactive_knob_is_left_out_of_the_full_params_and_an_active_one_gets_its_default(tmp_path):
    spec = fast_spec(tmp_path, extra_space="num_workers = [0, 2]\nprefetch_factor = [2, 4]",
                     extra_baseline="num_workers = 2\nprefetch_factor = 4")
    assert baseline_params(spec)["prefetch_factor"] == 4
    assert "prefetch_factor" not in complete_params({"num_workers": 0}, spec)
    assert complete_params({"num_workers": 2}, spec)["prefetch_factor"] == 2  # the catalogue's default


def test_params_module_doctests_run():
    import doctest

    import tuner.spec._params
    result = doctest.testmod(tuner.spec._params)
    assert result.failed == 0 and result.attempted > 0
