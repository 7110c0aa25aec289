"""The circuit breaker: stop a study whose trials keep failing with the same error.

Preflight (tuner.study) catches the data, tokenizer and model mistakes it can see; a
mistake it cannot (a broken workload, a missing module on the nodes, a wrong backend) fails
every trial the same way. After ``limit`` consecutive trials end as `error` with the same
message (trial numbers, paths' digits and addresses masked), the study stops, the error is
printed once, and the process exits non-zero. `oom` and `timeout` never trip it: different
configs running out of memory is what a search finds out. Nor does an error that follows a
knob value (every failing trial of the run has ``nccl_algo = Tree``, which NCCL cannot run):
that too is the search's finding; the run then grows until its configs share no value.

Example:
    >>> breaker = CircuitBreaker(limit=2)
    >>> breaker.observe(3, "error", "exit 1: StopIteration (trial-0003)")
    >>> try:
    ...     breaker.observe(4, "error", "exit 1: StopIteration (trial-0004)")
    ... except CircuitBreakerError as exc:
    ...     print(str(exc).split("; ")[0])
    stopped: trials 3, 4 failed with the same error: exit 1: StopIteration (trial-0004)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tuner.errors import CircuitBreakerError

__all__ = ["CircuitBreaker", "DEFAULT_LIMIT", "SETTING"]

DEFAULT_LIMIT = 3
"""Consecutive same-error trials that stop a study (issue 18: "say 3")."""
SETTING = "--max-same-errors"
"""The `tuner run` flag (RunOptions.max_same_errors) that sets the limit; 0 turns it off."""

_DIGITS = re.compile(r"0x[0-9a-f]+|\d+")


def signature(status: str, message: str) -> str:
    """What makes two failures "the same error": the status and the message's first 300
    characters with numbers masked (trial numbers, ports, pids differ between trials)."""
    return f"{status}: {_DIGITS.sub('#', ' '.join(message.split()))[:300]}"


class CircuitBreaker:
    """Counts consecutive `error` trials with one signature; raises at ``limit`` (0: never)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._run: list[int] = []
        self._params: list[dict[str, Any]] = []
        self._signature: str | None = None

    def observe(self, number: int, status: str, message: str, params: Mapping[str, Any] | None = None) -> None:
        """Record one finished trial (``params``: its knob values).

        Raises:
            CircuitBreakerError: the last ``limit`` or more trials failed with the same error
                and their configs have no knob value in common.
        """
        if status != "error":
            self._run, self._params, self._signature = [], [], None
            return
        sig = signature(status, message)
        if sig != self._signature:
            self._run, self._params, self._signature = [], [], sig
        self._run.append(number)
        self._params.append(dict(params or {}))
        shared = set.intersection(*(set((k, repr(v)) for k, v in p.items()) for p in self._params))
        if self.limit and len(self._run) >= self.limit and not shared:
            one_line = " ".join(message.split())[:500] or "(no message)"
            raise CircuitBreakerError(
                f"stopped: trials {', '.join(map(str, self._run))} failed with the same error: {one_line}; "
                f"fix it, or run again with {SETTING} 0 to go on anyway")
