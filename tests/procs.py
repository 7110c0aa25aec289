"""Child processes for tests that run several coordinators (or storage clients) side by side.

``fork`` from the pytest process copies whatever its threads held at that instant (pytest-xdist's
worker runs its own threads; a logging or import lock taken by one of them stays taken in the
child, which then hangs). A forkserver forks from a fresh single-threaded process that has
imported tuner and Optuna once, so each child starts in milliseconds and holds no stray lock.
The target must be a module-level function (it is pickled by name).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.context import BaseContext

__all__ = ["process_context"]

_PRELOAD = ["optuna", "sqlalchemy", "psycopg2", "tuner", "tuner.study", "tuner.storage"]


def process_context() -> BaseContext:
    """A multiprocessing context whose processes start from a preloaded forkserver."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)  # read when the server starts (the first Process.start)
    return ctx
