"""tuner.stats._record: Optuna's trials as the plain records the statistics read."""

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.stats import StudyRecord, study_record
from tuner.stats._record import trial_records, trial_status

DIST = {"micro_batch": CategoricalDistribution([1, 2, 4])}


def _trial(state=TrialState.COMPLETE, value=None, steps=(), **attrs):
    return create_trial(state=state, value=value, params={"micro_batch": 2}, distributions=DIST, user_attrs=attrs,
                        intermediate_values=dict(enumerate(steps)))


def test_a_complete_trial_keeps_its_status_and_a_fail_keeps_only_a_trusted_one():
    assert trial_status(_trial(value=1.0)) == "ok"
    assert trial_status(_trial(value=0.0, status="oom")) == "oom"
    assert trial_status(_trial(TrialState.FAIL, status="stopped_by_budget")) == "stopped_by_budget"
    assert trial_status(_trial(TrialState.PRUNED, status="skipped")) == "skipped"
    # a coordinator killed while recording can leave status=ok on a trial that then went stale
    assert trial_status(_trial(TrialState.FAIL, status="ok")) == "fail"
    assert trial_status(_trial(TrialState.WAITING)) == "waiting"


def test_a_record_holds_the_steps_in_order_and_the_roles_attributes():
    t = _trial(value=110.0, steps=(100.0, 120.0), role="ablation", ablation_knob="micro_batch", ablation_of=3,
               gpu_seconds=40.0, startup_seconds=5.0, world_size=8, step_seconds=[1.0, 2.0], message="m")
    (r,) = trial_records([t])
    assert (r.state, r.status, r.params, r.steps, r.value) == ("COMPLETE", "ok", {"micro_batch": 2}, (100.0, 120.0), 110.0)
    assert (r.role, r.ablation_knob, r.ablation_of, r.ablation_round) == ("ablation", "micro_batch", 3, 1)
    assert r.startup_gpu_seconds == 40.0 and r.step_seconds == (1.0, 2.0) and r.gpu_seconds == 40.0
    assert r.datetime_complete is not None


def test_step_seconds_that_do_not_match_the_steps_are_dropped():
    (r,) = trial_records([_trial(value=1.0, steps=(1.0, 2.0), step_seconds=[1.0])])
    assert r.step_seconds == () and r.ablation_round is None and r.startup_gpu_seconds is None


def test_the_study_record_carries_the_studys_attrs():
    study = optuna.create_study(study_name="s", direction="maximize")
    study.set_user_attr("simulated", True)
    study.set_user_attr("budget_limit_gpu_seconds", 3600)
    study.add_trial(_trial(value=5.0, steps=(5.0,)))
    record = study_record(study)
    assert isinstance(record, StudyRecord) and record.name == "s" and len(record.trials) == 1
    assert record.simulated and record.limit_gpu_seconds == 3600.0
    assert not StudyRecord(name="x", trials=()).simulated and StudyRecord(name="x", trials=()).limit_gpu_seconds == 0.0
