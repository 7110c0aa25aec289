"""A trial that never ran is PRUNED, not FAIL: the dashboard counts as failures only what ran."""

import optuna
from optuna.trial import TrialState

from tuner.stats import study_record
from tuner.storage import end_unrun


def test_an_unrun_trial_is_pruned_with_its_reason_and_no_gpu_time():
    study = optuna.create_study(direction="maximize")
    for status, message in (("pruned", "screened: NCCL cannot run LL128 here"),
                            ("repeat", "not run: an exact repeat of trial 0"),
                            ("skipped", "not run: the budget was spent")):
        end_unrun(study, study.ask(), status, message)
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED] * 3
    assert [t.user_attrs["status"] for t in trials] == ["pruned", "repeat", "skipped"]
    assert all(t.user_attrs["gpu_seconds"] == 0.0 and t.user_attrs["message"] for t in trials)
    assert not study.get_trials(states=(TrialState.FAIL,))                    # no failures counted
    assert [t.status for t in study_record(study).trials] == ["pruned", "repeat", "skipped"]


def test_a_queued_run_another_coordinator_popped_is_not_skipped(storage_url):
    """_skip_unrunnable reads the queue, then another coordinator's ask pops a run: ending it
    as `skipped` then would end a trial that coordinator is about to launch."""
    from tuner.storage import end_if_waiting, open_storage

    study = optuna.create_study(direction="maximize", storage=open_storage(storage_url), study_name="q")
    study.enqueue_trial({"x": 1})
    study.enqueue_trial({"x": 2})
    first, second = study.get_trials(states=(TrialState.WAITING,))   # read while both are queued
    popped = study.ask()                                             # another coordinator pops the first
    assert popped.number == first.number
    assert not end_if_waiting(study, first, "skipped", "not run: the budget was spent")
    assert end_if_waiting(study, second, "skipped", "not run: the budget was spent")
    one, two = study.get_trials()
    assert one.state == TrialState.RUNNING and "status" not in one.user_attrs
    assert two.state == TrialState.PRUNED and two.user_attrs["status"] == "skipped" and two.user_attrs["gpu_seconds"] == 0.0
    memory = optuna.create_study(direction="maximize")   # one process: a re-read, the same answer
    memory.enqueue_trial({"x": 1})
    queued = memory.get_trials()[0]
    memory.ask()
    assert not end_if_waiting(memory, queued, "skipped", "-") and memory.get_trials()[0].state == TrialState.RUNNING
