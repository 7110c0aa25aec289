"""tuner.storage: URL resolution, errors, heartbeats, the admission lock, retries.

Contract tests run against SQLite and the real PostgreSQL alike (a fresh database each).
"""

import os
import threading
import time
import warnings

import optuna
import pytest
import sqlalchemy
import sqlalchemy.exc
from optuna.trial import TrialState

from tests.procs import process_context
from tuner.storage import (
    DEFAULT_STORAGE,
    MAX_OVERFLOW,
    POOL_SIZE,
    StorageError,
    admission_lock,
    fail_stale_trials,
    open_storage,
    redact_url,
    resolve_storage_url,
    with_retries,
)

# ------------------------------------------------------------------------ resolution

def test_flag_beats_env_beats_default():
    env = {"TUNER_STORAGE": "postgresql://h/env"}
    assert resolve_storage_url("sqlite:///flag.db", environ=env) == "sqlite:///flag.db"
    assert resolve_storage_url(None, environ=env) == "postgresql://h/env"
    assert resolve_storage_url(None, environ={}) == DEFAULT_STORAGE == "sqlite:///tuner.db"


@pytest.mark.parametrize("raw, shown", [
    ("postgresql+psycopg2://tuner:s3cret@db:5432/tuner", "postgresql+psycopg2://tuner:***@db:5432/tuner"),
    ("postgresql://tuner:p%40ss@db/tuner", "postgresql://tuner:***@db/tuner"),
    ("postgresql+psycopg2://postgres@127.0.0.1/x", "postgresql+psycopg2://postgres@127.0.0.1/x"),
    ("sqlite:///tuner.db", "sqlite:///tuner.db"),
])
def test_redact_url_hides_only_the_password(raw, shown):
    assert redact_url(raw) == shown


# ------------------------------------------------------------------------ bad inputs

def test_not_a_url_or_missing_folder_or_file(tmp_path):
    with pytest.raises(StorageError, match="is not a URL"):
        open_storage("tuner.db")
    with pytest.raises(StorageError, match="does not exist"):
        open_storage(f"sqlite:///{tmp_path}/nope/t.db")
    with pytest.raises(StorageError, match="no such database file"):
        open_storage(f"sqlite:///{tmp_path}/t.db", create_tables=False)
    for empty in ("sqlite:///", "sqlite://"):                  # not a silent in-memory study
        with pytest.raises(StorageError, match="names no database file; e.g. sqlite:///tuner.db"):
            open_storage(empty)
    assert list(tmp_path.iterdir()) == []                      # nothing written


def test_a_postgresql_url_without_a_driver_names_the_one_installed(pg_url):
    bare = sqlalchemy.engine.make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        with pytest.raises(StorageError, match=r"postgresql\+psycopg2://user@host/db"):
            open_storage(bare)
    else:
        pytest.skip("psycopg (3) is installed: SQLAlchemy's default driver opens the URL")


def _server_url(pg_url: str, *, port: int | None = None, db: str | None = None, user: str | None = None) -> str:
    u = sqlalchemy.engine.make_url(pg_url)
    u = u.set(port=port or u.port, database=db or u.database, username=user or u.username,
              password="s3cret" if user else u.password)
    return u.render_as_string(hide_password=False)


@pytest.mark.parametrize("case, needle", [
    ("refused", "Connection refused"),
    ("no_database", 'database "no_such_db_xyz" does not exist'),
    ("no_role", 'role "no_such_role_xyz" does not exist'),
])
@pytest.mark.parametrize("create_tables", [True, False])
def test_unusable_server_is_one_line_within_seconds(pg_url, case, needle, create_tables):
    url = {"refused": _server_url(pg_url, port=1),
           "no_database": _server_url(pg_url, db="no_such_db_xyz"),
           "no_role": _server_url(pg_url, user="no_such_role_xyz")}[case]
    t0 = time.monotonic()
    with pytest.raises(StorageError) as info:
        open_storage(url, create_tables=create_tables)
    assert time.monotonic() - t0 < 60   # at once, not after the 300 s an outage is waited out
    message = str(info.value)
    assert "\n" not in message and needle in message and message.startswith("cannot open storage ")
    assert "s3cret" not in message


def test_read_only_open_of_an_empty_database_says_so(pg_url):
    with pytest.raises(StorageError, match="no Optuna tables here"):
        open_storage(pg_url, create_tables=False)
    engine = sqlalchemy.create_engine(pg_url, poolclass=sqlalchemy.pool.NullPool)
    assert sqlalchemy.inspect(engine).get_table_names() == []   # and created none
    engine.dispose()


# ------------------------------------------------------------------ contract: schema

def test_open_creates_the_schema_then_reads_it_without_creating(storage_url):
    url = storage_url
    storage = open_storage(url)
    optuna.create_study(study_name="s", storage=storage)
    reader = open_storage(url, heartbeat=False, create_tables=False)
    assert [s.study_name for s in reader.get_all_studies()] == ["s"]


def _open_in_process(url, barrier, errors):
    try:
        barrier.wait(timeout=30)
        optuna.create_study(study_name=f"s{os.getpid()}", storage=open_storage(url))
    except Exception as exc:  # noqa: BLE001
        errors.put(repr(exc))


def test_processes_that_start_together_create_the_schema_once(storage_url):
    """Optuna's CREATE TABLEs race on PostgreSQL's catalog; tuner serialises them."""
    url = storage_url
    ctx = process_context()
    barrier, errors = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_open_in_process, args=(url, barrier, errors)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert errors.empty(), errors.get()
    assert all(p.exitcode == 0 for p in procs)
    assert len(optuna.get_all_study_names(url)) == 6


# -------------------------------------------------------------- contract: heartbeats

def _ask(study):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Heartbeat ... used with Study.optimize"
        return study.ask()


def _fail_stale(study, storage):
    # as tuner.study does: under the admission lock (SQLite has no row locks, so two
    # unlocked checkers could both fail, and retry, one trial)
    with warnings.catch_warnings(), admission_lock(storage, study.study_name):
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def test_running_trials_beat_from_their_first_moment_and_go_stale_once(storage_url):
    """A coordinator that dies right after `ask` leaves a trial that still goes stale; an
    enqueued trial is not stale while it waits; two checkers fail a dead trial once."""
    url = storage_url
    failed = []
    # a 4 s grace: `late` must not go stale between its ask and the checkers on a loaded machine
    stores = [open_storage(url, grace_period_s=4, stale_trial_callback=lambda s, t: failed.append(t.number))
              for _ in range(2)]
    study = optuna.create_study(study_name="s", storage=stores[0])
    study.enqueue_trial({"x": 1})
    study.enqueue_trial({"x": 2})
    popped, fresh = _ask(study), _ask(study)                 # a WAITING trial popped, a new one
    assert study.trials[popped.number].state == study.trials[fresh.number].state == TrialState.RUNNING
    time.sleep(6.0)                                           # nobody beats: both are stale (4 s grace)
    late = _ask(study)                                        # waited past the grace; popped now
    studies = [optuna.load_study(study_name="s", storage=s) for s in stores]
    threads = [threading.Thread(target=_fail_stale, args=(s, st)) for s, st in zip(studies, stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(failed) == [popped.number, fresh.number]    # each once, by one of the two
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {popped.number: TrialState.FAIL, fresh.number: TrialState.FAIL, late.number: TrialState.RUNNING}


def test_a_running_trial_without_a_heartbeat_goes_stale_too(storage_url):
    """An ask that committed while the storage went away (its first beat failed, and the ask
    raised before the coordinator held the trial) left a RUNNING trial with no heartbeat row,
    which Optuna never finds stale: a coordinator waited on it forever. The stale check gives
    it a beat, so it goes stale one grace period later."""
    url = storage_url
    storage = open_storage(url, grace_period_s=2)
    study = optuna.create_study(study_name="s", storage=storage)
    plain = optuna.load_study(study_name="s", storage=optuna.storages.RDBStorage(url))
    orphan = _ask(plain)                                      # RUNNING, no heartbeat row (no beats)
    with admission_lock(storage, "s"):
        assert fail_stale_trials(study, {"status": "lost", "message": "m"}) == []   # adopted: a beat now
    time.sleep(3.5)                                           # past the 2 s grace
    with admission_lock(storage, "s"):
        failed = fail_stale_trials(study, {"status": "lost", "message": "m"})
    assert [t.number for t in failed] == [orphan.number]
    assert study.trials[orphan.number].state == TrialState.FAIL
    assert study.trials[orphan.number].user_attrs["status"] == "lost"


# --------------------------------------------------------- contract: admission lock

def _hold_lock(url, name, path, barrier):
    storage = open_storage(url, heartbeat=False)
    barrier.wait(timeout=30)
    for _ in range(3):
        with admission_lock(storage, name):
            with open(path, "a") as fh:
                fh.write(f"in {os.getpid()}\n")
            time.sleep(0.05)
            with open(path, "a") as fh:
                fh.write(f"out {os.getpid()}\n")


def test_admission_lock_serialises_processes(storage_url, tmp_path):
    url = storage_url
    open_storage(url)                                         # the schema, before the race
    ctx = process_context()
    barrier = ctx.Barrier(4)
    log = tmp_path / "lock.log"
    procs = [ctx.Process(target=_hold_lock, args=(url, "study", log, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    events = [line.split() for line in log.read_text().splitlines()]
    assert len(events) == 24
    # never two holders at once: every `in` is followed by the same process's `out`
    for (kind_in, pid_in), (kind_out, pid_out) in zip(events[::2], events[1::2]):
        assert (kind_in, kind_out, pid_in) == ("in", "out", pid_out)


def test_admission_locks_of_two_studies_do_not_block_each_other(pg_url):
    """PostgreSQL keys the lock by study (SQLite has one lock per file: it writes one at a time)."""
    url = pg_url
    storage = open_storage(url, heartbeat=False)
    with admission_lock(storage, "a"):
        done = threading.Event()
        other = open_storage(url, heartbeat=False)

        def take_b():
            with admission_lock(other, "b"):
                done.set()

        threading.Thread(target=take_b).start()
        assert done.wait(timeout=10)


def test_a_connection_lost_under_the_admission_lock_raises_what_retries_know(pg_url):
    """The lock's session ends with its connection (a server restart): the caller sees the lost
    connection, which tuner's retries wait out, not SQLAlchemy's PendingRollbackError from an
    unlock on the dead connection; and the lock is free for the next admission."""
    storage = open_storage(pg_url, heartbeat=False)
    killer = sqlalchemy.create_engine(pg_url, poolclass=sqlalchemy.pool.NullPool)
    with pytest.raises(sqlalchemy.exc.OperationalError):
        with admission_lock(storage, "s") as conn:
            pid = conn.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar()
            with killer.connect() as k:
                k.execute(sqlalchemy.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            conn.execute(sqlalchemy.text("SELECT 1"))
    killer.dispose()
    with admission_lock(storage, "s") as conn:
        assert conn.execute(sqlalchemy.text("SELECT 1")).scalar() == 1


# ------------------------------------------------------------- PostgreSQL specifics

def test_one_idle_connection_per_process_and_a_bounded_peak(pg_url):
    """Many coordinators must fit the server's max_connections (optuna/optuna#1347)."""
    storage = open_storage(pg_url)
    assert storage.engine.pool.size() == POOL_SIZE and storage.engine.pool._max_overflow == MAX_OVERFLOW  # noqa: SLF001
    assert storage.engine.pool._pre_ping  # noqa: SLF001 - dropped connections are replaced (#5600)
    study = optuna.create_study(study_name="s", storage=storage)
    with admission_lock(storage, "s"):
        trial = _ask(study)                                   # lock + session: two at once
    storage.record_heartbeat(trial._trial_id)  # noqa: SLF001
    db = sqlalchemy.engine.make_url(pg_url).database
    admin = sqlalchemy.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", poolclass=sqlalchemy.pool.NullPool)
    with admin.connect() as conn:
        rows = conn.execute(sqlalchemy.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :d AND application_name = 'tuner'"),
            {"d": db}).scalar()
    admin.dispose()
    assert rows == POOL_SIZE                                  # idle: one kept open, the rest closed


def test_admission_lock_survives_a_dropped_lock_session(pg_url):
    """The server kills the lock's session mid-admission (restart, idle timeout): the lock
    went with the session, so releasing it must not fail the admission that already ran."""
    storage = open_storage(pg_url, heartbeat=False)
    admin = sqlalchemy.create_engine(pg_url, poolclass=sqlalchemy.pool.NullPool, isolation_level="AUTOCOMMIT")
    with admission_lock(storage, "s"):
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"))
    admin.dispose()
    with admission_lock(storage, "s"):                        # and the next admission works
        pass


# ------------------------------------------------------------------------- retries

def _op_error(message="server closed the connection unexpectedly"):
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception(message))


def test_retries_a_dropped_connection_then_succeeds():
    calls, log = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise _op_error()
        return "ok"

    assert with_retries(flaky, what="asking", base_delay_s=0.001, log=log.append) == "ok"
    assert len(calls) == 3 and len(log) == 3 and "server closed the connection" in log[0]
    assert "storage back at" in log[2]


def test_retries_what_optuna_wrapped():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            try:
                raise _op_error("the database system is shutting down")
            except sqlalchemy.exc.OperationalError as exc:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc
        return 7

    assert with_retries(flaky, what="telling", base_delay_s=0.001) == 7 and len(calls) == 2


def test_gives_up_with_one_line_after_the_last_try():
    with pytest.raises(StorageError, match=r"^recording trial 3: storage unreachable after 3 tries in 0 s: .*refused$"):
        with_retries(lambda: (_ for _ in ()).throw(_op_error("connection refused")), what="recording trial 3",
                     attempts=3, base_delay_s=0.001)


def test_does_not_retry_what_a_retry_cannot_fix():
    calls = []

    def bad_data():
        calls.append(1)
        try:
            raise sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))
        except sqlalchemy.exc.IntegrityError as exc:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc

    with pytest.raises(optuna.exceptions.StorageInternalError):
        with_retries(bad_data, what="telling", base_delay_s=0.001)
    with pytest.raises(ValueError):
        with_retries(lambda: int("x"), what="parsing", base_delay_s=0.001)
    assert len(calls) == 1


def test_the_last_try_is_made_at_the_outage_limit_not_a_delay_before_it(monkeypatch):
    import tuner.storage._retries as retries

    clock, calls = [0.0], []                          # a fake clock: no wall time is read
    monkeypatch.setattr(retries, "_now", lambda: clock[0])
    monkeypatch.setattr(retries.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    def down():
        calls.append(clock[0])
        raise _op_error("connection refused")

    with pytest.raises(StorageError, match="storage unreachable after"):
        with_retries(down, what="x", base_delay_s=30.0, max_delay_s=30.0, outage_s=50.0)
    assert calls[-1] == pytest.approx(50.0)           # tried again at the limit (jitter left it 20-35 s short)


def test_an_outage_is_waited_out_up_to_its_limit_saying_so_at_every_retry():
    from tuner.storage import OUTAGE_S, retry_notes

    assert OUTAGE_S >= 300                                  # issue 18: outages up to 5 minutes
    calls, notes = [], []

    def down_then_up():
        calls.append(1)
        if len(calls) < 4:
            raise _op_error("connection refused")
        return "recorded"

    with retry_notes(notes.append):                         # the coordinator's progress display
        assert with_retries(down_then_up, what="recording trial 3", base_delay_s=0.001) == "recorded"
    assert len(notes) == 4 and all(n.startswith("recording trial 3: storage unreachable for ") for n in notes[:3])
    assert notes[3].startswith("recording trial 3: storage back at ")     # tuner.storage._retries
    assert "retry 1" in notes[0] and "giving up after 300 s" in notes[0]
    with pytest.raises(StorageError, match=r"^x: storage unreachable after \d+ tries in 0 s"):
        with_retries(lambda: (_ for _ in ()).throw(_op_error("connection refused")), what="x",
                     base_delay_s=0.01, outage_s=0.05)
