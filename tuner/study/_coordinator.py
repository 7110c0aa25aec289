"""The ask -> admit -> launch -> tell loop: locks, heartbeats and retries around the
scheduling core (tuner.budget), the study's lifecycle (tuner.study) and ablation
planning (tuner.study).

Budget admission happens under a storage-wide lock (tuner.storage.admission_lock), so
coordinators sharing a study overspend by at most one trial. A trial whose coordinator dies
stops beating; Optuna's stale-trial check turns it FAIL, its reservation stays charged, and
its config is retried once.

Example:
    >>> spec = load_spec("studies/quickstart.toml")                     # doctest: +SKIP
    >>> summary = run_study(spec, RunOptions(storage_url="sqlite:///tuner.db",
    ...                                      budget_gpu_seconds=180))   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from threadpoolctl import threadpool_limits

import tuner.study._spool as spool
from tuner import budget
from tuner.budget import ledger_from_trials
from tuner.errors import SpecError
from tuner.launch import Launcher, TrialRequest, TrialResult, get_launcher
from tuner.measurement import batch_means_ci
from tuner.spec import StudySpec, study_name_problem, unknown_gpu_note
from tuner.storage import (
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    admission_lock,
    end_if_waiting,
    end_unrun,
    open_storage,
    rdb_storage,
    retry_notes,
    study_storage,
    trial_id,
    with_retries,
    write_trial,
)
from tuner.study._admission import admit, finished
from tuner.study._breaker import DEFAULT_LIMIT, CircuitBreaker
from tuner.study._heartbeat import Heartbeat, HeartbeatLost
from tuner.study._interrupts import deferred_interrupt
from tuner.study._lifecycle import RunSummary, check_joinable, open_study, retry_once, summarize
from tuner.study._outcome import INTERRUPTED, Outcome, adaptive_bar, label_budget_stop, launch_gpus, outcome
from tuner.study._preflight import check_runs_dir, needs_preflight, preflight

__all__ = ["RunOptions", "TrialEvent", "run_study", "record_result", "end_unrun"]

@dataclass(frozen=True, kw_only=True)
class RunOptions:
    storage_url: str
    """SQLAlchemy URL of the Optuna storage."""
    study_name: str | None = None
    """Defaults to the spec's [study] name."""
    budget_gpu_seconds: float | None = None
    """Overrides the spec's [budget] limit (and the study's, when joining)."""
    runs_dir: Path = Path("runs")
    """Per-trial folders (config, result file, log)."""
    max_trials: int | None = None
    """Stop after launching this many trials (None: until the budget is spent)."""
    ablation: bool = True
    """Re-measure the best config and one-knob reverts after the search (tuner.study)."""
    grace_period_s: int | None = None
    """Heartbeat age after which another coordinator's running trial counts as dead."""
    max_same_errors: int = DEFAULT_LIMIT
    """Stop the study after this many consecutive trials fail with the same error (tuner.study); 0: never."""
    preflight: bool = True
    """Load the data, tokenizer and model config before any trial (tuner.study)."""


@dataclass(frozen=True, kw_only=True)
class TrialEvent:
    """Progress, for the CLI's bar; the coordinator itself prints nothing."""

    kind: str
    """`start`, `end`, `stop` or `note`."""
    number: int | None = None
    params: dict[str, Any] | None = None
    result: TrialResult | None = None
    used_gpu_seconds: float = 0.0
    limit_gpu_seconds: float = 0.0
    best_value: float | None = None
    best_ci: tuple[float, float] | None = None
    """The best ok trial's 95% batch-means CI (tuner.measurement)."""
    reserved_gpu_seconds: float | None = None
    """`start`: what the trial holds of the budget (counted in ``used_gpu_seconds``)."""
    gpus: int = 0
    """`start`: GPUs the trial runs on, for its live cost."""
    result_path: str | None = None
    """`start`: the result file the trial appends a line to per measured step."""
    planned_steps: int = 0
    message: str = ""


def run_study(spec: StudySpec, options: RunOptions,
              on_event: Callable[[TrialEvent], None] | None = None,
              launcher: Launcher | None = None) -> RunSummary:
    """Run (or join, or resume) the study until its budget is spent.

    ``launcher`` defaults to the registry's launcher for the spec's [cluster] launcher.

    Ctrl-C stops the running trial, records it as FAIL with its GPU time, enqueues its config
    again so the next run resumes with it, and re-raises KeyboardInterrupt.
    """
    # One BLAS thread: the coordinator's linear algebra is small (the sampler's GP over a few
    # hundred trials), and more threads only spin (the 7B rehearsal: 58 CPU s against 23 s,
    # docs/benchmarks.md). Trials are other processes: their threads are their own.
    with threadpool_limits(limits=1, user_api="blas"):
        return _run_study(spec, options, on_event, launcher)


def _run_study(spec: StudySpec, options: RunOptions, on_event: Callable[[TrialEvent], None] | None,
               launcher: Launcher | None) -> RunSummary:
    emit = on_event or (lambda event: None)
    name = spec.study.name if options.study_name is None else options.study_name
    problem = study_name_problem(name)
    if problem:  # before anything is written
        raise SpecError(f"--study-name: {problem}")
    runs_dir = check_runs_dir(Path(options.runs_dir).resolve() / name)  # before a trial could fail on it
    launcher = launcher or get_launcher(spec)
    if (note := unknown_gpu_note(spec.cluster.gpu)):
        emit(TrialEvent(kind="note", message=note))
    if options.preflight and needs_preflight(spec, simulated=launcher.simulated):
        storage = open_storage(options.storage_url, heartbeat=False)  # a bad storage first: it is quicker,
        try:
            check_joinable(storage, name, spec)  # and so is a study of this name with another spec
        finally:
            storage.engine.dispose()
        emit(TrialEvent(kind="note", message=preflight(spec, launcher=launcher.name or None)))
    study, limit = open_study(spec, storage_url=options.storage_url, study_name=options.study_name,
                              budget_gpu_seconds=options.budget_gpu_seconds,
                              grace_period_s=options.grace_period_s)
    raw_storage = rdb_storage(study)
    launched, stopped = 0, "budget"
    asked: list[optuna.Trial] = []  # see tuner.study.admit
    waiting_on: set[int] = set()  # trials running elsewhere that this coordinator waits out
    grace = options.grace_period_s or GRACE_PERIOD_S
    breaker = CircuitBreaker(options.max_same_errors)
    recovered = with_retries(lambda: spool.replay(study, runs_dir.parent, record_result),
                             what="recording spooled results")
    if recovered:
        emit(TrialEvent(kind="note", message=f"recorded trial(s) {', '.join(map(str, recovered))} from the "
                                             f"local spool (finished while the storage was away)"))
    own_spool = spool.Spool(runs_dir.parent, name)

    def read() -> list[optuna.trial.FrozenTrial]:
        return with_retries(lambda: study.get_trials(deepcopy=False), what="reading the study")

    def event(kind: str, trials: list[optuna.trial.FrozenTrial] | None = None, ledger: list[Any] | None = None,
              **kw: Any) -> TrialEvent:
        trials = read() if trials is None else trials  # one read
        best_value, best_ci = _best(trials)
        used = ledger_from_trials(trials if ledger is None else ledger, limit).used_gpu_seconds
        return TrialEvent(kind=kind, used_gpu_seconds=used,
                          limit_gpu_seconds=limit,
                          best_value=best_value, best_ci=best_ci, **kw)

    if spec.study.ablation_share == 0:
        options = dataclasses.replace(options, ablation=False)
    limits = (limit, budget.search_limit(limit, spec.study.ablation_share, ablation=options.ablation))
    cleanup = contextlib.ExitStack()
    try:
        # storage retries say so on the progress display while they wait (tuner.storage)
        cleanup.enter_context(retry_notes(lambda m: emit(TrialEvent(kind="note", message=m, limit_gpu_seconds=limit))))
        while True:
            if options.max_trials is not None and launched >= options.max_trials:
                stopped = "max_trials"
                break
            try:
                with deferred_interrupt() as interrupt:  # a Ctrl-C here strands no trial
                    admitted = with_retries(lambda: admit(study, raw_storage, spec, limits, options.ablation, asked,
                                                          launcher), what="admitting a trial")
            except KeyboardInterrupt:  # twice: at once
                stopped = "interrupted"
                raise
            if interrupt.fired:
                if admitted is not None:  # admitted, never launched: failed as interrupted, queued again
                    _record_interrupted(study, admitted.trial, 0.0, "interrupted (Ctrl-C) before its launch; retried "
                                                                 "on the next run")
                stopped = "interrupted"
                raise KeyboardInterrupt("interrupted while admitting a trial")
            if admitted is None:
                # Nothing fits now. A trial running elsewhere (another coordinator's, or a dead
                # one's until its heartbeat goes stale) may still free reserved budget or leave
                # a retry: wait for it, so that the study ends with no trial in flight.
                running = _running_elsewhere(study)
                if not running:
                    skipped = with_retries(lambda: _skip_unrunnable(study, raw_storage), what="closing the study")
                    if skipped:
                        emit(event("note", message=f"budget spent: queued trial(s) {', '.join(map(str, skipped))} "
                                                   "not run (status skipped)"))
                    if study.user_attrs.get("search_exhausted"):  # every config ran (tuner.search)
                        stopped = "search exhausted"
                    break
                if not running <= waiting_on:
                    launcher.close()  # an idle allocation goes back while we wait; launch takes a new one
                    emit(event("note", message=(
                        f"budget reserved by trial(s) {', '.join(map(str, sorted(running)))} running elsewhere: "
                        f"waiting for them to end (a dead coordinator's trial goes stale {grace} s after its "
                        "last heartbeat)")))
                waiting_on |= running
                time.sleep(min(HEARTBEAT_INTERVAL_S, grace / 3))
                continue
            trial, params, full_params, reserved, cap_basis, now, ledger = admitted
            # the start's line: the finished trials the admission read, its ledger with this reservation
            emit(event("start", trials=now, ledger=ledger, number=trial.number, params=params, reserved_gpu_seconds=reserved,
                       gpus=launch_gpus(spec), planned_steps=spec.trial.measure_steps,
                       result_path=str(runs_dir / f"trial-{trial.number:04d}" / "result.jsonl")))
            request = TrialRequest(study_name=name, number=trial.number,
                                   params=full_params, spec=spec,
                                   run_dir=runs_dir / f"trial-{trial.number:04d}",
                                   seed=spec.study.seed + trial.number, max_gpu_seconds=reserved,
                                   stop_below_tokens_per_sec_per_gpu=adaptive_bar(study, spec, now,
                                                                                  run=trial.user_attrs))
            t0 = time.monotonic()
            # beat well inside the grace period other coordinators judge us by; stop the trial
            # ourselves before they would count it dead (tuner.study's heartbeat)
            heartbeat = Heartbeat(raw_storage, trial_id(trial), min(HEARTBEAT_INTERVAL_S, grace / 3),
                                  gpus=launch_gpus(spec), reserved_gpu_seconds=reserved, grace_period_s=grace,
                                  note=lambda m: emit(TrialEvent(kind="note", message=m, limit_gpu_seconds=limit)))
            try:
                with heartbeat:
                    result = launcher.launch(request)
            except HeartbeatLost:
                launched += heartbeat.started
                lost = heartbeat.lost or HeartbeatLost("its heartbeat was lost")
                if not lost.failed_elsewhere:  # FAIL it ourselves, charged, retried once (waits out an outage)
                    _record_stopped(study, trial, launch_gpus(spec) * (time.monotonic() - t0), lost, heartbeat.failures)
                emit(event("note", message=f"trial {trial.number} stopped: {lost}"))
                continue
            except KeyboardInterrupt:
                gpu_s = spec.cluster.world_size * (time.monotonic() - t0)
                _record_interrupted(study, trial, gpu_s, "interrupted (Ctrl-C); retried on the next run")
                stopped = "interrupted"
                raise
            except Exception as exc:  # the launcher itself broke (e.g. no Slurm allocation)
                _record_interrupted(study, trial, 0.0, f"launcher failed: {exc}")
                raise
            launched += 1
            if heartbeat.failures:
                result = dataclasses.replace(result, extra={**result.extra, "heartbeat_failures": heartbeat.failures})
            result = label_budget_stop(result, reserved_gpu_seconds=reserved, cap_basis_gpu_seconds=cap_basis,
                                       timeout_s=spec.trial.timeout_s)
            _record_spooled(study, trial, result, own_spool)
            emit(event("end", number=trial.number, params=params, result=result))
            breaker.observe(trial.number, result.status, result.message, params)
    finally:
        cleanup.close()
        own_spool.close()
        launcher.close()
        if stopped == "interrupted":
            emit(TrialEvent(kind="stop", message="interrupted: run the same command again to resume"))
    return summarize(study, launched=launched, stopped=stopped)


def _record_spooled(study: optuna.Study, trial: optuna.Trial, result: TrialResult, own_spool: spool.Spool) -> None:
    """Record a finished trial; its result waits in the local spool (tuner.study) until the
    storage has it, so an outage longer than the retries, or a crash, never loses it. A full
    disk does not stop the recording; the spool is tried again before each retry, so a result
    held through an outage is on disk as soon as the disk has room."""
    kept = _spool_put(own_spool, trial.number, result)

    def record() -> bool:
        nonlocal kept
        if kept is None:
            kept = _spool_put(own_spool, trial.number, result)
        return record_result(study, trial, result)

    if not with_retries(record, what=f"recording trial {trial.number}"):
        with_retries(lambda: spool.recover_late(study, trial.number, result), what=f"recovering trial {trial.number}")
    if kept is not None:
        kept.unlink(missing_ok=True)


def _spool_put(own_spool: spool.Spool, number: int, result: TrialResult) -> Path | None:
    try:
        return own_spool.put(number, result)
    except OSError:  # a full disk: record it anyway
        return None


def _record_stopped(study: optuna.Study, trial: optuna.Trial, gpu_seconds: float, lost: HeartbeatLost,
                    heartbeat_failures: int) -> None:
    """A trial its heartbeat stopped: `interrupted`, charged, retried once, recorded through an
    outage (with retries); a peer that finds it stale first has failed it `lost` instead."""
    with_retries(lambda: _record_interrupted(study, trial, gpu_seconds, f"stopped by its coordinator: {lost}; "
                                             "retried once", heartbeat_failures=heartbeat_failures, quiet=False),
                 what=f"recording trial {trial.number}")


def _running_elsewhere(study: optuna.Study) -> set[int]:
    """Numbers of RUNNING trials; called when this coordinator runs none, so they are others'."""
    trials = with_retries(lambda: study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)),
                          what="reading running trials")
    return {t.number for t in trials}


def _skip_unrunnable(study: optuna.Study, raw_storage: Any) -> list[int]:
    """End the WAITING trials nobody can run: the budget is spent and no trial is in flight.

    They are ablation runs or retries queued before the budget ran out. Left WAITING they
    would sit in the study (and the dashboard) forever; they become FAIL with status
    `skipped`, no GPU time and a message, which analysis leaves out. Returns their numbers.
    """
    with admission_lock(raw_storage, study.study_name):
        trials = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
        if any(t.state == TrialState.RUNNING for t in trials):
            return []  # another coordinator just started one; it ends the study
        ended = []
        for t in trials:
            what = t.user_attrs.get("role") or ("retry" if "retry_of" in t.user_attrs else "queued")
            # only while still WAITING: another coordinator's ask pops queued runs outside the
            # lock, and one it popped meanwhile is its to run (ended here, its reservation failed)
            if end_if_waiting(study, t, "skipped", f"not run: the budget was spent before this {what} run"):
                ended.append(t.number)
    return ended


def record_result(study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> bool:
    """Tell the study a launcher's result (tuner.study.outcome says how). False when the
    trial is already finished: a retry after a dropped connection whose first tell landed, or
    a trial another coordinator found stale before or while this records it (then
    tuner.study.recover_late keeps the result)."""
    if finished(study, trial):
        return False
    try:
        _tell(study, trial, outcome(result))
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError):  # ValueError: "Cannot tell a FAIL trial"
        if finished(study, trial):
            return False
        raise
    return True


def _tell(study: optuna.Study, trial: optuna.Trial, out: Outcome) -> None:
    # one transaction (tuner.storage): the values, the attrs and, for a finished run, the
    # `failed` constraint that Optuna's samplers read
    write_trial(study, trial, steps=out.steps, user_attrs=out.attrs,
                constraints=None if out.state == "FAIL" else {"failed": out.failed})
    if out.state == "FAIL":
        _fail(study, trial, retry=out.retry)
        return
    study.tell(trial, out.value)


def _fail(study: optuna.Study, trial: optuna.Trial, *, retry: bool) -> None:
    """FAIL a trial and enqueue its retry under the admission lock, which the lost-retry sweep
    also holds (tuner.study.enqueue_lost_retries): it never sees the FAIL without the retry."""
    with admission_lock(rdb_storage(study), study.study_name):
        study.tell(trial, state=TrialState.FAIL)
        if retry:
            retry_once(study, study_storage(study).get_trial(trial_id(trial)))


def _record_interrupted(study: optuna.Study, trial: optuna.Trial, gpu_seconds: float, message: str, *,
                        heartbeat_failures: int = 0, quiet: bool = True) -> None:
    """The trial did not finish through no fault of its config: FAIL with status
    `interrupted` and ``message``, charged, retried once. Nothing when it is already finished
    (another coordinator found it stale meanwhile: it is `lost`, and retried). ``quiet``:
    storage errors are swallowed (the interrupt wins; a stale-trial check cleans up later)."""
    try:
        if finished(study, trial):
            return
        attrs = {"gpu_seconds": gpu_seconds, "status": INTERRUPTED, "message": message}
        if heartbeat_failures:
            attrs["heartbeat_failures"] = heartbeat_failures
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        _fail(study, trial, retry=True)
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError):  # failed elsewhere meanwhile
        pass
    except Exception:
        if not quiet:
            raise


def _best(trials: list[optuna.trial.FrozenTrial]) -> tuple[float | None, tuple[float, float] | None]:
    """The best ok trial's tokens/s/GPU and its 95% CI (None, None before any)."""
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.value is not None]
    if not ok:
        return None, None
    best = max(ok, key=lambda t: t.value)
    ci = batch_means_ci([best.intermediate_values[k] for k in sorted(best.intermediate_values)])
    return best.value, (ci.low, ci.high) if ci is not None else None
