"""The one storage factory: URL resolution, RDB storage with heartbeats, admission locks.

Storage precedence: ``--storage`` beats ``TUNER_STORAGE``, which beats ``sqlite:///tuner.db``.
A bad or unreachable storage raises :class:`StorageError` with one line that names it, within
seconds, and writes nothing.

Connections (PostgreSQL, MySQL): one storage per process, one idle connection, at most
``POOL_SIZE + MAX_OVERFLOW`` at once (admission lock + session + heartbeat thread), each
named ``tuner`` in ``pg_stat_activity``. Size the server's ``max_connections`` for about four
per coordinator at peak (docker-compose.yml sets 400).

Example:
    >>> url = resolve_storage_url(None, environ={})
    >>> url
    'sqlite:///tuner.db'
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy
import sqlalchemy.event
import sqlalchemy.exc
import sqlalchemy.pool

from tuner.errors import StorageError, StudyConflictError
from tuner.storage._optuna_internals import HeartbeatRDBStorage
from tuner.storage._retries import _TRANSIENT, OUTAGE_S, _first_line, retry_notes, with_retries

__all__ = [
    "DEFAULT_STORAGE", "StorageError", "resolve_storage_url", "open_storage",
    "admission_lock", "with_retries", "retry_notes", "redact_url", "OUTAGE_S",   # retries: tuner.storage._retries
    "load_existing_study",
]

DEFAULT_STORAGE = "sqlite:///tuner.db"
T = TypeVar("T")

# Coordinators beat every HEARTBEAT_INTERVAL_S seconds while a trial runs; a trial whose
# beat is older than GRACE_PERIOD_S is stale (its coordinator died) and becomes FAIL.
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 60

# Many coordinators must not exhaust the server's max_connections (optuna/optuna#1347): each
# keeps one connection idle; admission briefly needs a second (the advisory lock's session
# beside Optuna's) and the heartbeat thread a third.
POOL_SIZE = 1
MAX_OVERFLOW = 3
CONNECT_TIMEOUT_S = 4  # per address; `localhost` may try ::1 then 127.0.0.1: still < 10 s


def resolve_storage_url(flag: str | None, *, environ: Mapping[str, str] | None = None) -> str:
    """``--storage`` beats ``$TUNER_STORAGE`` beats :data:`DEFAULT_STORAGE`.

    Example:
        >>> resolve_storage_url(None, environ={"TUNER_STORAGE": "postgresql://h/db"})
        'postgresql://h/db'
    """
    environ = os.environ if environ is None else environ
    return flag or environ.get("TUNER_STORAGE") or DEFAULT_STORAGE


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***, for messages.

    Example:
        >>> redact_url("postgresql+psycopg2://tuner:s3cret@db:5432/tuner")
        'postgresql+psycopg2://tuner:***@db:5432/tuner'
    """
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: redact by pattern
        return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _is_server_url(url: str) -> bool:
    return url.startswith(("postgresql", "postgres", "mysql"))


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # Several local processes (coordinators, optuna-dashboard) share one file: wait for
        # the lock instead of failing at once with "database is locked".
        return {"connect_args": {"timeout": 60}}
    kwargs: dict[str, Any] = {
        # Idle connections get dropped (server restart, proxy timeout): test each one on
        # checkout instead of failing the next query (optuna/optuna#5600).
        "pool_size": POOL_SIZE, "max_overflow": MAX_OVERFLOW, "pool_pre_ping": True,
        "pool_recycle": 1800,
    }
    if url.startswith(("postgresql", "postgres")):
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "tuner"}
    elif url.startswith("mysql"):
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    return kwargs


def open_storage(
    url: str,
    *,
    heartbeat: bool = True,
    stale_trial_callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
    create_tables: bool = True,
    grace_period_s: int | None = None,
) -> optuna.storages.RDBStorage:
    """Open (and create the schema of) an Optuna RDB storage, or raise StorageError.

    Args:
        url: a SQLAlchemy URL (``sqlite:///tuner.db``, ``postgresql+psycopg2://u:p@h/db``).
        heartbeat: record trial heartbeats so a dead coordinator's trial can be found stale.
        stale_trial_callback: called by ``optuna.storages.fail_stale_trials`` for each one.
        create_tables: create Optuna's tables if missing (read-only commands pass False).
        grace_period_s: heartbeat age that makes a running trial stale (default GRACE_PERIOD_S).

    Example:
        >>> storage = open_storage("sqlite:///:memory:", heartbeat=False)
        >>> storage.get_all_studies()
        []
    """
    if "://" not in url:
        raise StorageError(f"storage {url!r} is not a URL; e.g. sqlite:///tuner.db or postgresql+psycopg2://user:pass@host/db")
    if url.startswith("sqlite://") and not url[len("sqlite:///"):].strip():
        raise StorageError(f"storage {url!r} names no database file; e.g. sqlite:///tuner.db "
                           "(or sqlite:///:memory: for one that lives only as long as the process)")
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        parent = Path(url[len("sqlite:///"):]).expanduser().resolve().parent
        if not parent.is_dir():
            raise StorageError(f"storage {url}: folder {parent} does not exist")
    if not create_tables and url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        raise StorageError(f"storage {url}: no such database file (run `tuner run` first)")
    hb_kwargs: dict[str, Any] = {}
    if heartbeat:
        hb_kwargs = {"heartbeat_interval": HEARTBEAT_INTERVAL_S, "grace_period": grace_period_s or GRACE_PERIOD_S,
                     "heartbeat_stale_trial_callback": stale_trial_callback}
    deadline = time.monotonic() + RESTARTING_WAIT_S
    while True:
        try:
            with warnings.catch_warnings(), _schema_lock(url, create_tables):
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = HeartbeatRDBStorage(url, engine_kwargs=_engine_kwargs(url),
                                              skip_table_creation=not create_tables, **hb_kwargs)
            _fast_local_commits(storage.engine, url)
            return storage
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, ImportError,
                ValueError, RuntimeError) as exc:
            reason = _first_line(exc)
            if _RESTARTING.search(reason) and time.monotonic() < deadline:
                time.sleep(0.5)  # a server restarting is not a wrong URL: wait for it a little
                continue
            if not create_tables and re.search(r"version_info.? does not exist|no such table: version_info", reason):
                reason = "no Optuna tables here (no study has been run against it; `tuner run` creates them)"
            if url.startswith("postgresql://") and re.search(r"psycopg|DB access module", reason):
                reason += ("; the project installs psycopg2: name its driver in the URL, "
                           "postgresql+psycopg2://user@host/db")
            raise StorageError(f"cannot open storage {redact_url(url)}: {reason}") from None


_NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "lustre", "gpfs", "beegfs", "ceph",
                        "glusterfs", "9p")


def _filesystem_type(path: Path) -> str:
    """The type of the file system holding ``path`` (the longest matching mount in /proc/mounts)."""
    best, kind = "", ""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def _fast_local_commits(engine: sqlalchemy.engine.Engine, url: str) -> None:
    """A SQLite file on a local disk: write-ahead log and ``synchronous=NORMAL``, so a commit
    costs microseconds, not an fsync (a trial's bookkeeping is some 30 commits: about 10 ms each
    with the rollback journal on this project's VM, 0.01 ms with WAL). Readers (optuna-dashboard,
    `tuner status`) no longer block the writer. A power loss can roll back the last commits (the
    database stays consistent); a crashed process loses nothing. SQLite's WAL needs shared memory,
    so a file on a network file system keeps the rollback journal (sqlite.org/wal.html)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return
    path = Path(url[len("sqlite:///"):]).expanduser().resolve()
    if _filesystem_type(path) in _NETWORK_FILESYSTEMS:
        return

    @sqlalchemy.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    engine.dispose()  # connections made while the schema was created reconnect with the pragmas


# What a PostgreSQL server says while it restarts (its own message texts). A refused
# connection is not among them: that is what a wrong host or port says too, and those must
# fail at once.
_RESTARTING = re.compile(r"the database system is (starting up|shutting down|in recovery mode)|"
                         r"server closed the connection unexpectedly|terminating connection due to administrator")
RESTARTING_WAIT_S = 20


_SCHEMA_LOCK_KEY = 0x7475_6E72  # "tunr": one key for schema creation across all studies


@contextlib.contextmanager
def _schema_lock(url: str, create_tables: bool) -> Iterator[None]:
    """PostgreSQL: serialise Optuna's CREATE TABLE across processes that start together
    (concurrent `create_all` races on the catalog: "duplicate key value violates unique
    constraint pg_type_typname_nsp_index"); SQLite: an flock beside the file. On PostgreSQL
    also the first, fast check that the server, role and database exist."""
    if create_tables and url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        # SQLite: "table studies already exists" when two local coordinators start together
        with _file_lock(url):
            yield
        return
    if not create_tables or not url.startswith(("postgresql", "postgres")):
        yield
        return
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool,
                                      connect_args=_engine_kwargs(url)["connect_args"])
    try:
        with _advisory_lock(engine, _SCHEMA_LOCK_KEY):
            yield
    finally:
        engine.dispose()


# ------------------------------------------------------------------------ admission lock

_thread_locks: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def _advisory_lock(engine: sqlalchemy.engine.Engine, key: int) -> Iterator[sqlalchemy.engine.Connection]:
    """A PostgreSQL session advisory lock (scoped to the database) held on its own connection,
    which it yields (AUTOCOMMIT: each statement on it commits itself)."""
    conn = engine.connect()
    try:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # never idle in transaction
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield conn
        finally:
            # a connection lost under the lock (a server restart) ended its session, and the lock
            # with it: nothing to release, and the error that lost it goes on to the caller's
            # retries (unlocking on it raised SQLAlchemy's PendingRollbackError instead, which no
            # retry knows: a coordinator died of a restart under load)
            if not conn.invalidated:
                try:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                except _TRANSIENT:
                    pass  # the session died meanwhile and took its lock with it
    finally:
        _close(conn)


def _close(conn: sqlalchemy.engine.Connection) -> None:
    """Give the lock's connection back. Going back to the pool resets its isolation level on the
    server; a server that went away since the last statement fails that with the driver's own
    error, which SQLAlchemy does not wrap and no retry knows (a coordinator died of a restart
    between the unlock and here): the connection is dropped instead, its session gone anyway."""
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - any failure to reset: the connection is not reused
        try:
            conn.invalidate()
        except Exception:  # noqa: BLE001 - already unusable
            pass


@contextlib.contextmanager
def _file_lock(sqlite_url: str) -> Iterator[None]:
    """An exclusive flock on `<database>.lock` beside a SQLite file (local processes only)."""
    lock_path = Path(sqlite_url[len("sqlite:///"):]).expanduser().resolve().with_suffix(".lock")
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def admission_lock(storage: optuna.storages.BaseStorage, study_name: str) -> Iterator[Any]:
    """Serialise budget admission for one study across every process that shares the storage.

    Read-the-ledger-then-reserve is a race between coordinators; this lock makes it atomic:
    PostgreSQL: a session advisory lock keyed by the study name; MySQL: GET_LOCK; SQLite: an
    flock on a file beside the database; anything else (in-memory): a process-local lock.
    Hold it only around reads and writes of the study (one transaction's worth): every
    coordinator of the study waits while one holds it. On PostgreSQL it yields the lock's own
    connection (AUTOCOMMIT), so reads and writes made on it under the lock
    (tuner.storage.ledger_view, write_trial) need no second connection; elsewhere None.

    Example:
        >>> storage = open_storage("sqlite:///:memory:", heartbeat=False)
        >>> with admission_lock(storage, "quickstart"):
        ...     pass  # read the ledger, reserve
    """
    url = str(getattr(storage, "url", ""))
    key = zlib.crc32(study_name.encode())  # stable across processes and hosts
    if url.startswith(("postgresql", "postgres")):
        with _advisory_lock(storage.engine, key) as conn:
            yield conn
    elif url.startswith("mysql"):
        with storage.engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT GET_LOCK(:k, 600)"), {"k": f"tuner-{key}"})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT RELEASE_LOCK(:k)"), {"k": f"tuner-{key}"})
    elif url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        with _file_lock(url):  # one lock for every study in the file: SQLite writes one at a time
            yield
    else:
        lock = _thread_locks.setdefault(f"{url}:{study_name}", threading.Lock())
        with lock:
            yield


def load_existing_study(storage: str | Any, study_name: str) -> optuna.Study:
    """Load a study for reading from a URL or an open storage.

    Raises:
        StudyConflictError: no study has that name; the message names the (redacted)
            storage and the studies it does hold.
    """
    store = open_storage(storage, heartbeat=False, create_tables=False) if isinstance(storage, str) else storage
    try:
        return optuna.load_study(study_name=study_name, storage=store)
    except KeyError:
        where = redact_url(storage) if isinstance(storage, str) else type(storage).__name__
        names = sorted(s.study_name for s in store.get_all_studies())
        there = f"studies there: {', '.join(names)}" if names else "it holds no study"
        raise StudyConflictError(f"no study named {study_name!r} in {where} ({there})") from None
