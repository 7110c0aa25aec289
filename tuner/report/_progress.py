"""What `tuner run` shows while it works: one live status line and a line per event.

The coordinator prints nothing; it sends TrialEvents (tuner.study). This display
turns them into:

* a status line refreshed every second: GPU-h used of the budget (never going backwards:
  the running trial counts the time it has run, not its reservation), the running trial's
  elapsed time and the steps its result file has so far (the launcher's result file grows a
  line per measured step, tuner.protocol), trials done, the best so far with its 95% CI,
  and an ETA from the GPU-h spent per wall-clock second of this run;
* one line per finished trial (its tokens/s/GPU, or its status and the reason, on one line)
  and per note (storage retries, preflight, waits).

On a terminal the status line is redrawn in place; elsewhere (a log file, CI) only the
event lines and a status line per finished trial are written. After Ctrl-C the last status
stays as it was: a `stop` event carries no ledger and changes no number.

Example:
    >>> state = ProgressState(limit_gpu_seconds=3600.0)
    >>> state.used_gpu_seconds(now=0.0)
    0.0
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = ["ProgressState", "Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``mm:ss``, or ``h:mm:ss`` from an hour.

    Example:
        >>> format_duration(43.2), format_duration(3725)
        ('00:43', '1:02:05')
    """
    s = int(max(0.0, seconds))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


def _count_steps(path: Path | None, start: int, seen: list[dict[str, Any]]) -> int:
    """Read the result file from byte ``start``; append complete step lines to ``seen``;
    return the offset after the last complete line (a line being written is read later)."""
    if path is None:
        return start
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            chunk = fh.read()
    except OSError:
        return start
    end = chunk.rfind(b"\n") + 1
    for raw in chunk[:end].splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "step":
            seen.append(rec)
    return start + end


@dataclass
class ProgressState:
    """The numbers the status line shows, updated by events and by the clock (pure)."""

    limit_gpu_seconds: float = 0.0
    committed_gpu_seconds: float = 0.0
    """Charged to the budget by trials not running here (finished, or others' reservations)."""
    shown_gpu_seconds: float = 0.0
    """The most ever shown: the display never goes backwards."""
    done: int = 0
    best_value: float | None = None
    best_ci: tuple[float, float] | None = None
    running: int | None = None
    running_since: float = 0.0
    running_gpus: int = 0
    running_reserved: float | None = None
    planned_steps: int = 0
    result_path: Path | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    result_offset: int = 0
    started_at: float = field(default_factory=time.monotonic)
    used_at_start: float | None = None

    def used_gpu_seconds(self, *, now: float) -> float:
        live = 0.0
        if self.running is not None:
            live = self.running_gpus * (now - self.running_since)
            if self.running_reserved is not None:
                live = min(live, self.running_reserved)
        self.shown_gpu_seconds = max(self.shown_gpu_seconds, self.committed_gpu_seconds + live)
        return self.shown_gpu_seconds

    def eta_seconds(self, *, now: float) -> float | None:
        """Budget left / GPU-seconds spent per wall second of this run (None before 10 s or
        before any spend)."""
        used = self.used_gpu_seconds(now=now)
        elapsed = now - self.started_at
        spent = used - (self.used_at_start or 0.0)
        if elapsed < 10 or spent <= 0 or not self.limit_gpu_seconds:
            return None
        return max(0.0, self.limit_gpu_seconds - used) / (spent / elapsed)

    def apply(self, event: Any, *, now: float) -> None:
        """Fold one TrialEvent in. Events without a ledger (notes, `stop`) change no number."""
        if event.limit_gpu_seconds:
            self.limit_gpu_seconds = event.limit_gpu_seconds
        has_ledger = event.kind in ("start", "end")
        if event.kind == "start":
            reserved = getattr(event, "reserved_gpu_seconds", None) or 0.0
            self.committed_gpu_seconds = max(0.0, event.used_gpu_seconds - reserved)
            self.running, self.running_since = event.number, now
            self.running_gpus = getattr(event, "gpus", 0) or 0
            self.running_reserved = getattr(event, "reserved_gpu_seconds", None)
            self.planned_steps = getattr(event, "planned_steps", 0) or 0
            path = getattr(event, "result_path", None)
            self.result_path = Path(path) if path else None
            self.steps, self.result_offset = [], 0
        elif event.kind == "end":
            self.committed_gpu_seconds = event.used_gpu_seconds
            self.running, self.running_gpus, self.result_path = None, 0, None
            self.done += 1
        if has_ledger and self.used_at_start is None:
            self.used_at_start = self.committed_gpu_seconds   # this run's spend starts here (a resume starts above 0)
        if has_ledger and event.best_value is not None:
            self.best_value = event.best_value
            self.best_ci = getattr(event, "best_ci", None)

    def poll_steps(self) -> None:
        if self.running is not None:
            self.result_offset = _count_steps(self.result_path, self.result_offset, self.steps)

    def status_line(self, *, now: float, width: int = 100) -> str:
        used = self.used_gpu_seconds(now=now)
        frac = used / self.limit_gpu_seconds if self.limit_gpu_seconds else 0.0
        bar_w = 12
        filled = min(bar_w, int(round(frac * bar_w)))
        parts = [f"[{'#' * filled}{'.' * (bar_w - filled)}] {used / 3600:.3f}/{self.limit_gpu_seconds / 3600:.3f} GPU-h "
                 f"{100 * frac:3.0f}%"]
        if self.running is not None:
            run = f"trial {self.running} running {format_duration(now - self.running_since)}"
            if self.steps:
                last = self.steps[-1]
                of = f"/{self.planned_steps}" if self.planned_steps else ""
                run += f", step {len(self.steps)}{of}"
                gpus = self.running_gpus or 1
                try:
                    run += f" ({float(last['tokens']) / float(last['seconds']) / gpus:,.0f} tok/s/GPU)"
                except (KeyError, TypeError, ValueError, ZeroDivisionError):
                    pass
            parts.append(run)
        best = "best -"
        if self.best_value is not None:
            best = f"best {self.best_value:,.0f} tok/s/GPU"
            if self.best_ci:
                best += f" (95% CI {self.best_ci[0]:,.0f}-{self.best_ci[1]:,.0f})"
        parts.append(f"{self.done} done, {best}")
        eta = self.eta_seconds(now=now)
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA --:--")
        return " | ".join(parts)


def _end_line(event: Any) -> str:
    r = event.result
    params = json.dumps(event.params) if event.params else ""
    if r is None:
        return f"trial {event.number}: ended  {params}"
    if r.tokens_per_sec_per_gpu:
        return f"trial {event.number}: {r.tokens_per_sec_per_gpu:,.0f} tok/s/GPU  {params}"
    status = "stopped_by_budget" if r.extra.get("stopped_by_budget") else r.status
    reason = " ".join(str(r.message).split())[:300] or "no reason given"
    return f"trial {event.number}: {status}: {reason}  {params}"


class Progress:
    """The display: call it with each TrialEvent; ``close()`` at the end."""

    def __init__(self, *, enabled: bool = True, file: TextIO | None = None, tick_s: float = 1.0) -> None:
        self.enabled = enabled
        self.file = file or sys.stderr
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.state = ProgressState()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tick_s = tick_s
        self._ticker: threading.Thread | None = None
        self._drawn = False

    def _write_line(self, text: str) -> None:
        if self.tty and self._drawn:
            self.file.write("\r\033[K")
        self.file.write(text + "\n")
        self._drawn = False

    def _draw(self) -> None:
        if not self.tty:
            return
        self.state.poll_steps()
        self.file.write("\r\033[K" + self.state.status_line(now=time.monotonic()))
        self.file.flush()
        self._drawn = True

    def _tick(self) -> None:
        while not self._stop.wait(self._tick_s):
            with self._lock:
                self._draw()

    def __call__(self, event: Any) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.state.apply(event, now=time.monotonic())
            if event.kind == "end":
                self._write_line(_end_line(event))
                if not self.tty:
                    self._write_line(self.state.status_line(now=time.monotonic()))
            if event.message:
                self._write_line(event.message)
            self._draw()
            self.file.flush()
        if self.tty and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True, name="progress")
            self._ticker.start()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.enabled and self._drawn:
                self.file.write("\n")
                self.file.flush()
                self._drawn = False
