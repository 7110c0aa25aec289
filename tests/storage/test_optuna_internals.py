"""Optuna's private attributes, reached in tuner.storage only: fail loudly if they move."""

import datetime
import subprocess
from pathlib import Path

import optuna
import pytest

from tuner.storage import missing_internals, open_storage, rdb_storage, study_storage, trial_id

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_optuna_still_has_what_tuner_reaches():
    assert missing_internals() == [], (
        f"Optuna {optuna.__version__} moved internals tuner.storage relies on: {missing_internals()}")


def test_the_accessors_reach_the_rdb_storage_and_the_trial_id(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/t.db")
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    assert rdb_storage(study) is storage
    assert study_storage(study).get_trial(trial_id(trial)).number == trial.number
    assert trial_id(study.trials[0]) == trial_id(trial)


def test_write_trial_stores_in_one_go_and_the_trial_sees_its_attrs(tmp_path):
    from tuner.storage import write_trial

    for storage in (open_storage(f"sqlite:///{tmp_path}/t.db"), None):   # tuner's RDB storage, and in memory
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        write_trial(study, trial, steps=[(0, 1.5)], user_attrs={"reserved_gpu_seconds": 30.0, "launcher": "sim"})
        stored = study_storage(study).get_trial(trial_id(trial))
        assert stored.user_attrs == {"reserved_gpu_seconds": 30.0, "launcher": "sim"}
        assert stored.intermediate_values == {0: 1.5}
        assert trial.user_attrs == stored.user_attrs   # as set_user_attr would leave it


def test_no_module_outside_optuna_internals_reaches_optuna_privates():
    pattern = r"(?<!self)(?<!tuner\.storage)\._(storage|trial_id|backend|study_id|cached_trial_ids)\b"   # another object's
    found = subprocess.run(["grep", "-rnP", pattern, "--include=*.py", "tuner", "bench", "objectives", "helper"],
                           cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
    assert [f for f in found if not f.startswith("tuner/storage/_optuna_internals.py")] == []


def test_a_result_is_written_in_one_transaction_all_or_nothing(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/t.db")
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    rdb_storage(study).record(trial_id(trial), steps=[(0, 1.5), (1, 2.5)], user_attrs={"status": "ok", "gpu_seconds": 3.0})
    study.tell(trial, 2.0)
    done = study.trials[0]
    assert done.intermediate_values == {0: 1.5, 1: 2.5} and done.user_attrs == {"status": "ok", "gpu_seconds": 3.0}
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):   # finished elsewhere: nothing written
        rdb_storage(study).record(trial_id(trial), steps=[(2, 9.0)], user_attrs={"late": True})
    assert "late" not in study.trials[0].user_attrs and 2 not in study.trials[0].intermediate_values


def _mixed_study(storage):
    """Trials in every state the ledger tells apart, with ledger attrs and others beside them."""
    study = optuna.create_study(storage=storage)
    done = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    for key, value in {"gpu_seconds": 40.0, "status": "ok", "warm": True, "worker_startup_gpu_seconds": 5.0,
                       "message": "not a ledger attr"}.items():
        done.set_user_attr(key, value)
    study.tell(done, 1.0)
    failed = study.ask()
    failed.set_user_attr("gpu_seconds", 90.0)
    failed.set_user_attr("status", "oom")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    running = study.ask()
    running.set_user_attr("reserved_gpu_seconds", 120.0)
    study.enqueue_trial({"x": 0.5}, user_attrs={"role": "ablation"})
    recovered = study.ask()
    recovered.set_user_attr("recovered_from", failed.number)
    recovered.set_user_attr("ran_gpu_seconds", 7.0)
    return study


def test_the_ledger_view_gives_the_budget_what_full_trials_give(storage_url):
    """One query with only the ledger's attrs, on the lock's connection or a session of its own:
    the ledger, the cap basis and the cost estimate come out the same as from full trials."""
    from tuner import budget
    from tuner.storage import admission_lock, ledger_view

    study = _mixed_study(open_storage(storage_url))
    full = study.get_trials(deepcopy=False)
    with admission_lock(rdb_storage(study), study.study_name) as held:
        views = [ledger_view(study, budget.LEDGER_ATTRS), ledger_view(study, budget.LEDGER_ATTRS, conn=held)]
    assert (held is not None) == storage_url.startswith("postgresql")   # PostgreSQL lends its lock's connection
    for view in views:
        assert [(t.number, t.state) for t in view] == [(t.number, t.state) for t in full]
        assert "message" not in view[0].user_attrs
        assert budget.ledger_from_trials(view, 1000.0) == budget.ledger_from_trials(full, 1000.0)
        assert (budget.cap_basis(view, first_estimate_gpu_seconds=1.0)
                == budget.cap_basis(full, first_estimate_gpu_seconds=1.0) == 40.0)
        assert budget.costs_from_trials(view) == budget.costs_from_trials(full)


def test_ledger_attrs_name_every_attr_the_budget_reads():
    """A key read by the ledger or the costs but missing from LEDGER_ATTRS would read as absent
    under the lock (tuner.storage.ledger_view) and silently change the budget."""
    import ast
    import inspect

    from tuner import budget

    read = set()
    for fn in (budget.ledger_from_trials, budget.costs_from_trials):
        for node in ast.walk(ast.parse(inspect.getsource(fn))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                read.add(node.args[0].value)
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                read.add(node.slice.value)
    assert read and read <= set(budget.LEDGER_ATTRS), read - set(budget.LEDGER_ATTRS)


def test_write_trial_on_the_locks_connection_writes_a_running_trial_only(pg_url):
    from tuner.storage import admission_lock, write_trial

    study = optuna.create_study(storage=open_storage(pg_url))
    trial = study.ask()
    trial.set_user_attr("launcher", "old")
    with admission_lock(rdb_storage(study), study.study_name) as held:
        write_trial(study, trial, user_attrs={"reserved_gpu_seconds": 30.0, "launcher": "sim"}, conn=held)
    stored = study_storage(study).get_trial(trial_id(trial))
    assert stored.user_attrs == {"reserved_gpu_seconds": 30.0, "launcher": "sim"} == trial.user_attrs
    study.tell(trial, 1.0)
    with admission_lock(rdb_storage(study), study.study_name) as held, \
            pytest.raises(optuna.exceptions.UpdateFinishedTrialError, match="not RUNNING"):
        write_trial(study, trial, user_attrs={"reserved_gpu_seconds": 99.0, "late": True}, conn=held)
    assert study.trials[0].user_attrs == {"reserved_gpu_seconds": 30.0, "launcher": "sim"}   # nothing written


def test_upkeep_is_due_only_for_a_trial_without_a_beat_or_with_a_stale_one(storage_url):
    from tuner.storage import fail_stale_trials, upkeep_due

    storage = open_storage(storage_url, grace_period_s=60)
    beats = optuna.storages._rdb.models.TrialHeartbeatModel  # noqa: SLF001
    study = optuna.create_study(storage=storage)
    assert not upkeep_due(study)                      # nothing running
    trial = study.ask()                               # beaten the moment it runs
    assert not upkeep_due(study)
    with storage.scoped_session() as session:         # its beat lost (an ask that committed as the storage went)
        session.query(beats).delete()
        session.commit()
    assert upkeep_due(study)                          # an orphan to beat
    assert fail_stale_trials(study, {"status": "lost"}) == []   # beaten now, not yet stale
    assert not upkeep_due(study)
    with storage.scoped_session() as session:         # its coordinator stopped beating an hour ago
        row = session.query(beats).one()
        row.heartbeat = row.heartbeat - datetime.timedelta(hours=1)
        session.commit()
    assert upkeep_due(study)
    assert [t.number for t in fail_stale_trials(study, {"status": "lost"})] == [trial.number]
    assert not upkeep_due(study)


def test_trial_state_reads_the_state_the_storage_holds(storage_url):
    from tuner.storage import trial_state

    for storage in (open_storage(storage_url), None):   # tuner's RDB storage, and in memory
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        assert trial_state(study, trial) == optuna.trial.TrialState.RUNNING
        study.tell(trial, 1.0)
        assert trial_state(study, trial) == optuna.trial.TrialState.COMPLETE


def test_write_trial_sets_a_constraint_once_in_its_transaction_as_optuna_does(storage_url):
    """The `failed` constraint Optuna's samplers read, written with the result (Optuna's
    set_constraint reads the whole trial first, then writes in a transaction of its own)."""
    from tuner.storage import write_trial

    for storage in (open_storage(storage_url), None):
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        write_trial(study, trial, steps=[(0, 2.0)], user_attrs={"status": "ok"}, constraints={"failed": 0.0})
        write_trial(study, trial, user_attrs={"status": "ok"}, constraints={"failed": 1.0})   # set once
        assert study_storage(study).get_trial(trial_id(trial)).system_attrs["constraints:failed"] == 0.0
        assert trial._cached_frozen_trial.system_attrs["constraints:failed"] == 0.0  # noqa: SLF001 - its own copy
        study.tell(trial, 2.0)
        ref = study.ask()
        ref.set_constraint("failed", 0.0)                               # what Optuna itself writes
        study.tell(ref, 1.0)
        assert study.trials[0].system_attrs == study.trials[1].system_attrs


def test_a_heartbeat_and_attrs_in_one_transaction(storage_url):
    storage = open_storage(storage_url)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    with storage.scoped_session() as session:             # no beat yet
        session.query(optuna.storages._rdb.models.TrialHeartbeatModel).delete()  # noqa: SLF001
        session.commit()
    storage.record(trial_id(trial), user_attrs={"ran_gpu_seconds": 8.0}, heartbeat=True)
    storage.record(trial_id(trial), user_attrs={"ran_gpu_seconds": 16.0}, heartbeat=True)
    assert study.trials[0].user_attrs == {"ran_gpu_seconds": 16.0}
    assert storage._get_stale_trial_ids(study._study_id) == []  # noqa: SLF001 - beaten, and fresh
    with storage.scoped_session() as session:
        assert session.query(optuna.storages._rdb.models.TrialHeartbeatModel).count() == 1  # noqa: SLF001
