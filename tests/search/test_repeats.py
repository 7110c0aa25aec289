"""No accidental repeats: a finished config is not launched again unless deliberately."""

import optuna
from optuna.trial import TrialState

from tests.spine_helpers import fast_spec
from tests.study.test_coordinator import FakeLauncher
from tuner.search import REPEAT, coordinator_seed, screen_repeat, suggest_params
from tuner.study import RunOptions, open_study, run_study


def configs(study):
    return [repr(sorted(t.params.items())) for t in study.trials
            if t.state == TrialState.COMPLETE and not t.user_attrs.get("role")]


def test_a_resumed_study_does_not_repeat_its_seeded_start_up_trials(tmp_path):
    """Before: the second run's sampler had the spec's seed again and re-ran the first configs."""
    spec = fast_spec(tmp_path)                              # random sampler, seed 0, 18 configs
    db = f"sqlite:///{tmp_path}/t.db"
    for _ in range(3):                                      # three runs, each stopping after 3 trials
        run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=1000.0,
                                   max_trials=3), launcher=FakeLauncher(spec))
    study = optuna.load_study(study_name="fast", storage=db)
    ran = configs(study)
    assert len(ran) >= 6 and len(set(ran)) == len(ran)
    assert study.user_attrs["coordinator_starts"] == 3


def test_parallel_coordinators_get_their_own_sampler_seeds(tmp_path):
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    first, _ = open_study(spec, storage_url=db, budget_gpu_seconds=100.0)
    second, _ = open_study(spec, storage_url=db, budget_gpu_seconds=100.0)
    assert coordinator_seed(0, 0) == 0 and coordinator_seed(0, 1) != coordinator_seed(0, 0)
    suggest_params(first.ask(), spec)                       # the baseline, queued: popped once
    a = [suggest_params(first.ask(), spec) for _ in range(4)]
    b = [suggest_params(second.ask(), spec) for _ in range(4)]
    assert a != b                                           # before: both drew the same seeded stream


def test_an_exact_repeat_is_not_launched_a_queued_one_is_a_labelled_remeasurement(tmp_path):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=100.0)
    base = study.ask()                                      # the baseline (queued, role baseline)
    params = suggest_params(base, spec)
    study.tell(base, 1.0)
    study.enqueue_trial(params)                             # as if the sampler suggested it again
    fresh = study.ask()
    assert suggest_params(fresh, spec) == params
    assert screen_repeat(study, spec, fresh, params, study.get_trials())      # a repeat: recorded, never launched
    done = study.get_trials()[fresh.number]
    assert done.state == TrialState.PRUNED and done.user_attrs["status"] == REPEAT
    assert done.user_attrs["gpu_seconds"] == 0.0 and "repeat of trial 0" in done.user_attrs["message"]
    replacement = [t for t in study.get_trials() if t.user_attrs.get("replaces_repeat") == fresh.number]
    assert len(replacement) == 1 and replacement[0].state == TrialState.WAITING
    study.enqueue_trial(params, user_attrs={"role": "ablation"})        # deliberate: the ablation's re-run
    unseen = study.ask()
    unseen_params = suggest_params(unseen, spec)
    assert unseen_params != params and not screen_repeat(study, spec, unseen, unseen_params, study.get_trials())
    again = study.ask()
    assert suggest_params(again, spec) == params
    assert not screen_repeat(study, spec, again, params, study.get_trials())  # runs, labelled
    assert again.user_attrs["remeasurement_of"] == 0
