"""Trials the way tuner's local launcher runs them: the trial protocol, torchrun, a process group.

A cold trial is ``python -m torch.distributed.run --standalone --nproc_per_node 1 -m
objectives.fsdp_finetune`` with ``TUNER_TRIAL_CONFIG`` and ``TUNER_RESULT_FILE`` (and the
NCCL variables from the knobs, through ``tuner.knobs.environment``: the one place that turns
knob values into an environment). A resident worker is the same command with
``TUNER_WORKER_DIR``, handed its next configs as job files (``tuner.protocol.write_job``).

Each job runs in a session of its own and dies with its parent (PR_SET_PDEATHSIG), so a check
killed at its time box leaves no trial behind; a trial past its own timeout is stopped with
SIGTERM, then SIGKILL. Times are wall clock (``time.time``), comparable with the step lines'
``unix_time``: "to first step" is from the launch (or the job file) to the start of the first
measured step (its line's ``unix_time`` minus its ``seconds``).

This module holds the kit's only imports from tuner and objectives beyond helper's public API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The trial-rank contract (standard library only) and one table of the objective's metrics.
from objectives.metrics import CUDA_NAME_TO_GPU  # CUDA device name -> helper GPU name
from tuner import knobs, protocol

__all__ = ["ROOT", "run_cold", "start_cold", "finish_cold", "stop_cold", "ColdTrial", "run_resident", "helper_gpu_for",
           "SUMMARY_FIELDS", "trial_env", "die_with_parent"]

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", "1"]
KILL_GRACE_S = 5.0
"""SIGTERM to SIGKILL: torchrun forwards SIGTERM to its ranks and waits for them."""
STOP_GRACE_S = 15.0
"""A resident worker's stop job: barrier, destroy_process_group, exit (tuner.launch.resident)."""
POLL_S = 0.05

SUMMARY_FIELDS = ("tokens_per_sec_per_gpu", "mfu", "mfu_peak_flops", "step_time_s", "measured_steps",
                  "peak_mem_gib", "peak_mem_reserved_gib", "peak_mem_kind", "padding_efficiency",
                  "data_wait_frac", "startup_seconds", "n_params", "device", "dtype", "attention",
                  "nccl_env", "checkpoint", "resident", "torch_version")
"""Summary fields the kit keeps (docs/contracts.md); the full lines stay in the run folder."""


def helper_gpu_for(device_name: str) -> str | None:
    """helper's GPU name for a CUDA device name (objectives.metrics' table), None if unknown.

    Example:
        >>> helper_gpu_for("NVIDIA H100 80GB HBM3"), helper_gpu_for("NVIDIA H100 PCIe")
        ('H100-80GB', None)
    """
    for pattern, gpu in CUDA_NAME_TO_GPU:
        if pattern.lower() in device_name.lower():
            return gpu
    return None


def trial_env(params: Mapping[str, Any], *, config: Path, result: Path,
              extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the knobs' NCCL variables (``default`` unsets them),
    the trial protocol's two paths and the repository on PYTHONPATH."""
    env = knobs.environment(params, os.environ)
    env[protocol.CONFIG_ENV], env[protocol.RESULT_ENV] = str(config), str(result)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(extra or {})
    return env


def die_with_parent() -> None:
    """In the child: SIGTERM when its parent dies, even by SIGKILL (Linux prctl)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _start(env: Mapping[str, str], log_path: Path) -> tuple[subprocess.Popen, Any]:
    log = open(log_path, "wb")  # noqa: SIM115 - closed by _stop
    proc = subprocess.Popen([*TORCHRUN, "-m", "objectives.fsdp_finetune"], cwd=ROOT, env=dict(env), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=die_with_parent)
    return proc, log


def _stop(proc: subprocess.Popen, log, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the job's group, SIGKILL what is left after ``grace_s`` (ranks, loader workers)."""
    try:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    log.close()


def _record(result: Path, *, started_unix: float, wall_s: float, timed_out: bool, returncode: int | None,
            log_path: Path) -> dict[str, Any]:
    """A trial's outcome from its result lines: status, kept summary fields, first-step timing."""
    rec = protocol.read_results(result)
    text = result.read_text(errors="replace") if result.exists() else ""
    resume = next((json.loads(line) for line in text.splitlines() if '"event": "resume"' in line), None)
    first = rec.steps[0] if rec.steps else None
    out: dict[str, Any] = {
        "status": "ok", "wall_s": wall_s, "returncode": returncode, "measured_steps": len(rec.steps),
        "to_first_step_s": (first["unix_time"] - first["seconds"] - started_unix)
        if first and "unix_time" in first else None,
        "summary": {k: rec.summary.get(k) for k in SUMMARY_FIELDS if k in rec.summary} if rec.summary else None,
        "resume": resume, "error": None, "error_line": rec.error is not None, "log": str(log_path)}
    if rec.error:
        out["status"], out["error"] = rec.error.get("kind", "error"), {"kind": rec.error.get("kind"),
                                                                        "message": rec.error.get("message")}
    elif timed_out:
        out["status"] = "timeout"
    elif rec.summary is None or rec.problems:
        tail = log_path.read_text(errors="replace")[-600:] if log_path.exists() else ""
        out["status"] = "error"
        out["error"] = {"kind": "error", "message": "; ".join(rec.problems)
                        or f"exited {returncode} without a summary line; log tail: {tail}"}
    return out


@dataclass
class ColdTrial:
    """A cold trial started by :func:`start_cold`; :func:`finish_cold` waits for it."""

    proc: subprocess.Popen
    log: Any
    folder: Path
    started_unix: float


def start_cold(doc: Mapping[str, Any], folder: Path, *, extra_env: Mapping[str, str] | None = None) -> ColdTrial:
    """Start one cold trial of the config ``doc`` in ``folder`` (config.json, result.jsonl, trial.log)."""
    folder.mkdir(parents=True, exist_ok=True)
    config, result = folder / "config.json", folder / "result.jsonl"
    config.write_text(json.dumps(doc, indent=1))
    result.unlink(missing_ok=True)
    started = time.time()
    proc, log = _start(trial_env(doc["params"], config=config, result=result, extra=extra_env), folder / "trial.log")
    return ColdTrial(proc, log, folder, started)


def finish_cold(trial: ColdTrial, *, timeout_s: float) -> dict[str, Any]:
    """Wait for ``trial`` at most ``timeout_s`` seconds, stop what is left of it, read its lines."""
    timed_out = False
    try:
        trial.proc.wait(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _stop(trial.proc, trial.log)
    return _record(trial.folder / "result.jsonl", started_unix=trial.started_unix,
                   wall_s=time.time() - trial.started_unix, timed_out=timed_out, returncode=trial.proc.returncode,
                   log_path=trial.folder / "trial.log")


def stop_cold(trial: ColdTrial | None) -> None:
    """Stop ``trial`` if it still runs (after an interruption; :func:`finish_cold` stops its own)."""
    if trial is not None and not trial.log.closed:
        _stop(trial.proc, trial.log, grace_s=1.0)


def run_cold(doc: Mapping[str, Any], folder: Path, *, timeout_s: float,
             extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One cold trial, start to end (:func:`start_cold`, then :func:`finish_cold`)."""
    return finish_cold(start_cold(doc, folder, extra_env=extra_env), timeout_s=timeout_s)


def run_resident(docs: Sequence[Mapping[str, Any]], folder: Path, *, deadline_unix: float,
                 on_job=lambda job, record: None) -> list[dict[str, Any]]:
    """Run ``docs`` in one resident worker, in order; one record per job, as :func:`run_cold`'s,
    plus ``level`` (the worker's reconfiguration) and ``warm``. ``on_job(job, record)`` is
    called as each ends; jobs not reached by ``deadline_unix`` get status ``timeout``."""
    folder.mkdir(parents=True, exist_ok=True)
    worker_dir = folder / "worker"
    worker_dir.mkdir(exist_ok=True)
    for stale in worker_dir.iterdir():
        stale.unlink()
    configs = [folder / f"config-{i}.json" for i in range(len(docs))]
    results = [folder / f"result-{i}.jsonl" for i in range(len(docs))]
    for path, doc in zip(configs, docs):
        path.write_text(json.dumps(doc, indent=1))
    log_path = folder / "worker.log"
    env = trial_env(docs[0]["params"], config=configs[0], result=results[0],
                    extra={protocol.WORKER_ENV: str(worker_dir), protocol.WORKER_IDLE_ENV: "120"})
    started = time.time()
    proc, log = _start(env, log_path)
    records: list[dict[str, Any]] = []
    state = "not started"
    try:
        for job in range(len(docs)):
            handed = started if job == 0 else time.time()
            if job:
                protocol.write_job(worker_dir, job, config_path=str(configs[job]), result_path=str(results[job]))
            state = "timeout"
            while time.time() < deadline_unix:
                if results[job].exists() and protocol.has_job_end(results[job].read_text(errors="replace"), job):
                    state = "done"
                    break
                if proc.poll() is not None:
                    state = "exited"
                    break
                time.sleep(POLL_S)
            rec = _record(results[job], started_unix=handed, wall_s=time.time() - handed, timed_out=state == "timeout",
                          returncode=proc.poll(), log_path=log_path)
            resident = (rec["summary"] or {}).get("resident") or {}
            rec.update(job=job, warm=job > 0, level=resident.get("reconfigured"))
            records.append(rec)
            on_job(job, rec)
            if state != "done":
                break
        # a stop job for a worker that is idle; one still in a job (past the deadline) is killed
        if state == "done" and proc.poll() is None and protocol.worker_announced(worker_dir):
            protocol.write_job(worker_dir, len(records), stop=True)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
    finally:
        _stop(proc, log, grace_s=3.0)
    return records
