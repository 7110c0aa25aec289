"""objectives.trial_config: TUNER_TRIAL_CONFIG parsed, completed with the catalogue's defaults, and refused naming the key."""

import json

import pytest

from objectives.trial_config import Knobs, TrialConfigError, load_config, parse_config
from tests.objectives.test_fsdp_finetune import trial_config


def test_config_defaults_conditional_knobs_and_model_settings(tmp_path):
    cfg = parse_config(trial_config(tmp_path, num_workers=2, nccl_algo="Ring", nccl_future_knob=1))
    assert cfg.knobs.prefetch_factor == 2 and cfg.knobs.reshard_after_forward is True   # defaults filled
    assert cfg.launch_params == {"nccl_algo": "Ring", "nccl_proto": "default", "nccl_future_knob": 1}
    assert parse_config(trial_config(tmp_path, prefetch_factor=4)).knobs.prefetch_factor is None  # no workers
    raw = trial_config(tmp_path)
    raw["model"]["activation_checkpointing"] = True
    assert parse_config(raw).knobs.activation_checkpointing is True          # the model section's setting...
    raw["params"]["activation_checkpointing"] = False
    assert parse_config(raw).knobs.activation_checkpointing is False         # ...which a knob overrides


@pytest.mark.parametrize("params,match", [
    ({"warp_drive": 9}, "unknown knob 'warp_drive' in params"),
    ({"micro_batch": 0}, "params.micro_batch: 0 is not an integer >= 1"),
    ({"grad_accum": 1.5}, "params.grad_accum: 1.5"),
    ({"padding": "ragged"}, "params.padding: unknown padding 'ragged'"),
    ({"reshard_after_forward": "yes"}, "params.reshard_after_forward: 'yes' is not true/false"),
    ({"sharding": "zero9"}, "params.sharding: unknown sharding 'zero9'"),
])
def test_bad_knobs_are_refused_naming_the_key(tmp_path, params, match):
    with pytest.raises(TrialConfigError, match=match):
        parse_config(trial_config(tmp_path, **params))


@pytest.mark.parametrize("trial, match", [
    ({"checkpoint_every": 5}, "checkpoint_dir"),
    ({"checkpoint_every": -1, "checkpoint_dir": "/x"}, "checkpoint_every"),
    ({"checkpoint_every": 5, "checkpoint_dir": "/x", "checkpoint_mode": "lazy"}, "checkpoint_mode"),
])
def test_bad_checkpoint_settings_are_refused_naming_the_key(tmp_path, trial, match):
    raw = trial_config(tmp_path)
    raw["trial"].update(trial)
    with pytest.raises(TrialConfigError, match=match):
        parse_config(raw)


@pytest.mark.parametrize("section, key, value, match", [
    ("model", "dtype", "fp8", "model.dtype 'fp8'"),
    ("model", "seq_len", 1, "model.seq_len 1: an integer >= 2"),
    ("trial", "warmup_steps", -1, "trial.warmup_steps -1: an integer >= 0"),
    ("trial", "measure_steps", True, "trial.measure_steps True: an integer >= 1"),
])
def test_bad_model_and_trial_settings_are_refused_naming_the_key(tmp_path, section, key, value, match):
    raw = trial_config(tmp_path)
    raw[section][key] = value
    with pytest.raises(TrialConfigError, match=match):
        parse_config(raw)


def test_the_adaptive_settings_the_bar_to_beat_and_the_backend_are_read():
    raw = {"params": {}, "model": {"preset": "tiny", "seq_len": 64}, "data": {},
           "trial": {"warmup_steps": 0, "measure_steps": 5, "adaptive": True, "min_steps": 3, "target_rel_ci": 0.05},
           "stop_below_tokens_per_sec_per_gpu": 1234, "cluster": {"backend": "nccl"}}
    cfg = parse_config(raw)
    assert (cfg.adaptive, cfg.min_steps, cfg.target_rel_ci, cfg.stop_below) == (True, 3, 0.05, 1234.0)
    assert cfg.backend == "nccl" and cfg.seq_len == 64
    del raw["stop_below_tokens_per_sec_per_gpu"], raw["cluster"]
    cfg = parse_config(raw)
    assert cfg.stop_below is None and cfg.backend == "gloo" and cfg.adaptive is True


def test_knobs_read_as_attributes_or_a_mapping_and_an_unknown_name_is_an_attribute_error():
    knobs = Knobs({"micro_batch": 4, "nccl_algo": "Ring"})
    assert knobs.micro_batch == 4 and dict(knobs) == {"micro_batch": 4}  # launch knobs are not workload knobs
    assert knobs.prefetch_factor is None
    with pytest.raises(AttributeError, match="no knob 'warp'"):
        _ = knobs.warp


def test_a_config_file_that_cannot_be_read_is_a_trial_config_error_naming_it(tmp_path):
    with pytest.raises(TrialConfigError, match="missing.json"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TrialConfigError, match="bad.json"):
        load_config(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(trial_config(tmp_path)))
    assert load_config(good).knobs.micro_batch == 2


def test_trial_config_doctests_run():
    import doctest

    import objectives.trial_config
    result = doctest.testmod(objectives.trial_config)
    assert result.failed == 0 and result.attempted > 0
