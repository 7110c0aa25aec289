"""Optuna's private attributes, reached in tuner.storage only: fail loudly if they move."""

import contextlib
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



def test_write_trial_sets_a_constraint_once_in_its_transaction_as_optuna_does(storage_url):
    """The `failed` constraint Optuna's samplers read, written with the result (Optuna's
    set_constraint reads the whole trial first, then writes in a transaction of its own)."""
    from tuner.storage import write_trial

    for storage in (open_storage(storage_url), None):
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        write_trial(study, trial, steps=[(0, 2.0)], user_attrs={"status": "ok"}, constraints={"failed": 0.0})
        with pytest.warns(UserWarning, match="already set") if storage is None else contextlib.nullcontext():
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


def test_a_trials_parameters_are_written_in_one_transaction(storage_url):
    import sqlalchemy

    from tuner.storage import params_in_one_transaction

    storage = open_storage(storage_url)
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"b": 2})
    events = []  # "P": a parameter row inserted, "C": a commit
    sqlalchemy.event.listen(storage.engine, "commit", lambda conn: events.append("C"))
    sqlalchemy.event.listen(storage.engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: events.append(
        "P" if sql.lstrip().upper().startswith("INSERT INTO TRIAL_PARAMS") else ""))
    trial = study.ask()  # the enqueued one: a fixed value beside sampled ones
    events.clear()
    with params_in_one_transaction(trial):
        values = (trial.suggest_int("a", 0, 3), trial.suggest_int("b", 0, 3), trial.suggest_categorical("c", ["x", "y"]))
        storage.record(trial_id(trial), user_attrs={"pick": "model"})          # the sampler's attrs: held with them
        held = study_storage(study).get_trial(trial_id(trial))
        assert held.params == {} and "pick" not in held.user_attrs               # held until the block ends
    written = "".join(events).strip("C")
    assert study_storage(study).get_trial(trial_id(trial)).user_attrs["pick"] == "model"
    # the three rows in one transaction (one multi-row INSERT where the driver batches them)
    assert written.count("P") in (1, 3) and "C" not in written[written.index("P"):]
    assert values[1] == 2 and study.trials[0].params == dict(zip("abc", values)) == trial.params
    assert study.trials[0].distributions["c"] == optuna.distributions.CategoricalDistribution(["x", "y"])

    abandoned, clash, plain = study.ask(), study.ask(), study.ask()
    with pytest.raises(RuntimeError), params_in_one_transaction(abandoned):     # an error: nothing written
        abandoned.suggest_int("a", 0, 3)
        raise RuntimeError("the storage went away")
    with pytest.raises(ValueError), params_in_one_transaction(clash):           # checked as Optuna checks each
        clash.suggest_int("b", 0, 3)
        clash.suggest_categorical("a", ["p", "q"])                              # "a" is an int in this study
    assert study.trials[1].params == study.trials[2].params == {}
    events.clear()
    plain.suggest_int("a", 0, 3)                                                # outside a block: Optuna's own write
    assert "".join(events).count("P") == 1 and study.trials[3].params.keys() == {"a"}


def test_parameters_held_in_one_transaction_only_on_tuners_storage():
    from tuner.storage import params_in_one_transaction

    study = optuna.create_study()  # in memory
    trial = study.ask()
    with params_in_one_transaction(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        assert study.trials[0].params == {"x": x}  # written at once, as Optuna does
