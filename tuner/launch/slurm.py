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
after ``_LEASE_STALE_S`` and Slurm frees the nodes, so no allocation outlives its
coordinator for long. Each coordinator holds its own allocation; nothing is shared between
coordinators except the Optuna study.

A trial: `srun --jobid J --nodes N --ntasks-per-node 1 --whole --kill-on-bad-exit=1
--export=ALL python -m torch.distributed.run --nnodes N --nproc_per_node G --rdzv-backend
c10d --rdzv-endpoint <first node>:<port> --rdzv-id <unique> <trial command>`, with the
trial's environment (tuner.launch.env) given to srun and exported to every rank. Config,
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
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.launch.base import wall_limit_reason, wall_limit_s
from tuner.launch.base import Launcher, TrialRequest, TrialResult
from tuner.launch.env import trial_environment
from tuner.launch.protocol import trial_result, write_trial_config
from tuner.spec import StudySpec

__all__ = ["SlurmLauncher", "SlurmError", "diagnose_slurm_failure", "parse_slurm_duration_s"]

_DEFAULT_PENDING_LIMIT_S = 3600.0
"""How long a trial waits for the allocation before it is an error (no spec field yet)."""
_MAX_ALLOCATION_FAILURES = 3
_LEASE_STALE_S = 180
"""The holder exits when the lease is not renewed for this long (a coordinator died). A few
times the storage's 60 s heartbeat grace: by then the study has failed and re-queued the
dead coordinator's trial, so its GPUs should not keep running it."""
_LEASE_RENEW_S = 30.0
_LEASE_CHECK_S = 15
_CANCEL_GRACE_S = 60.0
"""srun waits up to KillWait (Slurm's default 30 s) for the tasks after a cancel."""
_SLURM_COMMAND_TIMEOUT_S = 60.0
_POLL_MIN_S, _POLL_MAX_S = 0.5, 10.0
# c10d rendezvous ports: below Linux's ephemeral range (32768-60999), spread by job and trial
# so two coordinators whose allocations share a node do not collide.
_RDZV_PORT_BASE, _RDZV_PORT_SPAN = 20000, 10000
_ALIVE_STATES = ("RUNNING",)
_WAITING_STATES = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "")

_HOLDER_SCRIPT = """#!/bin/bash
# Holds a tuner coordinator's allocation; trials run in it as job steps (srun --jobid).
# Ends (freeing the nodes) when the coordinator removes its lease or stops renewing it.
lease="$1"; stale_s="$2"; check_s="$3"
for _ in $(seq 60); do [ -e "$lease" ] && break; sleep 1; done   # NFS may lag a little
if [ ! -e "$lease" ]; then
  echo "tuner: $lease is not visible on $(hostname); set [cluster] shared_dir to a directory every node sees"
  exit 3
fi
last=""; unchanged_s=0
while [ -e "$lease" ]; do
  sleep "$check_s"
  now="$(cat "$lease" 2>/dev/null)"
  if [ "$now" = "$last" ]; then unchanged_s=$((unchanged_s + check_s)); else unchanged_s=0; last="$now"; fi
  if [ "$unchanged_s" -ge "$stale_s" ]; then
    echo "tuner: lease not renewed for ${stale_s}s (coordinator gone?); releasing the allocation"; exit 0
  fi
done
echo "tuner: lease removed; releasing the allocation"
"""


class SlurmError(ValueError):
    """Slurm cannot run trials from here (no sbatch, or no allocation again and again).

    A ValueError so `tuner run` prints its one-line message and exits 2.
    """


# ------------------------------------------------------------------ pure helpers

def parse_slurm_duration_s(text: str) -> float | None:
    """Seconds in a Slurm duration (`[D-]HH:MM:SS`, `MM:SS`, `MM`); None for UNLIMITED and the like."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is None and len(parts) <= 2:  # MM or MM:SS
        seconds = parts[0] * 60 + (parts[1] if len(parts) > 1 else 0)
    else:  # D-HH[:MM[:SS]] or HH:MM:SS
        parts += [0] * (3 - len(parts))
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(seconds + int(days or 0) * 86400)


# What slurmstepd and srun print when Slurm, not the workload, ends a step, e.g.
# "*** STEP 7.0 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG ***"
_CANCELLED_LINE = re.compile(r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z][A-Z ]*[A-Z]))?")
_NODE_FAILURE_LINE = re.compile(r"srun: error: Node failure on (\S+)")
_STEP_REFUSED_LINE = re.compile(r"srun: error: Unable to create step for job \S+: (.*)")
_DUE_TO_STATE = {"PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL", "TIME LIMIT": "TIMEOUT"}


def diagnose_slurm_failure(job_id: str, job_state: str, job_reason: str, log_text: str) -> str | None:
    """`slurm: ...` when Slurm ended the trial (its messages in the step log, or the job state).

    None when the allocation is alive and the log holds no Slurm message: the workload
    itself failed, and the protocol's reading of it stands. Most specific first: the step's
    own "CANCELLED ... DUE TO X" line, srun's node failure, the job's final state.
    """
    detail = f"job {job_id}" + (f", Reason={job_reason}" if job_reason and job_reason != "None" else "")
    state = job_state.split()[0] if job_state.strip() else ""
    cancelled = _CANCELLED_LINE.search(log_text)
    if cancelled and cancelled.group(1):
        due = cancelled.group(1)
        return f"slurm: {_DUE_TO_STATE.get(due, due.replace(' ', '_'))} ({detail})"
    if m := _NODE_FAILURE_LINE.search(log_text):
        return f"slurm: NODE_FAIL ({detail}, node {m.group(1)})"
    if state and state not in _ALIVE_STATES + ("COMPLETING",):
        return f"slurm: {state} ({detail})"
    if cancelled:
        return f"slurm: CANCELLED ({detail}; not by tuner)"
    if m := _STEP_REFUSED_LINE.search(log_text):
        return f"slurm: could not start the step ({detail}): {m.group(1).strip()[:300]}"
    if state == "COMPLETING":
        return f"slurm: the allocation ended (COMPLETING, {detail})"
    return None


def _client_env(base: dict[str, str] | os._Environ) -> dict[str, str]:
    """The coordinator's environment minus an enclosing job's SLURM_* variables.

    Run from inside another job (an salloc shell), SLURM_NTASKS, SLURM_JOB_ID and friends
    would be read by srun/sbatch as options for *our* allocation. SLURM_CONF is kept.
    """
    return {k: v for k, v in base.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def _mentions(args: tuple[str, ...], *options: str) -> bool:
    return any(a == o or a.startswith(o + "=") for a in args for o in options)


def _rdzv_port(job_id: str, trial_number: int) -> int:
    digits = int(re.sub(r"\D", "", job_id) or 0)
    return _RDZV_PORT_BASE + (digits * 7919 + trial_number) % _RDZV_PORT_SPAN


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
                 lease_stale_s: int = _LEASE_STALE_S) -> None:
        super().__init__(spec)
        self.pending_limit_s = float(pending_limit_s or getattr(spec.cluster, "pending_limit_s", None)
                                     or _DEFAULT_PENDING_LIMIT_S)
        self.lease_stale_s = int(lease_stale_s)
        self._allocation: _Allocation | None = None
        self._allocation_failures = 0

    # ---------------------------------------------------------------- public

    def launch(self, request: TrialRequest) -> TrialResult:
        try:
            return self._launch(request)
        except BaseException:  # Ctrl-C, the coordinator stopping, a bug: no job left behind
            self.close()
            raise

    def close(self) -> None:
        """scancel the allocation (and with it any step still running); idempotent."""
        allocation, self._allocation = self._allocation, None
        if allocation is not None:
            allocation.lease.release()  # a job we never learned the id of ends by itself too
            if allocation.job_id:
                _scancel(allocation.job_id)

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
                "--rdzv-endpoint", f"{rdzv_host}:{_rdzv_port(job_id, request.number)}",
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

        env = trial_environment(request.params, _client_env(os.environ),
                                config_path=str(config_path), result_path=str(result_path))
        step_name = f"trial-{request.number:04d}"
        timeout_s = wall_limit_s(request, world_size)  # the budget's cap stops it too
        timed_out = False
        allocation.trials += 1
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            # A session of its own: the terminal's Ctrl-C reaches us, and we cancel via Slurm.
            proc = subprocess.Popen(self.command(request, allocation.job_id, allocation.rdzv_host),
                                    env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._cancel_step(allocation.job_id, step_name)
                _reap(proc, _CANCEL_GRACE_S)
            except BaseException:  # Ctrl-C: the whole allocation goes, then srun with it
                self.close()
                _reap(proc, 10.0)
                raise
        wall_s = time.monotonic() - t0

        result = trial_result(launcher=self.name, world_size=world_size, wall_seconds=wall_s,
                              returncode=proc.returncode, result_path=result_path,
                              log_path=log_path, timed_out=timed_out,
                              timeout_message=wall_limit_reason(request, world_size))
        extra = {**result.extra, "slurm_job_id": allocation.job_id, "slurm_nodes": ",".join(allocation.nodes)}
        if result.status == "ok" or timed_out:
            return replace(result, extra=extra)
        info = _job_info(allocation.job_id)
        deadline = time.monotonic() + 10.0
        while info.get("JobState") == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.5)  # the final state (PREEMPTED, NODE_FAIL, ...) comes once the tasks are gone
            info = _job_info(allocation.job_id)
        reason = diagnose_slurm_failure(allocation.job_id, info.get("JobState", ""), info.get("Reason", ""),
                                        log_path.read_text(errors="replace")[-20000:])
        if reason is None:
            return replace(result, extra=extra)
        if info.get("JobState", "RUNNING") not in _ALIVE_STATES:
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
        listing = _slurm("squeue", "--noheader", "--steps", "--jobs", job_id, "--format", "%i|%j")
        steps = [line.split("|")[0] for line in listing.stdout.split()
                 if line.endswith("|" + step_name)] if listing.returncode == 0 else []
        if steps:
            _scancel(*steps)
        else:  # the step is not listed (yet, or squeue failed): the allocation goes instead
            self.close()

    # ---------------------------------------------------------------- the allocation

    def _ensure_allocation(self, request: TrialRequest) -> tuple[_Allocation | None, str]:
        """The live allocation, or a new one; (None, why) when none could be had."""
        current = self._allocation
        if current is not None:
            info = _job_info(current.job_id)
            state = info.get("JobState", "")
            left_s = _time_left_s(info)
            enough = left_s is None or current.trials == 0 or left_s > request.spec.trial.timeout_s + 60
            if (state in _ALIVE_STATES or not state) and enough:  # unknown: srun will tell
                return current, ""
            self.close()  # lost (preempted, failed, time limit) or about to run out
        return self._acquire(request)

    def _acquire(self, request: TrialRequest) -> tuple[_Allocation | None, str]:
        cluster = request.spec.cluster
        root = Path(cluster.shared_dir) / request.study_name if cluster.shared_dir else request.run_dir.parent
        folder = root / "allocations" / uuid.uuid4().hex[:12]
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "hold.sh"
        script.write_text(_HOLDER_SCRIPT)
        # Renewed 4x per stale period, checked 4x: one missed write never ends an allocation.
        lease = _Lease(folder / "lease", renew_s=min(_LEASE_RENEW_S, self.lease_stale_s / 4))
        resources = ["--nodes", str(cluster.nodes), "--ntasks-per-node", "1"]
        if cluster.gpu == "cpu":
            resources += ["--cpus-per-task", str(cluster.gpus_per_node)]  # one CPU per process
        elif not _mentions(cluster.sbatch_args, "--gres", "--gpus", "--gpus-per-node", "-G"):
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
        submitted = _slurm(*cmd)
        if submitted.returncode != 0:
            self.close()
            lines = [ln for ln in submitted.stderr.strip().splitlines() if ln.strip()]
            return None, f"slurm: sbatch refused the allocation: {lines[-1] if lines else f'exit {submitted.returncode}'}"
        job_id = self._allocation.job_id = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + self.pending_limit_s
        poll_s, reason = _POLL_MIN_S, ""
        while True:
            info = _job_info(job_id)
            state, reason = info.get("JobState", ""), info.get("Reason", reason)
            if state in _ALIVE_STATES:
                self._allocation.nodes = _hostnames(info.get("NodeList", ""))
                self._allocation.rdzv_host = _node_address(self._allocation.nodes[0])
                return self._allocation, ""
            if state not in _WAITING_STATES:
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


# ------------------------------------------------------------------ Slurm commands

def _slurm(*cmd: str) -> subprocess.CompletedProcess:
    """Run a Slurm client command; a missing command is a SlurmError, a hang an exit 124."""
    try:
        return subprocess.run(list(cmd), env=_client_env(os.environ), capture_output=True,
                              text=True, timeout=_SLURM_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"slurm: `{cmd[0]}` not found; run tuner on a node with the Slurm client "
                         "commands (a login node)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(cmd), 124, "", f"{cmd[0]} timed out (slurmctld busy?)")


def _job_info(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (JobState, Reason, NodeList, RunTime, TimeLimit, ...).

    Falls back to sacct once slurmctld has forgotten the job (MinJobAge); {} if neither knows.
    """
    shown = _slurm("scontrol", "show", "--oneliner", "job", job_id)
    if shown.returncode == 0 and "JobState=" in shown.stdout:
        return dict(re.findall(r"(\w[\w/:]*)=(\S*)", shown.stdout))
    acct = _slurm("sacct", "--noheader", "--allocations", "--parsable2", "--jobs", job_id,
                  "--format", "State,Reason,NodeList")
    if acct.returncode == 0 and acct.stdout.strip():
        state, reason, nodes = (acct.stdout.strip().splitlines()[0].split("|") + ["", "", ""])[:3]
        return {"JobState": state.split()[0], "Reason": reason, "NodeList": nodes}
    return {}


def _time_left_s(info: dict[str, str]) -> float | None:
    limit = parse_slurm_duration_s(info.get("TimeLimit", ""))
    run = parse_slurm_duration_s(info.get("RunTime", ""))
    return None if limit is None or run is None else limit - run


def _hostnames(nodelist: str) -> tuple[str, ...]:
    """`node[01-04]` -> ('node01', ..., 'node04'), in Slurm's order (the first hosts c10d)."""
    shown = _slurm("scontrol", "show", "hostnames", nodelist)
    return tuple(shown.stdout.split()) if shown.returncode == 0 and shown.stdout.strip() else (nodelist,)


def _node_address(node: str) -> str:
    """A node's NodeAddr (a resolvable name or IP), or its name when scontrol does not say."""
    shown = _slurm("scontrol", "show", "--oneliner", "node", node)
    m = re.search(r"\bNodeAddr=(\S+)", shown.stdout) if shown.returncode == 0 else None
    return m.group(1) if m else node


def _scancel(*ids: str) -> None:
    """scancel, retried; if Slurm cannot be reached, say which job to cancel by hand."""
    for attempt in range(3):
        done = _slurm("scancel", *ids)
        if done.returncode == 0 or "Invalid job id" in done.stderr or "already completing" in done.stderr:
            return
        time.sleep(1.0 + attempt)
    warnings.warn(f"tuner: could not cancel Slurm job(s) {' '.join(ids)}: {done.stderr.strip()}; "
                  f"run `scancel {' '.join(ids)}` (the holder also exits within {_LEASE_STALE_S} s)",
                  RuntimeWarning, stacklevel=2)


def _reap(proc: subprocess.Popen, grace_s: float) -> None:
    """Wait for srun to leave after a cancel; SIGKILL its group if it does not."""
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
