"""Slurm launcher: every trial is a job step (`srun`) inside one allocation the coordinator holds.

Design: allocation + steps, not one `sbatch` per trial.
    * Throughput trials must be comparable: the same nodes (and network placement) for every
      trial of a coordinator, instead of whatever nodes each new job happens to land on.
    * The queue is paid once: a 4-node GPU job can pend for an hour; per-trial jobs would
      pend before every 5-minute trial. A step starts in well under a second.
    * Slurm remains the one that runs and kills processes on every node (no ssh, no
      home-made agents), and `scancel` of one job id cleans up everything.

The allocation is an `sbatch --no-requeue` of a small holder script (`sleep`-like) rather
than `salloc --no-shell`: sbatch returns the job id at once, so a pending request can be
bounded and cancelled, and the script can watch a lease (below). It is acquired lazily on
the first trial and released (`scancel`) in close(), on Ctrl-C and on any error
inside launch(). The holder also watches a lease file that a thread of this process renews:
if the coordinator dies without cleaning up (SIGKILL, lost login node), the holder exits
after ``LEASE_STALE_S`` and Slurm frees the nodes, so no allocation outlives its
coordinator for long. Each coordinator holds its own allocation; nothing is shared between
coordinators except the Optuna study.

A trial: `srun --jobid J --nodes N --ntasks-per-node 1 --whole --kill-on-bad-exit=1
--export=ALL python -m torch.distributed.run --nnodes N --nproc_per_node G --rdzv-backend
c10d --rdzv-endpoint <first node>:<port> --rdzv-id <unique> <trial command>`, with the
trial's environment (tuner.launch) given to srun and exported to every rank. Config,
result file and log live in a directory every node sees: `[cluster] shared_dir`/<study>/
trial-NNNN, or the trial's run dir when shared_dir is unset (then the runs dir must be on
the shared filesystem).

GPU-seconds = allocated GPUs (nodes x gpus_per_node) x wall time of the step, start-up
included. Time spent pending for the allocation and idle between trials is not charged to
the study's budget (it is the cluster's cost, visible in `sacct`).

Slurm's own failures become `error` trials with a `slurm: ...` message, never crashes:
`slurm: NODE_FAIL (job 123, Reason=NodeDown)`, `slurm: PREEMPTED (...)`, `slurm: allocation
pending > 3600 s (Reason=Resources)`. A lost allocation is replaced on the next trial. Only
when no allocation could be had ``_MAX_ALLOCATION_FAILURES`` times in a row does launch()
raise :class:`SlurmError`, so a full cluster or a wrong partition stops the run instead of
spinning.

With ``[trial] resident`` (the default) the step stays up across trials as a resident
worker (tuner.launch): the next config is a job file in the trial folder on the
shared filesystem; a timeout, Ctrl-C or close() cancels the step (close() first asks the
worker to stop), and the allocation's lease covers a coordinator killed by kill -9.

The Slurm client commands (scontrol, sacct, scancel), the holder script's text and the pure
parsers of Slurm's output live in ``_slurm_commands``; this module keeps the state (the
allocation, its lease, the running step).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.launch._base import Launcher, TrialRequest, TrialResult, wall_limit_reason, wall_limit_s
from tuner.launch._env import trial_environment
from tuner.launch._protocol import trial_result, write_trial_config
from tuner.launch._resident import ResidentRunner
from tuner.launch._slurm_commands import (
    ALIVE_STATES,
    HOLDER_SCRIPT,
    LEASE_STALE_S,
    WAITING_STATES,
    SlurmError,
    client_env,
    diagnose_slurm_failure,
    hostnames,
    job_info,
    mentions_option,
    node_address,
    rdzv_port,
    reap,
    run_slurm,
    scancel,
    time_left_s,
)
from tuner.spec import StudySpec

__all__ = ["SlurmLauncher"]

_DEFAULT_PENDING_LIMIT_S = 3600.0
"""How long a trial waits for the allocation before it is an error (no spec field yet)."""
_MAX_ALLOCATION_FAILURES, _LEASE_RENEW_S, _LEASE_CHECK_S = 3, 30.0, 15
_CANCEL_GRACE_S = 60.0
"""srun waits up to KillWait (Slurm's default 30 s) for the tasks after a cancel."""
_POLL_MIN_S, _POLL_MAX_S = 0.5, 10.0


# ------------------------------------------------------------------ the allocation

class _Lease:
    """Renews the holder's lease file from a daemon thread while this process lives."""

    def __init__(self, path: Path, renew_s: float) -> None:
        self.path, self.renew_s = path, renew_s
        self._stop = threading.Event()
        self._count = 0
        self.renew()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"slurm-lease-{path.parent.name}")
        self._thread.start()

    def renew(self) -> None:
        self._count += 1
        try:
            self.path.write_text(f"{os.getpid()} {self._count}\n")
        except OSError:  # a filesystem hiccup: the next renewal retries, staleness is minutes away
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.renew_s):
            self.renew()

    def release(self) -> None:
        self._stop.set()
        self.path.unlink(missing_ok=True)  # the holder sees it gone and exits too


@dataclass(kw_only=True)
class _Allocation:
    job_id: str
    folder: Path
    lease: _Lease
    nodes: tuple[str, ...] = ()
    rdzv_host: str = ""
    """The first node's NodeAddr: what Slurm itself uses to reach it, so it resolves."""
    trials: int = 0
    """Trials run in it so far."""


# ------------------------------------------------------------------ the launcher

class SlurmLauncher(Launcher):
    """Runs each trial as a job step of an allocation this coordinator holds (see module doc).

    Args:
        spec: the study spec; `[cluster]` gives nodes, gpus_per_node, partition, account,
            time_limit, sbatch_args, srun_args and shared_dir.
        pending_limit_s: how long to wait for the allocation before the trial is an error
            (default: `[cluster] pending_limit_s` if the spec has it, else 3600 s).
        lease_stale_s: the allocation ends by itself when this process has not renewed its
            lease for this long (it died without close()).

    Example:
        >>> launcher = SlurmLauncher(load_spec("studies/llama7b-h100x32.toml"))  # doctest: +SKIP
        >>> result = launcher.launch(request)   # first call: sbatch, wait, then srun  # doctest: +SKIP
        >>> launcher.close()                    # scancel the allocation               # doctest: +SKIP
    """

    name = "slurm"

    def __init__(self, spec: StudySpec, *, pending_limit_s: float | None = None,
                 lease_stale_s: int = LEASE_STALE_S) -> None:
        super().__init__(spec)
        self.pending_limit_s = float(pending_limit_s or getattr(spec.cluster, "pending_limit_s", None)
                                     or _DEFAULT_PENDING_LIMIT_S)
        self.lease_stale_s = int(lease_stale_s)
        self._allocation: _Allocation | None = None
        self._allocation_failures = 0
        self._resident: ResidentRunner | None = None  # warm trials: one srun step of the allocation

    # ---------------------------------------------------------------- public

    def launch(self, request: TrialRequest) -> TrialResult:
        try:
            return self._launch(request)
        except BaseException:  # Ctrl-C, the coordinator stopping, a bug: no job left behind
            self.close()
            raise

    def warm(self) -> bool:
        return self._resident is not None and self._resident.warm()

    def close(self) -> None:
        """scancel the allocation (and with it any step still running); idempotent."""
        resident, self._resident = self._resident, None
        if resident is not None:
            resident.close()  # a stop job first: the worker leaves its step cleanly
        allocation, self._allocation = self._allocation, None
        if allocation is not None:
            allocation.lease.release()  # a job we never learned the id of ends by itself too
            if allocation.job_id:
                scancel(allocation.job_id)

    def command(self, request: TrialRequest, job_id: str, rdzv_host: str) -> list[str]:
        """The srun command line of one trial in allocation ``job_id``; ``rdzv_host`` is the
        address of its first node, where torchrun's c10d rendezvous store listens."""
        cluster = request.spec.cluster
        rdzv_id = re.sub(r"[^A-Za-z0-9_-]", "-", f"tuner-{request.study_name}-{request.number}-{job_id}")
        return ["srun", "--jobid", job_id, "--job-name", f"trial-{request.number:04d}",
                "--nodes", str(cluster.nodes), "--ntasks", str(cluster.nodes),
                "--ntasks-per-node", "1",
                "--whole",                 # the step gets every CPU and GPU of the allocation
                "--kill-on-bad-exit=1",    # one node's torchrun failing stops the others
                "--export=ALL",            # srun's environment (the trial's) to every rank
                *cluster.srun_args,
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(cluster.nodes), "--nproc_per_node", str(cluster.gpus_per_node),
                "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{rdzv_host}:{rdzv_port(job_id, request.number)}",
                "--rdzv-id", rdzv_id, "--max-restarts", "0",
                *request.spec.trial.command]

    # ---------------------------------------------------------------- one trial

    def _launch(self, request: TrialRequest) -> TrialResult:
        spec = request.spec
        world_size = spec.cluster.world_size
        trial_dir = self._trial_dir(request)
        trial_dir.mkdir(parents=True, exist_ok=True)
        config_path = write_trial_config(request, trial_dir / "config.json")
        result_path = trial_dir / "result.jsonl"
        result_path.unlink(missing_ok=True)
        log_path = trial_dir / "trial.log"

        t_request = time.monotonic()
        allocation, failure = self._ensure_allocation(request)
        if allocation is None:
            self._allocation_failures += 1
            if self._allocation_failures >= _MAX_ALLOCATION_FAILURES:
                raise SlurmError(f"{failure}; no allocation {self._allocation_failures} times in a row, stopping")
            log_path.write_text(failure + "\n")
            return TrialResult(status="error", launcher=self.name, world_size=world_size,
                               gpu_seconds=0.0, wall_seconds=time.monotonic() - t_request,
                               message=failure, log_path=str(log_path),
                               extra={"slurm_failure": True})
        self._allocation_failures = 0

        if spec.trial.resident:
            result = self._resident_runner(allocation).launch(replace(request, run_dir=trial_dir))
            return self._checked(result, allocation, log_path=Path(result.log_path or log_path),
                                 timed_out=result.status == "timeout")
        env = trial_environment(request.params, client_env(os.environ),
                                config_path=str(config_path), result_path=str(result_path))
        step_name = f"trial-{request.number:04d}"
        timeout_s = wall_limit_s(request, world_size)  # the budget's cap stops it too
        timed_out = False
        allocation.trials += 1
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(self.command(request, allocation.job_id, allocation.rdzv_host),
                                    env=env, stdout=log, stderr=subprocess.STDOUT,  # a session of its own: the
                                    stdin=subprocess.DEVNULL, start_new_session=True)  # terminal's Ctrl-C reaches us
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._cancel_step(allocation.job_id, step_name)
                reap(proc, _CANCEL_GRACE_S)
            except BaseException:  # Ctrl-C: the whole allocation goes, then srun with it
                self.close()
                reap(proc, 10.0)
                raise
        wall_s = time.monotonic() - t0

        result = trial_result(launcher=self.name, world_size=world_size, wall_seconds=wall_s,
                              returncode=proc.returncode, result_path=result_path,
                              log_path=log_path, timed_out=timed_out,
                              timeout_message=wall_limit_reason(request, world_size))
        return self._checked(result, allocation, log_path=log_path, timed_out=timed_out)

    def _resident_runner(self, allocation: _Allocation) -> ResidentRunner:
        """The allocation's resident worker: an srun step (named after its first trial) that
        runs trial after trial; a kill cancels that step, and the allocation stays."""
        if self._resident is None:
            def start(request: TrialRequest, env: dict[str, str], log) -> subprocess.Popen:
                allocation.trials += 1
                cmd = self.command(request, allocation.job_id, allocation.rdzv_host)
                name = f"trial-{request.number:04d}"  # the worker's step is named after its first trial
                proc = subprocess.Popen(cmd, env=env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                proc.step_name = name  # type: ignore[attr-defined]
                return proc

            def kill(proc: subprocess.Popen, grace_s: float) -> None:
                if proc.poll() is None and self._allocation is not None:
                    self._cancel_step(allocation.job_id, proc.step_name)  # type: ignore[attr-defined]
                reap(proc, max(grace_s, _CANCEL_GRACE_S))

            self._resident = ResidentRunner(name=self.name, world_size=self.spec.cluster.world_size,
                                            start=start, kill=kill, base_env=lambda: client_env(os.environ))
        return self._resident

    def _checked(self, result: TrialResult, allocation: _Allocation, *, log_path: Path,
                 timed_out: bool) -> TrialResult:
        """A finished step's result with the allocation's ids, or a Slurm failure (node lost,
        preemption) marked as not the config's fault."""
        extra = {**result.extra, "slurm_job_id": allocation.job_id, "slurm_nodes": ",".join(allocation.nodes)}
        if result.status == "ok" or timed_out:
            return replace(result, extra=extra)
        info = job_info(allocation.job_id)
        deadline = time.monotonic() + 10.0
        while info.get("JobState") == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.5)  # the final state (PREEMPTED, NODE_FAIL, ...) comes once the tasks are gone
            info = job_info(allocation.job_id)
        reason = diagnose_slurm_failure(allocation.job_id, info.get("JobState", ""), info.get("Reason", ""),
                                        log_path.read_text(errors="replace")[-20000:])
        if reason is None:
            return replace(result, extra=extra)
        if info.get("JobState", "RUNNING") not in ALIVE_STATES:
            reason += _holder_note(allocation)
            self.close()  # gone or going: the next trial gets a fresh allocation
        # Marks failures that say nothing about the config (for the coordinator to tell apart).
        extra["slurm_failure"] = True
        return replace(result, status="error", message=reason, extra=extra)

    def _trial_dir(self, request: TrialRequest) -> Path:
        shared = request.spec.cluster.shared_dir
        return Path(shared) / request.study_name / request.run_dir.name if shared else request.run_dir

    def _cancel_step(self, job_id: str, step_name: str) -> None:
        """scancel this trial's step (by its name), keeping the allocation for the next trial."""
        def listed() -> list[str]:  # the step's ids in squeue ([] when squeue fails)
            out = run_slurm("squeue", "--noheader", "--steps", "--jobs", job_id, "--format", "%i|%j")
            return [ln.split("|")[0] for ln in out.stdout.split() if ln.endswith("|" + step_name)] if out.returncode == 0 else []
        if not (steps := listed()):  # not listed (yet, or squeue failed): the allocation goes instead
            return self.close()
        scancel(*steps)  # then wait: a cancelled step holds its CPUs until slurmd has torn it down
        deadline = time.monotonic() + _CANCEL_GRACE_S
        while listed() and time.monotonic() < deadline:
            time.sleep(0.5)

    # ---------------------------------------------------------------- the allocation

    def _ensure_allocation(self, request: TrialRequest) -> tuple[_Allocation | None, str]:
        """The live allocation, or a new one; (None, why) when none could be had."""
        current = self._allocation
        if current is not None:
            info = job_info(current.job_id)
            state = info.get("JobState", "")
            left_s = time_left_s(info)
            enough = left_s is None or current.trials == 0 or left_s > request.spec.trial.timeout_s + 60
            if (state in ALIVE_STATES or not state) and enough:  # unknown: srun will tell
                return current, ""
            self.close()  # lost (preempted, failed, time limit) or about to run out
        return self._acquire(request)

    def _acquire(self, request: TrialRequest) -> tuple[_Allocation | None, str]:
        cluster = request.spec.cluster
        root = Path(cluster.shared_dir) / request.study_name if cluster.shared_dir else request.run_dir.parent
        folder = root / "allocations" / uuid.uuid4().hex[:12]
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "hold.sh"
        script.write_text(HOLDER_SCRIPT)
        # Renewed 4x per stale period, checked 4x: one missed write never ends an allocation.
        lease = _Lease(folder / "lease", renew_s=min(_LEASE_RENEW_S, self.lease_stale_s / 4))
        resources = ["--nodes", str(cluster.nodes), "--ntasks-per-node", "1"]
        if cluster.gpu == "cpu":
            resources += ["--cpus-per-task", str(cluster.gpus_per_node)]  # one CPU per process
        elif not mentions_option(cluster.sbatch_args, "--gres", "--gpus", "--gpus-per-node", "-G"):
            resources += ["--gpus-per-node", str(cluster.gpus_per_node)]
        for option, value in (("--partition", cluster.partition), ("--account", cluster.account),
                              ("--time", cluster.time_limit)):
            if value:
                resources += [option, value]
        cmd = ["sbatch", "--parsable", "--no-requeue", "--job-name", f"tuner-{request.study_name}",
               "--output", str(folder / "slurm-%j.out"), *resources, *cluster.sbatch_args,
               str(script), str(lease.path), str(self.lease_stale_s),
               str(max(1, min(_LEASE_CHECK_S, self.lease_stale_s // 4)))]
        # Held from here on, so that Ctrl-C during sbatch or while pending releases it too.
        self._allocation = _Allocation(job_id="", folder=folder, lease=lease)
        submitted = run_slurm(*cmd)
        if submitted.returncode != 0:
            self.close()
            lines = [ln for ln in submitted.stderr.strip().splitlines() if ln.strip()]
            return None, f"slurm: sbatch refused the allocation: {lines[-1] if lines else f'exit {submitted.returncode}'}"
        job_id = self._allocation.job_id = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + self.pending_limit_s
        poll_s, reason = _POLL_MIN_S, ""
        while True:
            info = job_info(job_id)
            state, reason = info.get("JobState", ""), info.get("Reason", reason)
            if state in ALIVE_STATES:
                self._allocation.nodes = hostnames(info.get("NodeList", ""))
                self._allocation.rdzv_host = node_address(self._allocation.nodes[0])
                return self._allocation, ""
            if state not in WAITING_STATES:
                self.close()
                return None, f"slurm: {state} before the allocation started (job {job_id}, Reason={reason})"
            if time.monotonic() > deadline:
                self.close()
                return None, f"slurm: allocation pending > {self.pending_limit_s:g} s (job {job_id}, Reason={reason})"
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, _POLL_MAX_S)


def _holder_note(allocation: _Allocation) -> str:
    """The holder script's own last word (e.g. the lease was not visible), if it said one."""
    out = allocation.folder / f"slurm-{allocation.job_id}.out"
    try:
        lines = [ln for ln in out.read_text(errors="replace").splitlines() if ln.startswith("tuner:")]
    except OSError:
        return ""
    return f"; holder: {lines[-1][len('tuner:'):].strip()}" if lines else ""
