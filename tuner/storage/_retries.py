"""Retries through a storage outage, and what the terminal says meanwhile.

Bookkeeping calls (ask, set attrs, tell) are retried with exponential backoff and jitter while
the database connection is lost, for up to ``OUTAGE_S`` (issue 18: outages up to 5 minutes).
The notes say when the storage went away, are thinned out as the outage goes on (each of the
first ``NOTED_RETRIES`` retries, then one every ``NOTE_EVERY_S`` seconds), and one last note
says when the storage is back: a 91 s outage used to print 12 retry lines and never say that.

Example:
    >>> with_retries(lambda: 42, what="answering")
    42
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import optuna
import sqlalchemy.exc

from tuner.errors import StorageUnreachableError

__all__ = ["OUTAGE_S", "NOTED_RETRIES", "NOTE_EVERY_S", "retry_notes", "with_retries"]

T = TypeVar("T")

OUTAGE_S = 300.0
"""How long bookkeeping calls wait out an unreachable storage (issue 18: outages up to 5 minutes)."""

NOTED_RETRIES = 3
"""Retries that each get a note; after them, one note every NOTE_EVERY_S seconds."""

NOTE_EVERY_S = 30.0

_TRANSIENT = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
              sqlalchemy.exc.DisconnectionError)

_retry_logs: list[Callable[[str], None]] = []
_now = time.monotonic   # tests replace it


def _first_line(exc: BaseException) -> str:
    # Optuna wraps driver errors in StorageInternalError("An exception is raised during the
    # commit..."): the driver's own message (its __cause__) is the one that names the problem.
    cause = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ else exc
    orig = getattr(cause, "orig", None) or cause
    text = [line.strip() for line in str(orig).strip().splitlines() if line.strip()]
    return text[0] if text else type(orig).__name__


def _transient_cause(exc: BaseException) -> BaseException | None:
    """The dropped-connection error behind ``exc`` (Optuna wraps it), or None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, _TRANSIENT):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


@contextlib.contextmanager
def retry_notes(log: Callable[[str], None]) -> Iterator[None]:
    """Send every retry's note (what failed, why, when the next try is, when the storage is
    back) to ``log`` meanwhile, for calls that pass no ``log`` of their own: the coordinator's
    progress display says the storage is down while it waits, instead of going silent."""
    _retry_logs.append(log)
    try:
        yield
    finally:
        _retry_logs.remove(log)


def _clock() -> str:
    return time.strftime("%H:%M:%S")


def with_retries(fn: Callable[[], T], *, what: str, attempts: int | None = None, base_delay_s: float = 0.5,
                 max_delay_s: float = 15.0, outage_s: float = OUTAGE_S,
                 log: Callable[[str], None] | None = None) -> T:
    """Call ``fn``; on a dropped database connection retry with exponential backoff and jitter.

    A PostgreSQL restart or an outage of up to ``outage_s`` (5 minutes) must not kill
    coordinators: bookkeeping calls are retried until then (or for ``attempts`` tries, when
    given), with notes (to ``log``, else to the :func:`retry_notes` listener): one for each of
    the first retries, then one every ``NOTE_EVERY_S``, and one when the storage is back. Then
    StorageUnreachableError (a StorageError) is raised. Errors that are not a lost connection
    (bad data, a finished trial) are raised at once.

    Example:
        >>> notes = []
        >>> with_retries(lambda: "told", what="telling trial 3", log=notes.append)
        'told'
        >>> notes
        []
    """
    sinks = [log] if log else _retry_logs[-1:]
    t0 = _now()
    since = ""
    attempt = 0
    last_note = None
    while True:
        try:
            result = fn()
        except (optuna.exceptions.StorageInternalError, *_TRANSIENT) as exc:
            err = _transient_cause(exc)
            if err is None:
                raise
        else:
            if attempt:
                for sink in sinks:
                    sink(f"{what}: storage back at {_clock()} after {_now() - t0:.0f} s unreachable "
                         f"({attempt} {'retry' if attempt == 1 else 'retries'})")
            return result
        attempt += 1
        since = since or _clock()
        elapsed = _now() - t0
        delay = min(max_delay_s, base_delay_s * 2 ** min(attempt - 1, 30)) * (0.5 + random.random() / 2)
        delay = min(delay, max(0.0, outage_s - elapsed))   # the last try at the limit, not a delay before it
        if (attempts is not None and attempt >= attempts) or elapsed >= outage_s or delay <= 0:
            raise StorageUnreachableError(f"{what}: storage unreachable after {attempt} tries in {elapsed:.0f} s: "
                               f"{_first_line(err)}") from err
        if attempt <= NOTED_RETRIES or last_note is None or _now() - last_note >= NOTE_EVERY_S:
            last_note = _now()
            for sink in sinks:
                sink(f"{what}: storage unreachable for {elapsed:.0f} s since {since} ({_first_line(err)}); "
                     f"retry {attempt} in {delay:.1f} s, giving up after {outage_s:.0f} s")
        time.sleep(delay)
