"""An outage's notes: when it began, thinned out while it lasts, and when the storage is back."""

import re

import sqlalchemy.exc

import tuner.storage._retries as retries
from tuner.storage import with_retries


def _down(n_failures):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= n_failures:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
        return "recorded"
    return call


def test_a_long_outage_is_a_few_lines_and_says_when_the_storage_is_back(monkeypatch):
    """Before: a 91 s outage printed 12 retry lines and never said the storage was back."""
    clock = iter(range(0, 10_000, 10))            # each look at the clock: 10 s later
    monkeypatch.setattr(retries, "_now", lambda: float(next(clock)))
    notes = []
    assert with_retries(_down(12), what="telling trial 7", base_delay_s=0.0001, log=notes.append) == "recorded"
    unreachable = [n for n in notes if "storage unreachable for" in n]
    assert len(unreachable) < 12 and len(unreachable) >= retries.NOTED_RETRIES
    assert re.match(r"telling trial 7: storage unreachable for \d+ s since \d\d:\d\d:\d\d \(connection refused\); "
                    r"retry 1 in", notes[0]), notes[0]
    assert re.match(r"telling trial 7: storage back at \d\d:\d\d:\d\d after \d+ s unreachable \(12 retries\)$",
                    notes[-1]), notes[-1]


def test_no_outage_no_note():
    notes = []
    assert with_retries(_down(0), what="x", log=notes.append) == "recorded" and notes == []
