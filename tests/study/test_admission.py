"""tuner.study._admission: what a coordinator admits, where the runoff starts and when it waits, and an admission cut short."""

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.study._admission import abandon_admission, finished, last_run_params, runoff_waits


class T:
    def __init__(self, state, **attrs):
        self.state, self.user_attrs = state, attrs


def test_the_runoff_waits_for_the_rounds_runs_still_running_elsewhere():
    running_ablation = [T(TrialState.COMPLETE, role="ablation"), T(TrialState.RUNNING, role="ablation")]
    assert runoff_waits({"ablation_stage": 1}, running_ablation)
    assert not runoff_waits({"ablation_stage": 1}, [T(TrialState.COMPLETE, role="ablation"), T(TrialState.RUNNING)])
    assert not runoff_waits({}, running_ablation)   # stage 0: the round itself is planned, nothing to wait for


DIST = {"micro_batch": CategoricalDistribution([1, 2, 4])}


def _ran(mb, state=TrialState.COMPLETE, **attrs):
    return create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None, params={"micro_batch": mb},
                        distributions=DIST, user_attrs=attrs)


def test_the_runoff_starts_from_the_config_of_the_latest_trial_that_ran():
    study = optuna.create_study(direction="maximize")
    for trial in (_ran(1, gpu_seconds=10.0), _ran(4, gpu_seconds=12.0), _ran(2, TrialState.FAIL, gpu_seconds=0.0)):
        study.add_trial(trial)
    trials = study.get_trials()
    assert last_run_params(trials) == {"micro_batch": 4}  # the latest FAIL spent nothing: it did not run
    assert last_run_params(trials[2:]) is None and last_run_params([]) is None


def test_an_admission_cut_short_is_failed_at_no_cost_and_its_config_queued_once():
    study = optuna.create_study(direction="maximize")
    trial = study.ask({"micro_batch": DIST["micro_batch"]})
    abandon_admission(study, trial)
    assert finished(study, trial)
    cut, retry = study.get_trials()
    assert cut.state == TrialState.FAIL and cut.user_attrs["gpu_seconds"] == 0.0 and cut.user_attrs["never_launched"]
    assert "never launched" in cut.user_attrs["message"]
    assert retry.state == TrialState.WAITING and retry.user_attrs["retry_of"] == cut.number
    assert retry.system_attrs["fixed_params"] == cut.params  # enqueued: its config runs again
    abandon_admission(study, trial)  # already finished: nothing more
    assert len(study.get_trials()) == 2


def test_a_stale_trial_never_admitted_is_interrupted_at_no_cost_and_an_admitted_one_is_lost(storage_url):
    """An ask that committed as the storage went (asked, never reserved) goes stale like a dead
    coordinator's trial; it never launched, so it costs nothing (as an admission cut short)."""
    import time

    from tuner.storage import admission_lock, open_storage
    from tuner.study import fail_stale_trials

    storage = open_storage(storage_url, grace_period_s=2)
    study = optuna.create_study(study_name="s", storage=storage)
    orphan = study.ask({"micro_batch": DIST["micro_batch"]})          # asked, never admitted
    admitted = study.ask({"micro_batch": DIST["micro_batch"]})
    admitted.set_user_attr("reserved_gpu_seconds", 100.0)              # admitted, then its coordinator died
    time.sleep(3.5)                                                    # past the 2 s grace
    with admission_lock(storage, "s"):
        failed = fail_stale_trials(study)
    assert sorted(failed) == [orphan.number, admitted.number]
    trials = study.get_trials(deepcopy=False)
    never = trials[orphan.number].user_attrs
    assert trials[orphan.number].state == TrialState.FAIL and never["status"] == "interrupted"
    assert never["gpu_seconds"] == 0.0 and never["never_launched"] is True
    assert trials[admitted.number].user_attrs["status"] == "lost"
    # each config queued again once
    assert sum(t.state == TrialState.WAITING for t in trials) == 2
