"""Ctrl-C held off while a coordinator admits a trial, so that an interrupt never strands one.

Admission asks the sampler for a config (seconds of model refitting), screens it and reserves
its budget (tuner.study._admission). A Ctrl-C that lands in the middle leaves a trial RUNNING
with nothing to run it, holding budget until its heartbeat goes stale. Inside
:func:`deferred_interrupt` the first SIGINT (or SIGTERM, which tuner's CLI turns into an
interrupt) is only noted; the coordinator finishes the admission, hands the admitted trial
back (tuner.study: failed as `interrupted`, queued again) and stops. A second signal
interrupts at once: a storage outage's retries may take minutes, and the user asked twice.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Deferred", "deferred_interrupt"]


@dataclass
class Deferred:
    """What :func:`deferred_interrupt` saw: ``fired`` once a signal arrived inside it."""

    fired: bool = False


@contextlib.contextmanager
def deferred_interrupt(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[Deferred]:
    """Note the first of ``signals`` instead of raising; raise KeyboardInterrupt on the second.

    The previous handlers are back on exit. A signal the process ignores stays ignored; off
    the main thread (where Python cannot set a handler) signals are left alone and ``fired``
    stays False.

    Example:
        >>> import os
        >>> with deferred_interrupt() as seen:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        >>> seen.fired
        True
    """
    seen = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def note(signum: int, frame: object) -> None:
        if seen.fired:
            raise KeyboardInterrupt(f"signal {signum}, twice")
        seen.fired = True

    # a signal the process ignores (a background job's SIGINT) stays ignored
    previous = {s: signal.signal(s, note) for s in signals if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield seen
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
