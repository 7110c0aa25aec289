"""Slurm's client commands as tuner calls them, and pure readings of what they print.

The launcher (tuner.launch) holds the state: the allocation, its lease, the trial's
srun. This module holds none: a Slurm command run with a timeout and a clean environment
(:func:`run_slurm`), what `scontrol`/`sacct` say about a job and its nodes, `scancel`, the
holder script's text, and the parsing of Slurm's durations and failure messages. The parsers
are pure, so they are tested without a cluster.

Formats are Slurm's own: durations as in sbatch(1) `--time` and scontrol(1) `TimeLimit`/
`RunTime`; job states as in squeue(1) "JOB STATE CODES"; the step-cancel lines as printed by
slurmstepd and srun (quoted beside the patterns below).

Every failure to talk to Slurm ends in :class:`SlurmError` (no client commands here) or in an
exit status the launcher turns into an `error` trial (a hang: 124, like timeout(1)).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import warnings

from tuner.errors import LauncherError

__all__ = ["SlurmError", "ALIVE_STATES", "WAITING_STATES", "LEASE_STALE_S", "HOLDER_SCRIPT",
           "parse_slurm_duration_s", "diagnose_slurm_failure", "client_env", "mentions_option",
           "rdzv_port", "run_slurm", "job_info", "time_left_s", "hostnames", "node_address",
           "scancel", "reap"]

ALIVE_STATES = ("RUNNING",)
"""Job states in which the allocation can run steps."""
WAITING_STATES = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED", "")
"""Job states from which the allocation may still start ("": scontrol does not say yet)."""
LEASE_STALE_S = 180
"""The holder exits when the lease is not renewed for this long (a coordinator died). A few
times the storage's 60 s heartbeat grace: by then the study has failed and re-queued the
dead coordinator's trial, so its GPUs should not keep running it."""
_SLURM_COMMAND_TIMEOUT_S = 60.0
# c10d rendezvous ports: below Linux's ephemeral range (32768-60999), spread by job and trial
# so two coordinators whose allocations share a node do not collide.
_RDZV_PORT_BASE, _RDZV_PORT_SPAN = 20000, 10000

HOLDER_SCRIPT = """#!/bin/bash
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
"""The allocation's batch script (`sbatch ... hold.sh LEASE STALE_S CHECK_S`): it only waits.
Lines starting `tuner:` in its output are its last word, which the launcher quotes."""


class SlurmError(LauncherError):
    """Slurm cannot run trials from here (no sbatch, or no allocation again and again).

    A :class:`~tuner.errors.LauncherError` (so a TunerError and a ValueError): `tuner run`
    prints its one-line message and exits 2.
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
    if state and state not in ALIVE_STATES + ("COMPLETING",):
        return f"slurm: {state} ({detail})"
    if cancelled:
        return f"slurm: CANCELLED ({detail}; not by tuner)"
    if m := _STEP_REFUSED_LINE.search(log_text):
        return f"slurm: could not start the step ({detail}): {m.group(1).strip()[:300]}"
    if state == "COMPLETING":
        return f"slurm: the allocation ended (COMPLETING, {detail})"
    return None


def client_env(base: dict[str, str] | os._Environ) -> dict[str, str]:
    """The coordinator's environment minus an enclosing job's SLURM_* variables.

    Run from inside another job (an salloc shell), SLURM_NTASKS, SLURM_JOB_ID and friends
    would be read by srun/sbatch as options for *our* allocation. SLURM_CONF is kept.
    """
    return {k: v for k, v in base.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def mentions_option(args: tuple[str, ...], *options: str) -> bool:
    """Whether ``args`` already give one of ``options`` (`--gres x` or `--gres=x`)."""
    return any(a == o or a.startswith(o + "=") for a in args for o in options)


def rdzv_port(job_id: str, trial_number: int) -> int:
    """The c10d rendezvous port of one trial: the same for every rank, rarely another's."""
    digits = int(re.sub(r"\D", "", job_id) or 0)
    return _RDZV_PORT_BASE + (digits * 7919 + trial_number) % _RDZV_PORT_SPAN


# ------------------------------------------------------------------ Slurm commands

def run_slurm(*cmd: str) -> subprocess.CompletedProcess:
    """Run a Slurm client command; a missing command is a SlurmError, a hang an exit 124."""
    try:
        return subprocess.run(list(cmd), env=client_env(os.environ), capture_output=True,
                              text=True, timeout=_SLURM_COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"slurm: `{cmd[0]}` not found; run tuner on a node with the Slurm client "
                         "commands (a login node)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(cmd), 124, "", f"{cmd[0]} timed out (slurmctld busy?)")


def job_info(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (JobState, Reason, NodeList, RunTime, TimeLimit, ...).

    Falls back to sacct once slurmctld has forgotten the job (MinJobAge); {} if neither knows.
    """
    shown = run_slurm("scontrol", "show", "--oneliner", "job", job_id)
    if shown.returncode == 0 and "JobState=" in shown.stdout:
        return dict(re.findall(r"(\w[\w/:]*)=(\S*)", shown.stdout))
    acct = run_slurm("sacct", "--noheader", "--allocations", "--parsable2", "--jobs", job_id,
                     "--format", "State,Reason,NodeList")
    if acct.returncode == 0 and acct.stdout.strip():
        state, reason, nodes = (acct.stdout.strip().splitlines()[0].split("|") + ["", "", ""])[:3]
        return {"JobState": state.split()[0], "Reason": reason, "NodeList": nodes}
    return {}


def time_left_s(info: dict[str, str]) -> float | None:
    """TimeLimit - RunTime of a :func:`job_info`; None when either is unknown or UNLIMITED."""
    limit = parse_slurm_duration_s(info.get("TimeLimit", ""))
    run = parse_slurm_duration_s(info.get("RunTime", ""))
    return None if limit is None or run is None else limit - run


def hostnames(nodelist: str) -> tuple[str, ...]:
    """`node[01-04]` -> ('node01', ..., 'node04'), in Slurm's order (the first hosts c10d)."""
    shown = run_slurm("scontrol", "show", "hostnames", nodelist)
    return tuple(shown.stdout.split()) if shown.returncode == 0 and shown.stdout.strip() else (nodelist,)


def node_address(node: str) -> str:
    """A node's NodeAddr (a resolvable name or IP), or its name when scontrol does not say."""
    shown = run_slurm("scontrol", "show", "--oneliner", "node", node)
    m = re.search(r"\bNodeAddr=(\S+)", shown.stdout) if shown.returncode == 0 else None
    return m.group(1) if m else node


def scancel(*ids: str) -> None:
    """scancel, retried; if Slurm cannot be reached, say which job to cancel by hand."""
    for attempt in range(3):
        done = run_slurm("scancel", *ids)
        if done.returncode == 0 or "Invalid job id" in done.stderr or "already completing" in done.stderr:
            return
        time.sleep(1.0 + attempt)
    warnings.warn(f"tuner: could not cancel Slurm job(s) {' '.join(ids)}: {done.stderr.strip()}; "
                  f"run `scancel {' '.join(ids)}` (the holder also exits within {LEASE_STALE_S} s)",
                  RuntimeWarning, stacklevel=2)


def reap(proc: subprocess.Popen, grace_s: float) -> None:
    """Wait for srun to leave after a cancel; SIGKILL its group if it does not."""
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
