"""tuner.model_sampler: helper's model, refitted online, guides an Optuna sampler."""

import dataclasses

import optuna
import pytest
from optuna.trial import TrialState

from tuner.errors import SpecError
from tuner.model_sampler import ModelGuidedSampler, model_knows, top_prediction
from tuner.sampling import make_sampler
from tuner.space import complete_params, suggest_params
from tuner.spec import load_spec

SPEC = "studies/sim-llama13b-h100x8.toml"


def _spec(path=SPEC, sampler="auto"):
    spec = load_spec(path)
    return dataclasses.replace(spec, study=dataclasses.replace(spec.study, sampler=sampler))


def test_auto_is_model_guided_when_helper_knows_the_cluster_and_tpe_otherwise():
    assert isinstance(make_sampler(_spec()), ModelGuidedSampler)
    cpu = _spec("studies/quickstart.toml")
    assert not model_knows(cpu)
    assert isinstance(make_sampler(cpu), optuna.samplers.TPESampler)
    with pytest.raises(SpecError, match="study.sampler"):
        make_sampler(dataclasses.replace(cpu, study=dataclasses.replace(cpu.study, sampler="model")))


def test_first_pick_is_the_models_top_prediction_and_records_what_it_expected():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    trial = study.ask()
    params = suggest_params(trial, spec)
    attrs = study.get_trials()[0].user_attrs
    assert attrs["model_pick"] == "startup" and params["padding"] == "packed"
    # the model's top prediction, enqueued, for its predicted value: the first pick is near it
    # (a little lower only where the top is risky on memory, which the pick weighs)
    _, top_attrs = ModelGuidedSampler(spec).propose([], fixed=top_prediction(spec))
    top_value = top_attrs["predicted_tokens_per_sec_per_gpu"]
    assert 0.85 * top_value <= attrs["predicted_tokens_per_sec_per_gpu"] <= top_value * 1.0001


def test_running_trials_and_finished_configs_are_never_proposed_again():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    first = study.ask()
    p1 = complete_params(suggest_params(first, spec), spec)
    second = study.ask()  # `first` is RUNNING: a parallel coordinator must get something else
    p2 = complete_params(suggest_params(second, spec), spec)
    assert p1 != p2
    for t, value in ((first, 5000.0), (second, 4000.0)):
        t.set_user_attr("status", "ok")
        study.tell(t, value)
    seen = [p1, p2]
    for _ in range(4):
        t = study.ask()
        p = complete_params(suggest_params(t, spec), spec)
        assert p not in seen
        seen.append(p)
        t.set_user_attr("status", "ok")
        study.tell(t, 4500.0)
    picks = [t.user_attrs.get("model_pick") for t in study.get_trials()]
    assert picks[:3] == ["startup"] * 3 and "ei" in picks


def test_enqueued_baseline_keeps_its_params():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    study.enqueue_trial(dict(spec.baseline), user_attrs={"role": "baseline"})
    params = suggest_params(study.ask(), spec)
    assert all(params[k] == v for k, v in spec.baseline.items() if k in params)


def test_certain_failures_and_pruned_nccl_settings_are_avoided():
    spec = _spec("studies/sim-llama1b-a100x16.toml")
    sampler = ModelGuidedSampler(spec)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(5):
        t = study.ask()
        p = complete_params(suggest_params(t, spec), spec)
        assert p["nccl_algo"] != "NVLS"  # A100 has no NVSwitch multicast: never proposed
        t.set_user_attr("status", "ok")
        study.tell(t, 10000.0)
    assert all(t.state == TrialState.COMPLETE for t in study.get_trials())
