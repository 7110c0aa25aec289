"""The local spool: a finished trial's result is kept on disk until the storage has it.

A trial that finishes while the database is down must not be thrown away. Before recording
a result the coordinator writes it to ``<runs-dir>/<study>/spool/trial-NNNN.json``
(atomically: write, fsync, rename; in a folder of its own, flocked while it lives) and deletes
the file once the storage has it. If the
storage stays away longer than the coordinator waits (tuner.storage.OUTAGE_S) or the
coordinator dies, the file stays; the next `tuner run` of the study records it before it
admits anything (:func:`replay`). A trial that another coordinator has meanwhile failed as
stale gets its result as a new COMPLETE trial (user attr ``recovered_from``), so the
measurement is never lost and the budget charged for it stays the time it ran.

Example:
    >>> import tempfile, optuna
    >>> from tuner.launch import TrialResult
    >>> runs = Path(tempfile.mkdtemp())
    >>> r = TrialResult(status="ok", launcher="sim", world_size=2, gpu_seconds=4.0, wall_seconds=2.0,
    ...                 step_values=((0, 10.0), (1, 12.0)))
    >>> mine = Spool(runs, "s")
    >>> path = mine.put(3, r)
    >>> [n for n, _, _ in pending(runs, "s")]        # its owner is alive: not for others to replay
    []
    >>> mine._lock.close()                           # the owner dies with its result unrecorded
    >>> [(n, res.step_values) for n, res, _ in pending(runs, "s")]
    [(3, ((0, 10.0), (1, 12.0)))]
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.launch import TrialResult
from tuner.stats import ROLE_ATTRS
from tuner.storage import trial_id
from tuner.study._outcome import LOST, outcome

__all__ = ["Spool", "spool_dir", "pending", "replay", "recover_late"]


def spool_dir(runs_dir: Path, study_name: str) -> Path:
    return Path(runs_dir) / study_name / "spool"


class Spool:
    """This coordinator's spool: ``spool/<owner>/`` and ``spool/<owner>.lock``, flocked for
    its lifetime, so the next run (or a coordinator beside it) replays only a dead owner's
    results, never those of a live one that is recording them."""

    def __init__(self, runs_dir: Path, study_name: str) -> None:
        root = spool_dir(runs_dir, study_name)
        root.mkdir(parents=True, exist_ok=True)
        owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.folder = root / owner
        self._lock = open(root / f"{owner}.lock", "w")  # noqa: SIM115 - held until close()
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def put(self, number: int, result: TrialResult) -> Path:
        """Write one finished trial's result, atomically; returns the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"trial-{number:04d}.json"
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as fh:
                json.dump({"number": number, "result": dataclasses.asdict(result)}, fh, default=str)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError:  # a full disk: no half-written file stays behind
            tmp.unlink(missing_ok=True)
            raise
        return path

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.folder.rmdir()  # only when empty: what is left waits for the next run
            Path(self._lock.name).unlink()
        self._lock.close()


def _result(raw: dict[str, Any]) -> TrialResult:
    raw = dict(raw)
    raw["step_values"] = tuple((int(s), float(v)) for s, v in raw.get("step_values", ()))
    raw["step_seconds"] = tuple(float(x) for x in raw.get("step_seconds", ()))  # JSON gave lists back
    return TrialResult(**raw)


@contextlib.contextmanager
def _dead_owner(lock_path: Path) -> Iterator[bool]:
    """True (holding its lock meanwhile) when the spool's owner is gone."""
    with open(lock_path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pending(runs_dir: Path, study_name: str) -> Iterator[tuple[int, TrialResult, Path]]:
    """The results dead coordinators spooled and the storage never got: (trial number,
    result, file), in trial order. A file that cannot be read (cut by a full disk) stays."""
    root = spool_dir(runs_dir, study_name)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        with _dead_owner(root / f"{folder.name}.lock") as dead:
            if not dead:
                continue
            for path in sorted(folder.glob("trial-*.json")):
                try:
                    raw = json.loads(path.read_text())
                    item = int(raw["number"]), _result(raw["result"]), path
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                yield item
            with contextlib.suppress(OSError):  # all recorded: the dead owner's folder goes
                folder.rmdir()
                (root / f"{folder.name}.lock").unlink()


def replay(study: optuna.Study, runs_dir: Path,
           record: Callable[[optuna.Study, optuna.Trial, TrialResult], bool]) -> list[int]:
    """Record every spooled result of this study; returns the trial numbers recorded.

    ``record`` is the coordinator's own (tuner.study.record_result: False when the
    trial is already finished). A trial still RUNNING (its coordinator died before recording)
    gets its result; one failed by another process (found stale, :func:`failed_elsewhere`)
    gets it as a new trial; one already recorded is done.
    """
    done = []
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for number, result, path in pending(runs_dir, study.study_name):
        frozen = by_number.get(number)
        if frozen is None:
            continue  # another study's file under the same name: leave it
        if frozen.state == TrialState.RUNNING and record(study, optuna.Trial(study, trial_id(frozen)), result):
            done.append(number)
        elif recover_late(study, number, result):  # found stale, before or while it was recorded
            done.append(number)
        path.unlink(missing_ok=True)
    return done


def failed_elsewhere(frozen: optuna.trial.FrozenTrial, result: TrialResult) -> bool:
    """Whether a finished trial was failed by another process (found stale), not told this
    result: FAIL with status `lost` (or none, in older studies), or FAIL where the result would tell COMPLETE (a
    stale check that landed between the result's attrs and its tell leaves them set)."""
    if frozen.state != TrialState.FAIL:
        return False
    return frozen.user_attrs.get("status") in (None, LOST) or outcome(result).state == "COMPLETE"


def recover_late(study: optuna.Study, number: int, result: TrialResult) -> bool:
    """A result whose trial another coordinator failed as stale while it ran (a busy machine,
    a storage outage longer than the grace period): recorded as a new trial. False when the
    trial ended some other way (already recorded)."""
    trials = study.get_trials(deepcopy=False)
    frozen = next((t for t in trials if t.number == number), None)
    if frozen is None or not failed_elsewhere(frozen, result):
        return False
    if any(t.user_attrs.get("recovered_from") == number for t in trials):
        return False
    _add_recovered(study, frozen, result)
    return True


def _add_recovered(study: optuna.Study, frozen: optuna.trial.FrozenTrial, result: TrialResult) -> None:
    out = outcome(result)
    attrs = {k: v for k, v in frozen.user_attrs.items() if k in (*ROLE_ATTRS, "retry_of")}
    attrs.update(out.attrs)
    attrs["recovered_from"] = frozen.number
    # plain floats: the sim's numpy floats reach PostgreSQL's driver as `np.float64(...)` text
    # (tell converts them itself; add_trial does not)
    steps = {int(k): float(v) for k, v in out.steps}
    if out.state == "FAIL":
        trial = optuna.trial.create_trial(state=TrialState.FAIL, params=frozen.params,
                                          distributions=frozen.distributions, user_attrs=attrs,
                                          intermediate_values=steps)
    else:
        trial = optuna.trial.create_trial(value=float(out.value), params=frozen.params, distributions=frozen.distributions,
                                          user_attrs=attrs, intermediate_values=steps,
                                          constraints={"failed": out.failed})
    study.add_trial(trial)  # the ledger then charges the stale FAIL nothing (tuner.budget)
