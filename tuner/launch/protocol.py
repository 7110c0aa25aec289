"""The trial protocol, launcher side: write the trial config, read the result file.

Shared by every launcher that runs a real command (local, slurm). The objective appends
JSON lines; a line cut off by a kill is ignored, every complete step before it is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.launch.base import TrialRequest, TrialResult

__all__ = ["write_trial_config", "ProtocolRecord", "read_result_file", "classify_log",
           "trial_result"]


def write_trial_config(request: TrialRequest, path: Path) -> Path:
    spec = request.spec.to_dict()
    config = {
        "study": request.study_name,
        "trial_number": request.number,
        "seed": request.seed,
        "params": request.params,
        "model": spec["model"],
        "data": spec["data"],
        "trial": spec["trial"],
        "cluster": spec["cluster"],
        # adaptive measurement: the best trial's CI lower bound, to stop clearly worse trials
        "stop_below_tokens_per_sec_per_gpu": request.stop_below_tokens_per_sec_per_gpu,
    }
    path.write_text(json.dumps(config, indent=2))
    return path


@dataclass(kw_only=True)
class ProtocolRecord:
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def step_values(self, world_size: int) -> tuple[tuple[int, float], ...]:
        """(step, tokens/s/GPU) for each measured step."""
        out = []
        for s in self.steps:
            if s.get("seconds", 0) > 0:
                out.append((int(s["step"]), float(s["tokens"]) / float(s["seconds"]) / world_size))
        return tuple(out)


def read_result_file(path: Path) -> ProtocolRecord:
    record = ProtocolRecord()
    if not path.exists():
        return record
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by a kill
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "step" and {"step", "tokens", "seconds"} <= set(event):
            record.steps.append(event)
        elif kind == "summary":
            record.summary = event
        elif kind == "error":
            record.error = event
    return record


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
    launcher's timeout, then the objective's own error line, then a clean finish (exit 0, a
    summary and steps), then what the log says. GPU-seconds = world size x wall time.
    """
    record = read_result_file(result_path)
    summary = record.summary or {}
    common = dict(launcher=launcher, world_size=world_size,
                  gpu_seconds=world_size * wall_seconds, wall_seconds=wall_seconds,
                  step_values=record.step_values(world_size), log_path=str(log_path),
                  peak_mem_gib=summary.get("peak_mem_gib"),
                  data_wait_frac=summary.get("data_wait_frac"),
                  startup_seconds=summary.get("startup_seconds"),
                  extra={k: v for k, v in summary.items() if k not in _SUMMARY_FIELDS})
    if timed_out:
        return TrialResult(status="timeout", message=timeout_message, **common)
    if record.error is not None:
        kind = record.error.get("kind", "error")
        status = kind if kind in ("oom", "error") else "error"
        return TrialResult(status=status, message=str(record.error.get("message", ""))[:1000], **common)
    if returncode == 0 and record.summary is not None and record.steps:
        return TrialResult(status="ok", **common)
    log_text = log_path.read_text(errors="replace")[-20000:] if log_path.exists() else ""
    status, reason = classify_log(log_text)
    if returncode == 0:
        reason = "the command exited 0 without a summary line (does it speak the trial protocol?)"
    return TrialResult(status=status, message=f"exit {returncode}: {reason}", **common)
