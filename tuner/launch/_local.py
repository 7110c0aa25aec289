"""Local launcher: torchrun on this machine, in a process group of its own.

`torchrun --standalone --nproc_per_node G <command>`; stdout and stderr go to the trial's
log file. On timeout or Ctrl-C the whole group (torchrun and every rank, DataLoader workers
included) gets SIGTERM, then SIGKILL after a grace period. GPU-seconds = world size x wall
time measured here, start-up included.

With ``[trial] resident = true`` (the default) one torchrun job stays up across trials
(tuner.launch): the first pays the start-up, the next are handed over as job files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tuner.launch._base import Launcher, TrialRequest, TrialResult, wall_limit_reason, wall_limit_s
from tuner.launch._env import trial_environment
from tuner.launch._protocol import trial_result, write_trial_config
from tuner.launch._resident import ResidentRunner
from tuner.spec import StudySpec

__all__ = ["LocalLauncher", "kill_group"]

_KILL_GRACE_S = 10.0


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the coordinator dies, even by kill -9 (Linux prctl
    PR_SET_PDEATHSIG), so no training job outlives it; torchrun then stops its ranks."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: Ctrl-C and timeouts still clean up
        pass


def kill_group(proc: subprocess.Popen, grace_s: float = _KILL_GRACE_S) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the ranks too, even if torchrun already exited
    except ProcessLookupError:
        pass
    proc.wait()


class LocalLauncher(Launcher):
    name = "local"

    def __init__(self, spec: StudySpec) -> None:
        super().__init__(spec)
        self.resident = ResidentRunner(name=self.name, world_size=spec.cluster.gpus_per_node,
                                       start=self._start, kill=lambda proc, grace_s: kill_group(proc, grace_s))

    def _start(self, request: TrialRequest, env: dict[str, str], log) -> subprocess.Popen:
        return subprocess.Popen(self.command(request), env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)

    def warm(self) -> bool:
        return self.spec.trial.resident and self.resident.warm()

    def close(self) -> None:
        self.resident.close()

    def command(self, request: TrialRequest) -> list[str]:
        cluster = request.spec.cluster
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nnodes", "1", "--nproc_per_node", str(cluster.gpus_per_node),
                *request.spec.trial.command]

    def launch(self, request: TrialRequest) -> TrialResult:
        if request.spec.trial.resident:
            return self.resident.launch(request)
        spec = request.spec
        world_size = spec.cluster.gpus_per_node  # local = one node, whatever the spec says
        request.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = write_trial_config(request, request.run_dir / "config.json")
        result_path = request.run_dir / "result.jsonl"
        result_path.unlink(missing_ok=True)
        log_path = request.run_dir / "trial.log"
        env = trial_environment(request.params, os.environ, config_path=str(config_path),
                                result_path=str(result_path))
        timeout_s = wall_limit_s(request, world_size)
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            proc = self._start(request, env, log)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc)
            except BaseException:  # Ctrl-C or the coordinator being stopped: no orphans
                kill_group(proc, grace_s=3.0)
                raise
            finally:
                # torchrun may exit while a rank still lingers; the group must be empty.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        wall_s = time.monotonic() - t0
        return trial_result(launcher=self.name, world_size=world_size, wall_seconds=wall_s,
                            returncode=proc.returncode, result_path=result_path, log_path=log_path,
                            timed_out=timed_out,
                            timeout_message=wall_limit_reason(request, world_size))
