"""The trial protocol, written once: the trial config file and the result lines.

Standard library only. The trial workload imports this module (and ``tuner.knobs``) without
loading tuner's control plane (Optuna, SQLAlchemy); launchers read results with the same
schema. docs/contracts.md describes the protocol for authors of other workloads.

The launcher passes two environment variables:

- :data:`CONFIG_ENV` (``TUNER_TRIAL_CONFIG``): a JSON file with the knob values and the
  spec's model, data, trial and cluster sections (:func:`trial_config`);
- :data:`RESULT_ENV` (``TUNER_RESULT_FILE``): where rank 0 appends JSON lines:

  ``{"event": "step", "step": 12, "tokens": 65536, "seconds": 0.81}`` per measured step
  (``tokens``: all ranks' non-padding tokens of that optimizer step), then one
  ``{"event": "summary", ...}``, or ``{"event": "error", "kind": "oom"|"error", "message": ...}``.

Resident mode (optional; docs/contracts.md "Resident workers"): the launcher may also pass
:data:`WORKER_ENV` (``TUNER_WORKER_DIR``). A command that implements it runs the first
config as usual, appends ``{"event": "job_end", "job": 0}`` after its summary, announces
itself in the worker folder (:func:`announce_worker`) and then runs job files
``job-00001.json``, ... (:func:`write_job`) until a stop job or its idle limit. A command
that ignores the variable runs one config and exits: a cold trial, which still works.

A last line cut off by a kill is ignored. Any other line that breaks the schema (not JSON,
a step without a number, a negative or non-finite value) is a problem of the trial: the
launcher records it as an ``error`` that names the file and the line, and none of its steps
enter the statistics.

Example:
    >>> rec = parse_results('{"event": "step", "step": 1, "tokens": 100, "seconds": 0.5}\\n')
    >>> rec.steps[0]["tokens"], rec.problems
    (100, [])
    >>> parse_results('{"event": "step", "step": 1, "tokens": 100, "seconds": "fast"}\\n').problems
    ['line 1: step field seconds is "fast", not a number']
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_ENV", "RESULT_ENV", "ERROR_KINDS", "DTYPES", "trial_config", "step_event", "error_event",
           "summary_event", "ResultWriter", "ResultRecord", "parse_results", "read_results",
           "WORKER_ENV", "WORKER_IDLE_ENV", "WORKER_IDLE_S", "job_path", "write_job", "read_job",
           "job_end_event", "has_job_end", "announce_worker", "worker_announced"]

CONFIG_ENV = "TUNER_TRIAL_CONFIG"
RESULT_ENV = "TUNER_RESULT_FILE"
ERROR_KINDS = ("oom", "error")
DTYPES = ("auto", "bf16", "fp16", "fp32")
"""The trial config's model.dtype values (`auto`: bf16 on a GPU, fp32 on CPU)."""
WORKER_ENV = "TUNER_WORKER_DIR"
WORKER_IDLE_ENV = "TUNER_WORKER_IDLE_S"
WORKER_IDLE_S = 600.0
"""A resident worker with no job for this long exits by itself: the last guard against an
orphan when its coordinator died where no signal reaches it (another node)."""

# Summary fields the launcher reads and checks; the rest are diagnostics kept as they are.
_SUMMARY_NUMBERS = ("tokens_per_sec_per_gpu", "peak_mem_gib", "data_wait_frac", "startup_seconds")


def trial_config(*, study: str, trial_number: int, seed: int, params: Mapping[str, Any],
                 spec: Mapping[str, Any], stop_below_tokens_per_sec_per_gpu: float | None) -> dict[str, Any]:
    """The trial config document (docs/contracts.md) from a spec dict (``StudySpec.to_dict``)."""
    return {
        "study": study, "trial_number": trial_number, "seed": seed, "params": dict(params),
        "model": spec["model"], "data": spec["data"], "trial": spec["trial"], "cluster": spec["cluster"],
        # adaptive measurement: the best trial's CI lower bound, to stop clearly worse trials
        "stop_below_tokens_per_sec_per_gpu": stop_below_tokens_per_sec_per_gpu,
    }


def step_event(*, step: int, tokens: int | float, seconds: float, **extra: Any) -> dict[str, Any]:
    """One measured optimizer step; ``extra`` holds diagnostics (padded_tokens, loss, ...)."""
    return {"event": "step", "step": step, "tokens": tokens, "seconds": seconds, **extra}


def summary_event(**fields: Any) -> dict[str, Any]:
    """The trial's summary line (peak_mem_gib, data_wait_frac, startup_seconds, diagnostics)."""
    return {"event": "summary", **fields}


def error_event(*, kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """The line a failing rank writes: ``kind`` is `oom` or `error`."""
    if kind not in ERROR_KINDS:
        raise ValueError(f"error kind {kind!r}: one of {', '.join(ERROR_KINDS)}")
    return {"event": "error", "kind": kind, "message": message[:1000], **extra}


class ResultWriter:
    """Appends protocol lines, each flushed, so a killed trial keeps its finished steps.

    ``path`` None writes to stdout (a workload run by hand).
    """

    def __init__(self, path: str | None, *, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled

    def emit(self, event: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        line = json.dumps(event) + "\n"
        if not self.path:
            sys.stdout.write(line)
            sys.stdout.flush()
            return
        with open(self.path, "a") as fh:  # O_APPEND: short lines from two ranks don't interleave
            fh.write(line)
            fh.flush()

    def has_error(self) -> bool:
        """Whether some rank already wrote an error line (the first failure is the cause)."""
        if not self.path or not Path(self.path).exists():
            return False
        return '"event": "error"' in Path(self.path).read_text(errors="replace")


@dataclass(kw_only=True)
class ResultRecord:
    """What a result file held."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    """Lines that break the schema, as ``line N: what``; a trial with any is an error."""

    def step_values(self, world_size: int) -> tuple[tuple[int, float], ...]:
        """(step, tokens/s/GPU) for each measured step."""
        return tuple((int(s["step"]), float(s["tokens"]) / float(s["seconds"]) / world_size)
                     for s in self.steps)

    def step_seconds(self) -> tuple[float, ...]:
        """Wall seconds of each measured step (the weights of tokens over time)."""
        return tuple(float(s["seconds"]) for s in self.steps)


def _number_problem(event: Mapping[str, Any], key: str, *, positive: bool) -> str | None:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"field {key} is {json.dumps(value)}, not a number"
    if not math.isfinite(value):
        return f"field {key} is {value}, not a finite number"
    if value < 0 or (positive and value == 0):
        return f"field {key} is {value}, must be {'> 0' if positive else '>= 0'}"
    return None


def _step_problem(event: Mapping[str, Any]) -> str | None:
    for key in ("step", "tokens", "seconds"):
        if key not in event:
            return f"step has no {key}"
    if isinstance(event["step"], bool) or not isinstance(event["step"], int) or event["step"] < 0:
        return f"step field step is {json.dumps(event['step'])}, not an integer >= 0"
    for key, positive in (("tokens", False), ("seconds", True)):
        problem = _number_problem(event, key, positive=positive)
        if problem:
            return f"step {problem}"
    return None


def parse_results(text: str) -> ResultRecord:
    """Parse result lines (see the module doc for what counts as a problem)."""
    record = ResultRecord()
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, ValueError):
            if number == len(lines) and not text.endswith("\n"):
                continue  # the last line, cut off by a kill
            record.problems.append(f"line {number}: not a JSON object: {line[:80]!r}")
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "step":
            problem = _step_problem(event)
            if problem:
                record.problems.append(f"line {number}: {problem}")
            else:
                record.steps.append(event)
        elif kind == "summary":
            for key in _SUMMARY_NUMBERS:
                problem = event.get(key) is not None and _number_problem(event, key, positive=False)
                if problem:
                    record.problems.append(f"line {number}: summary {problem}")
                    break
            record.summary = event
        elif kind == "error":
            record.error = event
        elif not isinstance(event, dict):
            record.problems.append(f"line {number}: not a JSON object: {line[:80]!r}")
        # other events (a newer workload's) are left for the reader that knows them
    return record


def read_results(path: str | Path) -> ResultRecord:
    """:func:`parse_results` of a result file; an empty record when it does not exist."""
    path = Path(path)
    if not path.exists():
        return ResultRecord()
    return parse_results(path.read_text(errors="replace"))


# ------------------------------------------------------------------ resident mode

def job_path(worker_dir: str | Path, job: int) -> Path:
    """The file of job ``job`` (>= 1; job 0 is the config the worker was started with)."""
    return Path(worker_dir) / f"job-{job:05d}.json"


def write_job(worker_dir: str | Path, job: int, *, config_path: str | None = None,
              result_path: str | None = None, stop: bool = False) -> Path:
    """Hand a resident worker its next job (or ``stop``), atomically (write, then rename).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> read_job(write_job(d, 1, config_path="/c.json", result_path="/r.jsonl"))
        {'job': 1, 'config': '/c.json', 'result': '/r.jsonl', 'stop': False}
    """
    path = job_path(worker_dir, job)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"job": job, "config": config_path, "result": result_path, "stop": stop}))
    tmp.replace(path)
    return path


def read_job(path: str | Path) -> dict[str, Any] | None:
    """A job file's content, or None while it does not exist."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def job_end_event(*, job: int, **extra: Any) -> dict[str, Any]:
    """The last line of a job's result file in resident mode: the worker is ready for the next."""
    return {"event": "job_end", "job": job, **extra}


def has_job_end(text: str, job: int) -> bool:
    """Whether result text holds job ``job``'s job_end line."""
    for line in reversed(text.splitlines()):
        if '"job_end"' in line:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "job_end" and event.get("job") == job:
                return True
    return False


def announce_worker(worker_dir: str | Path, **fields: Any) -> None:
    """Rank 0 of a command that implements resident mode says so (``worker.json``)."""
    path = Path(worker_dir) / "worker.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"resident": True, **fields}))
    tmp.replace(path)


def worker_announced(worker_dir: str | Path) -> bool:
    return (Path(worker_dir) / "worker.json").exists()
