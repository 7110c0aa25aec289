"""The trial protocol, launcher side: write the trial config, turn a finished command's
result file, exit code and log into a TrialResult.

Shared by every launcher that runs a real command (local, slurm). The schema itself (config
keys, result lines, what counts as malformed) is tuner.protocol's, which the workload uses
to write them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tuner.launch._base import TrialRequest, TrialResult
from tuner.protocol import ERROR_KINDS, read_results, trial_config

__all__ = ["write_trial_config", "classify_log", "trial_result"]


def write_trial_config(request: TrialRequest, path: Path) -> Path:
    config = trial_config(study=request.study_name, trial_number=request.number, seed=request.seed,
                          params=request.params, spec=request.spec.to_dict(),
                          stop_below_tokens_per_sec_per_gpu=request.stop_below_tokens_per_sec_per_gpu)
    path.write_text(json.dumps(config, indent=2))
    return path


# What a failed job's log says, most specific first. OOM texts: PyTorch's CUDA caching
# allocator ("CUDA out of memory"), torch.OutOfMemoryError, the kernel's OOM killer (exit
# -9 with "Killed"). NCCL's: "no algorithm/protocol available" (NVIDIA/nccl#317, #1670).
_LOG_PATTERNS = (
    ("oom", re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED", re.I)),
    ("error", re.compile(r"NCCL (?:WARN|error).*|no algorithm/protocol available.*|ncclInvalidUsage.*", re.I)),
)


def classify_log(text: str) -> tuple[str, str]:
    """(status, one-line reason) for a job that ended without an error line of its own."""
    for status, pattern in _LOG_PATTERNS:
        m = pattern.search(text)
        if m:
            line = text[text.rfind("\n", 0, m.start()) + 1: text.find("\n", m.end()) if "\n" in text[m.end():] else len(text)]
            return status, line.strip()[:500]
    tail = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "error", (tail[-1].strip()[:500] if tail else "the job exited without a result")


# Summary keys that have a TrialResult field of their own; the rest go to `extra`.
_SUMMARY_FIELDS = ("event", "peak_mem_gib", "data_wait_frac", "startup_seconds")


def trial_result(*, launcher: str, world_size: int, wall_seconds: float,
                 returncode: int | None, result_path: Path, log_path: Path,
                 timed_out: bool = False, timeout_message: str = "killed at its time limit") -> TrialResult:
    """The TrialResult of a finished command, from its result file, exit code and log.

    Shared by the launchers that run a real command (local, slurm). Precedence: the
    launcher's timeout, then result lines that break the protocol (an `error` naming the
    file and line; none of its steps count), then the objective's own error line, then a
    clean finish (exit 0, a summary and steps), then what the log says. GPU-seconds = world
    size x wall time.
    """
    record = read_results(result_path)
    if record.problems and not timed_out:  # nothing of a broken result counts but the time it used
        more = f" (and {len(record.problems) - 1} more)" if len(record.problems) > 1 else ""
        return TrialResult(status="error", launcher=launcher, world_size=world_size,
                           gpu_seconds=world_size * wall_seconds, wall_seconds=wall_seconds, log_path=str(log_path),
                           message=f"result file {result_path}: {record.problems[0]}{more}: "
                                   "the workload broke the trial protocol (docs/contracts.md)")
    summary = record.summary or {}
    common = dict(launcher=launcher, world_size=world_size,
                  gpu_seconds=world_size * wall_seconds, wall_seconds=wall_seconds,
                  step_values=record.step_values(world_size), step_seconds=record.step_seconds(),
                  log_path=str(log_path),
                  peak_mem_gib=summary.get("peak_mem_gib"),
                  data_wait_frac=summary.get("data_wait_frac"),
                  startup_seconds=summary.get("startup_seconds"),
                  extra={k: v for k, v in summary.items() if k not in _SUMMARY_FIELDS})
    if timed_out:
        return TrialResult(status="timeout", message=timeout_message, **common)
    if record.error is not None:
        kind = record.error.get("kind", "error")
        status = kind if kind in ERROR_KINDS else "error"
        return TrialResult(status=status, message=str(record.error.get("message", ""))[:1000], **common)
    if returncode == 0 and record.summary is not None and record.steps:
        return TrialResult(status="ok", **common)
    log_text = log_path.read_text(errors="replace")[-20000:] if log_path.exists() else ""
    status, reason = classify_log(log_text)
    if returncode == 0:
        reason = "the command exited 0 without a summary line (does it speak the trial protocol?)"
    return TrialResult(status=status, message=f"exit {returncode}: {reason}", **common)
