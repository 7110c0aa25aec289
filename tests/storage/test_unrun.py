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
