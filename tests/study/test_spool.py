"""The local spool: a finished trial's result is never lost to a storage outage or a crash."""

import optuna
import pytest
from optuna.trial import TrialState

import tuner.study._coordinator as coordinator
import tuner.study._spool as spool
from tests.spine_helpers import fast_spec
from tuner.budget import ledger_from_trials
from tuner.errors import StorageError
from tuner.launch import Launcher, TrialResult
from tuner.study import RunOptions, open_study, record_result, run_study

RESULT = TrialResult(status="ok", launcher="fake", world_size=2, gpu_seconds=12.0, wall_seconds=6.0,
                     step_values=((1, 500.0), (2, 510.0), (3, 505.0), (4, 507.0)))


class OkLauncher(Launcher):
    name = "fake"

    def launch(self, request):
        return RESULT


def test_a_result_the_storage_never_got_is_recorded_by_the_next_run(tmp_path, monkeypatch):
    """Before: the trial that finished during an outage was marked FAIL, charged and retried."""
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"

    def storage_gone(study, trial, result):
        raise StorageError("recording trial 0: storage unreachable after 9 tries in 300 s: connection refused")

    monkeypatch.setattr(coordinator, "record_result", storage_gone)
    with pytest.raises(StorageError):
        run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=30.0),
                  launcher=OkLauncher(spec))
    kept = list(spool.pending(tmp_path / "runs", "fast"))
    assert [n for n, _, _ in kept] == [0] and kept[0][1] == RESULT     # on disk, whole
    monkeypatch.undo()
    events = []
    run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", max_trials=0), on_event=events.append,
              launcher=OkLauncher(spec))
    trials = optuna.load_study(study_name="fast", storage=db).trials
    assert trials[0].state == TrialState.COMPLETE and trials[0].value == pytest.approx(RESULT.tokens_per_sec_per_gpu)
    assert trials[0].user_attrs["gpu_seconds"] == 12.0
    assert not [t for t in trials if t.user_attrs.get("retry_of") == 0]          # not failed, not retried
    assert not list(spool.pending(tmp_path / "runs", "fast"))
    assert any("from the local spool" in e.message for e in events)


def test_a_result_whose_trial_went_stale_meanwhile_becomes_a_recovered_trial_charged_once(tmp_path):
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    study, limit = open_study(spec, storage_url=db, budget_gpu_seconds=100.0)
    trial = study.ask()
    trial.suggest_categorical("micro_batch", (1, 2, 4))
    trial.set_user_attr("reserved_gpu_seconds", 30.0)
    dead = spool.Spool(tmp_path / "runs", "fast")
    dead.put(trial.number, RESULT)
    assert spool.replay(study, tmp_path / "runs", record_result) == []     # its owner lives: hands off
    dead._lock.close()                                      # then dies (kill -9 drops its flock)
    study.tell(trial, state=TrialState.FAIL)               # another coordinator found it stale
    assert spool.replay(study, tmp_path / "runs", record_result) == [trial.number]
    trials = study.get_trials()
    recovered = [t for t in trials if t.user_attrs.get("recovered_from") == trial.number]
    assert len(recovered) == 1 and recovered[0].state == TrialState.COMPLETE
    assert recovered[0].params == {"micro_batch": trial.params["micro_batch"]}
    assert ledger_from_trials(trials, limit).used_gpu_seconds == pytest.approx(12.0)   # not 30 + 12
    assert spool.replay(study, tmp_path / "runs", record_result) == []                 # once


def test_a_result_whose_trial_was_failed_as_stale_while_it_ran_is_recovered_not_dropped(tmp_path):
    """A busy machine: another coordinator found the trial stale before its result came."""
    spec = fast_spec(tmp_path)
    study, limit = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=100.0)
    trial = study.ask()
    trial.suggest_categorical("micro_batch", (1, 2, 4))
    study.tell(trial, state=TrialState.FAIL)               # failed as stale meanwhile
    assert record_result(study, trial, RESULT) is False    # its own record is refused...
    assert spool.recover_late(study, trial.number, RESULT)  # ...so the result becomes a new trial
    assert not spool.recover_late(study, trial.number, RESULT)                           # once
    recovered = [t for t in study.get_trials() if t.user_attrs.get("recovered_from") == trial.number]
    # the value is the result's own: tokens over time (tuner.launch.TrialResult), 505.47 here
    assert len(recovered) == 1 and recovered[0].value == pytest.approx(RESULT.tokens_per_sec_per_gpu)


def test_a_trial_found_stale_between_its_result_attrs_and_its_tell_keeps_its_result(tmp_path, monkeypatch):
    """A storage outage past the grace period: the other coordinator's stale check landed while
    this one was recording (it used to die on UpdateFinishedTrialError, its result lost)."""
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=100.0)
    trial = study.ask()
    trial.suggest_categorical("micro_batch", (1, 2, 4))
    tell = study.tell

    def stale_first(*args, **kw):                          # the FAIL lands after the attrs, before the tell
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return tell(*args, **kw)

    monkeypatch.setattr(study, "tell", stale_first)
    assert record_result(study, trial, RESULT) is False
    assert study.get_trials()[0].user_attrs["status"] == "ok"             # the attrs it had written
    assert spool.recover_late(study, trial.number, RESULT)                # still recovered
    recovered = [t for t in study.get_trials() if t.user_attrs.get("recovered_from") == trial.number]
    assert len(recovered) == 1 and recovered[0].value == pytest.approx(RESULT.tokens_per_sec_per_gpu)


def test_a_failure_its_own_tell_recorded_is_not_recovered_twice(tmp_path):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=f"sqlite:///{tmp_path}/t.db", budget_gpu_seconds=100.0)
    trial = study.ask()
    trial.suggest_categorical("micro_batch", (1, 2, 4))
    node_fail = TrialResult(status="error", launcher="fake", world_size=2, gpu_seconds=4.0, wall_seconds=2.0,
                            message="slurm: NODE_FAIL", extra={"slurm_failure": True})
    assert record_result(study, trial, node_fail) is True                 # FAIL, status error, retried
    assert not spool.recover_late(study, trial.number, node_fail)          # a lost ack's retry: done
