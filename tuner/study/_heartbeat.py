"""A running trial's heartbeat: liveness for other coordinators, and the time it ran so far.

Every beat records Optuna's heartbeat (a trial whose beats stop goes stale and becomes FAIL,
tuner.study) and the user attr ``ran_gpu_seconds``: the GPU-seconds the trial will
have run by the next beat. When the coordinator dies, the ledger charges the trial that
(tuner.budget), not its whole reservation: at most one beat interval more than it ran.

A beat that fails is counted (``failures``, reported on the trial as ``heartbeat_failures``)
and said (``note``). When no beat has landed for half the grace period (the storage is away
or refuses connections), or another coordinator already failed the trial as stale (this
process was frozen past the grace period), the heartbeat stops the trial: it raises
:class:`HeartbeatLost` in the thread that launched it, whose launcher then kills the job
(tuner.launch: a launch stops on any exception). A peer would otherwise count the trial
dead while it runs on, charge it, retry it, and the config would be measured twice.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna

from tuner.storage import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, with_retries

__all__ = ["Heartbeat", "HeartbeatLost"]


class HeartbeatLost(BaseException):  # noqa: N818 - like KeyboardInterrupt: it stops the launch
    """Raised in the launching thread when its trial must stop: ``str()`` says why;
    ``failed_elsewhere`` is True when another coordinator already failed it as stale."""

    def __init__(self, reason: str = "", failed_elsewhere: bool = False) -> None:
        super().__init__(reason)
        self.failed_elsewhere = failed_elsewhere


def _first_line(exc: BaseException) -> str:
    text = [ln.strip() for ln in str(getattr(exc, "orig", None) or exc).splitlines() if ln.strip()]
    return text[0] if text else type(exc).__name__


class Heartbeat:
    """Beats for one running trial (a context manager around the launch).

    Args:
        storage: the RDB storage (tuner.storage.rdb_storage).
        trial_id: the storage's id of the trial.
        interval_s: seconds between beats.
        gpus: GPUs the trial holds (its ``ran_gpu_seconds``); 0: not recorded.
        reserved_gpu_seconds: the trial's cap; ``ran_gpu_seconds`` never exceeds it.
        grace_period_s: the heartbeat age at which peers count the trial dead; with no beat
            for half of it, the trial is stopped (None: never stopped, only counted).
        note: called with a line on each failed beat and when the trial is stopped.
    """

    def __init__(self, storage: Any, trial_id: int, interval_s: float = HEARTBEAT_INTERVAL_S, *,
                 gpus: int = 0, reserved_gpu_seconds: float | None = None,
                 grace_period_s: float | None = GRACE_PERIOD_S,
                 note: Callable[[str], None] | None = None) -> None:
        self._storage, self._trial_id, self._interval_s = storage, trial_id, interval_s
        self._gpus, self._reserved = gpus, reserved_gpu_seconds
        self._deadline_s = None if grace_period_s is None else grace_period_s / 2
        self._note = note or (lambda line: None)
        self._t0 = self._last_ok = time.monotonic()
        self._stop = threading.Event()
        self._armed = threading.Lock()  # held while the launching thread may be interrupted
        self._target: int | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{trial_id}")
        self.failures = 0
        """Beats that failed (storage errors), over the trial's life."""
        self.lost: HeartbeatLost | None = None
        """Set when the heartbeat stopped the trial."""
        self.started = False
        """The first beat landed and the launch went ahead (False: the trial never launched)."""

    def _beat(self) -> None:
        if not self._gpus:
            self._storage.record_heartbeat(self._trial_id)
            return
        ran = self._gpus * (time.monotonic() - self._t0 + self._interval_s)
        if self._reserved is not None:
            ran = min(ran, self._reserved)
        if hasattr(self._storage, "record"):  # tuner's storage: the beat and the attr in one transaction
            self._storage.record(self._trial_id, user_attrs={"ran_gpu_seconds": float(ran)}, heartbeat=True)
        else:
            self._storage.record_heartbeat(self._trial_id)
            self._storage.set_trial_user_attr(self._trial_id, "ran_gpu_seconds", float(ran))

    def _run(self) -> None:
        next_beat = time.monotonic() + self._interval_s
        # wake often enough to stop the trial on time even when a beat is overdue
        tick = min(self._interval_s, 1.0)
        while not self._stop.wait(max(0.0, min(tick, next_beat - time.monotonic()))):
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + self._interval_s
                try:
                    self._beat()
                    self._last_ok = time.monotonic()
                except optuna.exceptions.UpdateFinishedTrialError:
                    self._lose(HeartbeatLost("another coordinator failed it as stale (this one was frozen or cut "
                                             "off past the grace period)", failed_elsewhere=True))
                    return
                except Exception as exc:  # noqa: BLE001 - counted and said; the deadline below acts on it
                    self.failures += 1
                    self._note(f"heartbeat of trial id {self._trial_id} failed ({self.failures} so far): "
                               f"{_first_line(exc)}")
            silent = time.monotonic() - self._last_ok
            if self._deadline_s is not None and silent > self._deadline_s:
                self._lose(HeartbeatLost(f"no heartbeat recorded for {silent:.0f} s ({self.failures} failed beats; "
                                         f"peers count a trial dead after {2 * self._deadline_s:.0f} s)"))
                return

    def _lose(self, lost: HeartbeatLost) -> None:
        """Stop the trial: raise ``lost`` in the launching thread, unless the launch is over."""
        with self._armed:
            if self._target is None:
                return
            self.lost = lost
            self._note(f"stopping trial id {self._trial_id}: {lost}")
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._target), ctypes.py_object(HeartbeatLost))

    def __enter__(self) -> Heartbeat:
        self._t0 = time.monotonic()
        try:
            with_retries(self._beat, what="recording a heartbeat")
        except optuna.exceptions.UpdateFinishedTrialError:  # the storage was away past the grace period
            self.lost = HeartbeatLost("another coordinator failed it as stale before it launched (the storage "
                                      "was unreachable past the grace period); its retry runs it",
                                      failed_elsewhere=True)
            raise self.lost from None
        self.started = True
        self._last_ok = time.monotonic()
        self._target = threading.get_ident()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._armed:
            self._target = None  # no interrupt after this
        self._stop.set()
        self._thread.join()
