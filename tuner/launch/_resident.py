"""The launcher's side of a resident worker: start it, hand it configs, charge its time.

Shared by the launchers that run a real command (local: a torchrun job; slurm: an srun
step). The first trial starts the worker with the trial protocol's two variables plus
``TUNER_WORKER_DIR``; each next trial is a job file in that folder (tuner.protocol.write_job)
and ends at its ``job_end`` line. A command that does not implement resident mode exits
after its first config: that trial is an ordinary cold one, and the next starts afresh.

Accounting (every GPU-second the worker holds is charged to exactly one trial):

- the worker's first trial is charged from the launch to its ``job_end``: its start-up
  (interpreter, imports, rendezvous, data, model build, recorded as
  ``worker_startup_gpu_seconds``) is charged to it, as a cold trial's would be;
- a warm trial is charged from the previous trial's end to its own: its reconfiguration,
  warm-up and measurement, and the coordinator's bookkeeping in between (the worker holds
  its GPUs meanwhile);
- stopping the worker (a stop job, then a kill after a grace period) is not charged to a trial.

A failed trial (its error line; the worker exits as a cold trial would), a timeout (the
worker is killed) or a change that needs a fresh process (``fresh_levels``) ends the worker;
the next trial starts a new one. Ctrl-C kills it at once. If the coordinator dies by kill -9
the launcher's own guard applies (local: PR_SET_PDEATHSIG; Slurm: the allocation's lease),
and the worker exits by itself after ``TUNER_WORKER_IDLE_S`` without a job.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tuner import knobs, protocol
from tuner.launch._base import TrialRequest, TrialResult, wall_limit_reason, wall_limit_s
from tuner.launch._env import trial_environment
from tuner.launch._protocol import trial_result, write_trial_config

__all__ = ["ResidentRunner", "WorkerHandle", "FRESH_LEVELS", "STOP_GRACE_S"]

FRESH_LEVELS = ("process",)
"""Reconfiguration levels (tuner.knobs.RECONFIGURE) the worker cannot do in place."""
STOP_GRACE_S = 15.0
"""How long a stop job may take (barrier, destroy_process_group, torchrun's exit) before a kill."""
_POLL_S = 0.05
_ids = itertools.count(1)


@dataclass(kw_only=True)
class WorkerHandle:
    """One running worker."""

    id: int
    proc: subprocess.Popen
    worker_dir: Path
    log: IO[bytes]
    log_path: Path
    job: int = 0
    """The last job handed to it."""
    params: dict | None = None
    """The knob values of its last finished job."""
    last_end: float = 0.0
    """time.monotonic() when its last job ended: the next warm trial is charged from there."""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class ResidentRunner:
    """Runs trial requests in a resident worker, starting one when none is up.

    Args:
        name: the launcher's name (TrialResult.launcher).
        world_size: ranks of the worker.
        start: ``start(request, env, log)`` starts the worker's command (a Popen).
        kill: ``kill(proc, grace_s)`` ends the worker and everything it started.
        fresh_levels: changes that need a fresh worker (default :data:`FRESH_LEVELS`).
        base_env: the environment the worker's is built on (the launcher's client environment).
    """

    def __init__(self, *, name: str, world_size: int,
                 start: Callable[[TrialRequest, dict[str, str], IO[bytes]], subprocess.Popen],
                 kill: Callable[[subprocess.Popen, float], None],
                 fresh_levels: tuple[str, ...] = FRESH_LEVELS,
                 base_env: Callable[[], Mapping[str, str]] = lambda: os.environ) -> None:
        self.name, self.world_size, self.base_env = name, world_size, base_env
        self._start, self._kill, self.fresh_levels = start, kill, fresh_levels
        self.worker: WorkerHandle | None = None

    def warm(self, params: dict | None = None) -> bool:
        """Whether the next trial (with ``params``, when known) runs in a worker already up."""
        w = self.worker
        if w is None or not w.alive or not protocol.worker_announced(w.worker_dir):
            return False
        return params is None or w.params is None or knobs.reconfiguration(w.params, params) not in self.fresh_levels

    def launch(self, request: TrialRequest) -> TrialResult:
        request.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = write_trial_config(request, request.run_dir / "config.json")
        result_path = request.run_dir / "result.jsonl"
        result_path.unlink(missing_ok=True)
        if self.worker is not None and not self.warm(request.params):
            self.close()
        warm = self.worker is not None
        if warm:
            w = self.worker
            w.job += 1
            protocol.write_job(w.worker_dir, w.job, config_path=str(config_path), result_path=str(result_path))
            t0 = w.last_end
        else:
            w = self._new_worker(request, config_path, result_path)
            t0 = time.monotonic()
        limit_s = wall_limit_s(request, self.world_size)
        state = "timeout"
        try:
            while time.monotonic() - t0 < limit_s:
                if result_path.exists() and protocol.has_job_end(result_path.read_text(errors="replace"), w.job):
                    state = "done"
                    break
                if not w.alive:
                    state = "exited"
                    break
                time.sleep(_POLL_S)
        except BaseException:  # Ctrl-C or the coordinator being stopped: no orphans
            self._end(grace_s=3.0)
            raise
        now = time.monotonic()
        if state == "done":
            w.last_end, w.params = now, dict(request.params)
        else:
            self._end(grace_s=0.0 if state == "exited" else 10.0)
        result = trial_result(launcher=self.name, world_size=self.world_size, wall_seconds=now - t0,
                              returncode=0 if state == "done" else w.proc.returncode, result_path=result_path,
                              log_path=w.log_path, timed_out=state == "timeout",
                              timeout_message=wall_limit_reason(request, self.world_size))
        extra = {**result.extra, "warm": warm, "worker": w.id, "worker_job": w.job,
                 "worker_log": str(w.log_path)}
        if not warm and result.startup_seconds is not None:
            extra["worker_startup_gpu_seconds"] = self.world_size * result.startup_seconds
        return dataclasses.replace(result, extra=extra)

    def _new_worker(self, request: TrialRequest, config_path: Path, result_path: Path) -> WorkerHandle:
        worker_dir = request.run_dir / "worker"
        worker_dir.mkdir(exist_ok=True)
        for stale in worker_dir.glob("*"):
            stale.unlink()
        env = trial_environment(request.params, self.base_env(), config_path=str(config_path),
                                result_path=str(result_path))
        env[protocol.WORKER_ENV] = str(worker_dir)
        log_path = request.run_dir / "trial.log"
        log = open(log_path, "wb")  # noqa: SIM115 - open for the worker's lifetime, closed in _end
        try:
            proc = self._start(request, env, log)
        except BaseException:
            log.close()
            raise
        self.worker = WorkerHandle(id=next(_ids), proc=proc, worker_dir=worker_dir, log=log, log_path=log_path)
        return self.worker

    def _end(self, *, grace_s: float) -> None:
        w, self.worker = self.worker, None
        if w is None:
            return
        try:
            self._kill(w.proc, grace_s)
        finally:
            w.log.close()

    def close(self) -> None:
        """Stop the worker: a stop job, then a kill if it has not exited within STOP_GRACE_S."""
        w = self.worker
        if w is None:
            return
        if w.alive and protocol.worker_announced(w.worker_dir):
            protocol.write_job(w.worker_dir, w.job + 1, stop=True)
            try:
                w.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self._end(grace_s=3.0)
