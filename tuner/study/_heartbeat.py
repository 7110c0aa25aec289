"""A running trial's heartbeat: liveness for other coordinators, and the time it ran so far.

Every beat records Optuna's heartbeat (a trial whose beats stop goes stale and becomes FAIL,
tuner.study) and the user attr ``ran_gpu_seconds``: the GPU-seconds the trial will
have run by the next beat. When the coordinator dies, the ledger charges the trial that
(tuner.budget), not its whole reservation: at most one beat interval more than it ran.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import optuna

from tuner.storage import HEARTBEAT_INTERVAL_S, with_retries

__all__ = ["Heartbeat"]


class Heartbeat:
    """Beats for one running trial (a context manager around the launch)."""

    def __init__(self, storage: Any, trial_id: int, interval_s: float = HEARTBEAT_INTERVAL_S, *,
                 gpus: int = 0, reserved_gpu_seconds: float | None = None) -> None:
        self._storage, self._trial_id, self._interval_s = storage, trial_id, interval_s
        self._gpus, self._reserved = gpus, reserved_gpu_seconds
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{trial_id}")

    def _beat(self) -> None:
        self._storage.record_heartbeat(self._trial_id)
        if self._gpus:
            ran = self._gpus * (time.monotonic() - self._t0 + self._interval_s)
            if self._reserved is not None:
                ran = min(ran, self._reserved)
            try:
                self._storage.set_trial_user_attr(self._trial_id, "ran_gpu_seconds", float(ran))
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # found stale by another coordinator meanwhile: its result is recovered (tuner.study)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - a database hiccup (or the trial just ended): the next beat retries
                pass

    def __enter__(self) -> Heartbeat:
        self._t0 = time.monotonic()
        with_retries(self._beat, what="recording a heartbeat")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
