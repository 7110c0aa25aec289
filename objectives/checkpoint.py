"""Distributed checkpoints of a trial: save every N steps, resume from the latest.

Model and optimizer state go through ``torch.distributed.checkpoint`` (DCP): every rank
writes its own shards, rank 0 writes ``.metadata`` last, so a folder with ``.metadata`` is a
complete checkpoint and one without it (a save cut short by a crash) is ignored. Layout:

    <checkpoint_dir>/<study>/trial-<number>/step-<completed steps, 8 digits>/

Two modes ([trial] checkpoint_mode): `sync` (``dcp.save``; the step waits for the whole
write) and `async` (``dcp.async_save``; the step waits only while the state is staged, the
write runs in a background thread over a gloo group of its own, as PyTorch's DCP async
tutorial recommends; the next save waits for the previous one). Measured per save:
blocking time (what training waits) and background time (from the return of async_save to
the end of the write). The data loader restarts from the beginning of its shard on resume
(a trial's throughput does not depend on which rows it reads).

:func:`drill_report` turns a failure drill's result lines into its parts (tests/
test_checkpoint.py kills a rank and torchrun's --max-restarts brings the job back).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Checkpointer", "checkpoint_folder", "latest_checkpoint", "folder_bytes", "drill_report",
           "KEEP_LAST"]

KEEP_LAST = 2
"""Complete checkpoints kept per trial (older ones are deleted once a newer one is complete)."""
_STEP_DIR = re.compile(r"^step-(\d{8})$")


def checkpoint_folder(checkpoint_dir: str | Path, *, study: str, trial_number: int) -> Path:
    """Where one trial's checkpoints go.

    Example:
        >>> checkpoint_folder("/ckpt", study="s", trial_number=3).as_posix()
        '/ckpt/s/trial-3'
    """
    return Path(checkpoint_dir) / study / f"trial-{trial_number}"


def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(completed steps, path) of every complete checkpoint in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / ".metadata").is_file()]
    return sorted(found)


def latest_checkpoint(folder: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint in ``folder``, or None."""
    found = complete_checkpoints(folder)
    return found[-1] if found else None


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (what one checkpoint occupies on storage)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class Checkpointer:
    """Saves and restores one trial's model and optimizer state (create on every rank)."""

    folder: Path
    every: int
    mode: str = "sync"
    saves: list[dict[str, Any]] = field(default_factory=list)
    resumed_from_step: int | None = None
    reload_s: float | None = None
    _pending: Any = None
    _group: Any = None

    def __post_init__(self) -> None:
        import torch.distributed as dist

        if self.mode == "async":  # the background write's collectives must not share NCCL's stream
            self._group = dist.new_group(backend="gloo")

    @classmethod
    def for_trial(cls, config) -> Checkpointer | None:
        """The trial's checkpointer (an objectives.trial_config.TrialConfig), or None when off."""
        if not config.checkpoint_every:
            return None
        folder = checkpoint_folder(config.checkpoint_dir, study=config.study or "study",
                                   trial_number=config.trial_number)
        return cls(folder=folder, every=config.checkpoint_every, mode=config.checkpoint_mode)

    @staticmethod
    def _state(model, optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def resume(self, model, optimizer) -> int:
        """Load the latest complete checkpoint, if any; the number of steps it had completed."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        box = [latest_checkpoint(self.folder) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)  # every rank loads the same one
        if box[0] is None:
            return 0
        step, path = box[0]
        t0 = time.perf_counter()
        state = self._state(model, optimizer)
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        dist.barrier()
        self.resumed_from_step, self.reload_s = step, time.perf_counter() - t0
        return step

    def due(self, completed_steps: int) -> bool:
        return self.every > 0 and completed_steps % self.every == 0

    def save(self, completed_steps: int, model, optimizer) -> dict[str, Any]:
        """Save now; returns the save's record (blocking_s now, background_s once written)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        self.wait()  # one save in flight at a time
        path = self.folder / f"step-{completed_steps:08d}"
        record: dict[str, Any] = {"step": completed_steps, "mode": self.mode, "path": str(path)}
        t0 = time.perf_counter()
        state = self._state(model, optimizer)
        if self.mode == "async":
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=self._group)
            future = getattr(future, "upload_completion", future)  # AsyncSaveResponse (stager) or Future
            returned = time.perf_counter()
            future.add_done_callback(lambda _f: record.update(background_s=time.perf_counter() - returned))
            self._pending = (future, record)
            record["blocking_s"] = returned - t0
        else:
            dcp.save(state, checkpoint_id=str(path))
            record["blocking_s"], record["background_s"] = time.perf_counter() - t0, 0.0
            self._written(record)
        self.saves.append(record)
        dist.barrier() if self.mode == "sync" else None
        return record

    def _written(self, record: dict[str, Any]) -> None:
        import torch.distributed as dist

        if dist.get_rank() != 0:
            return
        path = Path(record["path"])
        record["bytes"] = folder_bytes(path) if path.is_dir() else None
        for _step, old in complete_checkpoints(self.folder)[:-KEEP_LAST]:
            shutil.rmtree(old, ignore_errors=True)

    def wait(self) -> None:
        """Block until the save in flight (async) is written."""
        if self._pending is not None:
            future, record = self._pending
            future.result()
            self._pending = None
            record.setdefault("background_s", None)
            self._written(record)

    def summary(self) -> dict[str, Any]:
        """The trial summary's ``checkpoint`` entry (call after :meth:`wait`)."""
        def mean(key: str) -> float | None:
            vals = [s[key] for s in self.saves if s.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        sizes = [s["bytes"] for s in self.saves if s.get("bytes")]
        return {"mode": self.mode, "every_steps": self.every, "folder": str(self.folder), "saves": len(self.saves),
                "blocking_s_mean": mean("blocking_s"),
                "blocking_s_max": max((s["blocking_s"] for s in self.saves), default=None),
                "background_s_mean": mean("background_s"), "bytes": sizes[-1] if sizes else None,
                "resumed_from_step": self.resumed_from_step, "reload_s": self.reload_s}


def drill_report(events: Sequence[Mapping[str, Any]], *, kill_time: float, every: int) -> dict[str, Any]:
    """The parts of the work a kill lost, from the result lines of a run that was killed at
    ``kill_time`` (unix seconds) and brought back by a restart.

    ``events`` are the run's lines in order: ``step`` lines carry ``unix_time`` and a
    ``resume`` line carries ``step`` (the checkpoint's completed steps), ``process_start``
    and ``reload_s``. Parts: detection (kill -> the new processes start: the launcher noticing
    the dead rank and stopping the others), restart (new process start -> the first step
    after the restart starts, less the reload: imports, process group, data, model), reload,
    and the steps redone. ``lost_s`` is kill -> the end of the first step past the progress
    made before the kill; ``bound_s`` = checkpoint interval (``every`` steps at the mean wall
    time between step lines, before the kill or while redoing, whichever is slower) +
    detection + restart + reload.

    Example:
        >>> ev = [{"event": "step", "step": s, "unix_time": 10.0 + s, "seconds": 1.0} for s in range(5)]
        >>> ev += [{"event": "resume", "step": 3, "process_start": 16.0, "reload_s": 0.5, "unix_time": 18.0}]
        >>> ev += [{"event": "step", "step": s, "unix_time": 19.0 + s - 3, "seconds": 1.0} for s in range(3, 6)]
        >>> r = drill_report(ev, kill_time=14.5, every=3)
        >>> r["steps_redone"], r["lost_s"], r["bound_s"], r["detection_s"], r["restart_s"]
        (2, 6.5, 6.5, 1.5, 1.5)
    """
    resume_at = next(i for i, e in enumerate(events) if e.get("event") == "resume")
    resume = events[resume_at]
    before = [e for e in events[:resume_at] if e.get("event") == "step" and e["unix_time"] <= kill_time]
    after = [e for e in events[resume_at:] if e.get("event") == "step"]
    done_before = before[-1]["step"] + 1 if before else 0  # steps completed before the kill
    first_new = next(e for e in after if e["step"] + 1 > done_before)
    # Wall time per step: the mean gap between step lines (the step plus what runs between
    # steps), before the kill and while redoing; the interval is counted at the slower rate
    # (the restarted processes may run slower at first: cold caches, a loaded machine). The
    # mean, not the median: the redone steps' wall time is their sum, so with fewer than
    # ``every`` steps redone it is at most ``every`` x their mean gap, whatever their spread.
    def mean_gap(steps: Sequence[Mapping[str, Any]], first_s: float) -> float:
        gaps = [first_s] + [b["unix_time"] - a["unix_time"] for a, b in zip(steps, steps[1:], strict=False)]
        return sum(gaps) / len(gaps)

    redo = [e for e in after if e["step"] <= first_new["step"]]
    step_before_s = mean_gap(before, before[0]["seconds"] if before else after[0]["seconds"])
    step_after_s = mean_gap(redo, redo[0]["seconds"])
    step_s = max(step_before_s, step_after_s)
    detection = resume["process_start"] - kill_time
    restart = after[0]["unix_time"] - after[0]["seconds"] - resume["reload_s"] - resume["process_start"]
    report = {"checkpoint_step": resume["step"], "steps_done_before_kill": done_before,
              "steps_redone": done_before - resume["step"], "step_s": step_s,
              "step_before_kill_s": step_before_s, "step_after_restart_s": step_after_s,
              "interval_s": every * step_s, "detection_s": detection, "restart_s": restart,
              "reload_s": resume["reload_s"], "first_step_after_restart_s": after[0]["unix_time"] - kill_time,
              "lost_s": first_new["unix_time"] - kill_time}
    report["bound_s"] = report["interval_s"] + detection + restart + resume["reload_s"]
    return report
