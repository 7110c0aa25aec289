"""tuner.study._lifecycle: opening, joining and loading a study, and the one retry a lost trial gets."""

import optuna
import pytest
from optuna.trial import TrialState

from tests.spine_helpers import fast_spec
from tuner.errors import BudgetError, StudyConflictError
from tuner.storage import end_if_waiting, open_storage
from tuner.study import check_joinable, load_existing_study, open_study, retry_once


def test_joining_with_another_spec_is_refused_with_a_diff(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    open_study(spec, storage_url=storage_url, budget_gpu_seconds=50.0)
    other = fast_spec(tmp_path, timeout_s=99)
    with pytest.raises(StudyConflictError, match=r"trial.timeout_s: 60(\.0)? -> 99"):
        open_study(other, storage_url=storage_url)


def test_a_study_of_the_name_with_another_spec_is_found_before_anything_is_written(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    storage = open_storage(storage_url, heartbeat=False)
    check_joinable(storage, "fast", spec)                      # no such study yet: fine
    open_study(spec, storage_url=storage_url, budget_gpu_seconds=50.0)
    check_joinable(storage, "fast", spec)                      # the same spec: fine
    with pytest.raises(StudyConflictError, match=r"exists with another spec.*trial.timeout_s: 60(\.0)? -> 99"):
        check_joinable(storage, "fast", fast_spec(tmp_path, timeout_s=99))
    assert len(optuna.load_study(study_name="fast", storage=storage_url).trials) == 1   # only the baseline


def test_no_budget_anywhere_is_an_error_and_creates_nothing(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    with pytest.raises(StudyConflictError, match="no budget"):
        open_study(spec, storage_url=storage_url)
    assert optuna.get_all_study_names(storage_url) == []


def test_a_budget_under_one_trial_is_refused_before_the_study_exists(tmp_path, storage_url):
    spec = fast_spec(tmp_path, estimate=100.0)
    with pytest.raises(BudgetError, match=r"less than one trial: the first is estimated at 0\.03 GPU-h"):
        open_study(spec, storage_url=storage_url, budget_gpu_seconds=50.0)
    assert optuna.get_all_study_names(storage_url) == []


def test_a_resumed_budget_under_what_was_used_is_refused_and_an_extended_one_requeues_a_skipped_baseline(
        tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=storage_url, budget_gpu_seconds=50.0)
    (base,) = study.get_trials(states=(TrialState.WAITING,))
    assert end_if_waiting(study, base, "skipped", "not run: the budget was spent before this baseline run")
    trial = study.ask()
    trial.set_user_attr("gpu_seconds", 30.0)
    trial.set_user_attr("status", "ok")
    study.tell(trial, 1000.0)
    with pytest.raises(BudgetError, match="less than the 0.01 GPU-h study 'fast' has already used"):
        open_study(spec, storage_url=storage_url, budget_gpu_seconds=20.0)
    study, limit = open_study(spec, storage_url=storage_url, budget_gpu_seconds=50.0)   # unchanged: nothing queued
    assert limit == 50.0 and study.get_trials(states=(TrialState.WAITING,)) == []
    study, limit = open_study(spec, storage_url=storage_url, budget_gpu_seconds=80.0)   # extended: the baseline again
    (again,) = study.get_trials(states=(TrialState.WAITING,))
    assert limit == 80.0 and again.user_attrs["role"] == "baseline" and again.params == base.params


def test_a_retry_keeps_why_its_trial_ran_and_a_cut_retry_is_queued_again(tmp_path):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=40.0)
    study.enqueue_trial({"micro_batch": 2, "padding": "packed", "nccl_algo": "Ring"},
                        user_attrs={"role": "ablation", "ablation_of": 3, "ablation_round": 2, "remeasure": "runoff"})
    for t in study.get_trials(states=(TrialState.WAITING,)):
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)   # the runoff run, found stale
    runoff_run = study.get_trials()[-1]
    retry_once(study, runoff_run)
    retry = study.get_trials()[-1]
    assert {k: retry.user_attrs.get(k) for k in ("role", "ablation_of", "ablation_round", "remeasure", "retry_of")} \
        == {"role": "ablation", "ablation_of": 3, "ablation_round": 2, "remeasure": "runoff",
            "retry_of": runoff_run.number}
    study._storage.set_trial_state_values(retry._trial_id, TrialState.FAIL)   # the retry, found stale: not again
    retry_once(study, study.get_trials()[-1])
    assert len(study.get_trials()) == 3
    study.enqueue_trial(retry.system_attrs["fixed_params"], user_attrs={**retry.user_attrs, "never_launched": True})
    cut = study.get_trials()[-1]                          # a retry whose admission a storage error cut
    study._storage.set_trial_state_values(cut._trial_id, TrialState.FAIL)
    retry_once(study, study.get_trials()[-1])             # never ran, so never its config's fault: again
    assert study.get_trials()[-1].user_attrs["retry_of"] == cut.number and len(study.get_trials()) == 5


def test_a_proposal_cut_off_before_it_had_a_config_is_not_retried_with_an_unscreened_one(tmp_path):
    """A storage outage mid-admission left a search trial FAIL with no params; its retry (a
    queued, deliberate run) took a fresh config past screening: a Tree+LL config the NCCL
    preflight had pruned twice launched and failed. Nothing to retry: the next ask proposes."""
    from tuner.study import enqueue_lost_retries

    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=40.0)
    study.enqueue_trial({"micro_batch": 2, "padding": "packed", "nccl_algo": "Ring"}, user_attrs={"role": "ablation"})
    baseline, queued = study.get_trials(states=(TrialState.WAITING,))
    cut = study.ask()                                  # pops the baseline, the params not yet suggested
    assert cut.number == baseline.number and study.get_trials()[cut.number].params == {}
    for t in (cut, study.ask()):                      # the baseline, then the queued ablation run
        study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    proposal = study.ask()                            # a search proposal: no fixed params at all
    study._storage.set_trial_user_attr(proposal._trial_id, "status", "interrupted")
    study._storage.set_trial_state_values(proposal._trial_id, TrialState.FAIL)
    assert enqueue_lost_retries(study, study.get_trials()) == [baseline.number, queued.number]
    retry_once(study, study.get_trials()[proposal.number])       # the coordinator's own call: nothing
    assert enqueue_lost_retries(study, study.get_trials()) == []  # and nothing owed
    retries = study.get_trials(states=(TrialState.WAITING,))
    assert [(r.user_attrs["retry_of"], r.system_attrs["fixed_params"]) for r in retries] == [
        (baseline.number, baseline.system_attrs["fixed_params"]), (queued.number, queued.system_attrs["fixed_params"])]


def test_a_missing_study_is_named_without_the_password(pg_url):
    url = pg_url.replace("postgres@", "postgres:s3cret@")  # trust auth ignores it; errors must not show it
    optuna.create_study(study_name="there", storage=open_storage(url))
    with pytest.raises(StudyConflictError) as err:
        load_existing_study(url, "gone")
    assert "s3cret" not in str(err.value) and "***" in str(err.value)
    assert str(err.value).endswith("(studies there: there)")


def test_the_spec_diff_names_every_changed_leaf_and_what_is_absent():
    from tuner.study._lifecycle import spec_diff

    old = {"trial": {"measure_steps": 8, "timeout_s": 60}, "space": {"micro_batch": [1, 2]}}
    new = {"trial": {"measure_steps": 16, "timeout_s": 60}, "space": {"micro_batch": [1, 2, 4]}, "budget": "1gpuh"}
    assert spec_diff(old, new) == ('budget: "<absent>" -> "1gpuh"; space.micro_batch: [1, 2] -> [1, 2, 4]; '
                                   "trial.measure_steps: 8 -> 16")
    assert spec_diff(old, old) == ""


def test_the_lifecycle_doctests_run():
    import doctest

    import tuner.study._lifecycle
    result = doctest.testmod(tuner.study._lifecycle)
    assert result.failed == 0 and result.attempted > 0
