"""tuner.study._interrupts: Ctrl-C held off while a trial is admitted; twice interrupts at once."""

import os
import signal
import threading

import pytest

from tuner.study._interrupts import deferred_interrupt


def test_the_first_signal_is_noted_the_second_raises_and_the_handlers_come_back():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a terminal (xdist ignores it)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        _first_noted_second_raises()
    finally:
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
        signal.signal(signal.SIGINT, old)


def _first_noted_second_raises():
    with deferred_interrupt() as seen:
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen.fired
        with pytest.raises(KeyboardInterrupt, match="twice"):
            os.kill(os.getpid(), signal.SIGINT)


def test_an_ignored_signal_stays_ignored():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)    # a background job's SIGINT
    try:
        with deferred_interrupt() as seen:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
        assert not seen.fired
    finally:
        signal.signal(signal.SIGINT, old)


def test_nothing_fired_leaves_the_block_as_it_was():
    with deferred_interrupt() as seen:
        pass
    assert not seen.fired


def test_off_the_main_thread_signals_are_left_alone():
    got = []

    def run():
        with deferred_interrupt() as seen:
            got.append((seen.fired, signal.getsignal(signal.SIGINT)))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == [(False, signal.getsignal(signal.SIGINT))]
