"""The ask -> admit -> launch -> tell loop; creating, joining and resuming studies.

Any number of coordinators, on any nodes, may run the same study: the study (Optuna RDB
storage) is the only shared state. Budget admission happens under a storage-wide lock
(tuner.storage.admission_lock), so together they overspend by at most one trial. A trial
whose coordinator dies stops beating; `fail_stale_trials` turns it FAIL, its reservation
stays charged, and its config is retried once.

Example:
    >>> spec = load_spec("studies/quickstart.toml")                     # doctest: +SKIP
    >>> summary = run_study(spec, RunOptions(storage_url="sqlite:///tuner.db",
    ...                                      budget_gpu_seconds=180))   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import __version__
from tuner.analysis import fanova_importance
from tuner.budget import estimate_trial_cost, ledger_from_trials, trial_cap
from tuner.launch import Launcher, TrialRequest, TrialResult, get_launcher
from tuner.launch.adaptive import batch_means_ci
from tuner.record import study_record, trial_status
from tuner.sampling import make_sampler
from tuner.space import baseline_params, complete_params, suggest_params
from tuner.spec import StudySpec, spec_fingerprint
from tuner.storage import (GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, admission_lock, open_storage, redact_url,
                           with_retries)

__all__ = [
    "RunOptions", "RunSummary", "TrialEvent", "StudyConflictError", "open_study",
    "run_study", "study_status", "plan_ablation", "load_existing_study",
]

optuna.logging.set_verbosity(optuna.logging.WARNING)


class StudyConflictError(ValueError):
    """The study exists with another spec, or lacks what tuner needs; one readable message."""


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
    """Re-measure the best config and one-knob reverts after the search (issue: ablation)."""
    grace_period_s: int | None = None
    """Heartbeat age after which another coordinator's running trial counts as dead."""


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
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    study_name: str
    launched: int
    """Trials this coordinator ran."""
    statuses: dict[str, int]
    """Finished trials of the whole study by status."""
    used_gpu_seconds: float
    limit_gpu_seconds: float
    best: dict[str, Any] | None
    stopped: str
    """Why the loop ended: `budget`, `max_trials`, `interrupted`."""
    simulated: bool = False
    """Trials came from the sim launcher's performance model, not from real jobs."""


# --------------------------------------------------------------------------- the study

def _stale_trial_retry(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """A trial whose coordinator died: retry its config once, keeping its role."""
    if "retry_of" in trial.user_attrs:
        return
    attrs = {k: v for k, v in trial.user_attrs.items() if k in ("role", "ablation_knob")}
    attrs["retry_of"] = trial.number
    study.enqueue_trial(trial.params, user_attrs=attrs, skip_if_exists=False)


def open_study(spec: StudySpec, options: RunOptions) -> tuple[optuna.Study, float]:
    """Create or join the study; returns it and its budget limit in GPU-seconds.

    Raises:
        StudyConflictError: the name is taken by a study with another spec, or there is no
            budget anywhere (flag, spec or study).
        tuner.storage.StorageError: the storage cannot be opened.
    """
    name = options.study_name or spec.study.name
    spec_dict = spec.to_dict()
    fingerprint = spec_fingerprint(spec_dict)
    storage = open_storage(options.storage_url, stale_trial_callback=_stale_trial_retry,
                           grace_period_s=options.grace_period_s)
    sampler = make_sampler(spec)
    with admission_lock(storage, name):
        exists = name in {s.study_name for s in storage.get_all_studies()}
        if exists:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
            attrs = study.user_attrs
            if "spec_fingerprint" not in attrs:
                raise StudyConflictError(f"study {name!r} exists but was not created by tuner (no spec attr); choose another --study-name")
            if attrs["spec_fingerprint"] != fingerprint:
                raise StudyConflictError(
                    f"study {name!r} exists with another spec; use the same spec or another --study-name. "
                    f"Differences: {spec_diff(attrs['spec'], spec_dict)}")
            limit = float(attrs["budget_limit_gpu_seconds"])
            if options.budget_gpu_seconds is not None and options.budget_gpu_seconds != limit:
                limit = options.budget_gpu_seconds
                study.set_user_attr("budget_limit_gpu_seconds", limit)
            return study, limit
        limit = options.budget_gpu_seconds or spec.budget_gpu_seconds
        if limit is None:
            raise StudyConflictError(f"study {name!r}: no budget; pass --budget (e.g. 40gpuh) or set [budget] limit in the spec")
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    direction="maximize")
        launcher = spec.cluster.launcher
        for key, value in {"spec": spec_dict, "spec_fingerprint": fingerprint,
                           "budget_limit_gpu_seconds": float(limit), "launcher": launcher,
                           "simulated": launcher == "sim", "tuner_version": __version__,
                           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}.items():
            study.set_user_attr(key, value)
        base = baseline_params(spec)
        if base is not None:
            study.enqueue_trial(base, user_attrs={"role": "baseline"})
        return study, float(limit)


def spec_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> str:
    """`key: old -> new` for every leaf that differs, `; `-separated."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            inner = spec_diff(a, b, prefix=f"{path}.")
            if inner:
                diffs.append(inner)
        elif a != b:
            diffs.append(f"{path}: {json.dumps(a)} -> {json.dumps(b)}")
    return "; ".join(diffs)


# ---------------------------------------------------------------------------- the loop

class _Heartbeat:
    """Beats for one running trial so other coordinators can tell it is alive."""

    def __init__(self, storage: Any, trial_id: int, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self._storage, self._trial_id, self._interval_s = storage, trial_id, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{trial_id}")

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception:  # a database hiccup: the next beat retries
                pass

    def __enter__(self) -> _Heartbeat:
        with_retries(lambda: self._storage.record_heartbeat(self._trial_id), what="recording a heartbeat")
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _first_estimate(spec: StudySpec) -> float:
    if spec.trial.estimate_gpu_seconds is not None:
        return spec.trial.estimate_gpu_seconds
    return spec.trial.timeout_s * spec.cluster.world_size


def run_study(spec: StudySpec, options: RunOptions,
              on_event: Callable[[TrialEvent], None] | None = None,
              launcher: Launcher | None = None) -> RunSummary:
    """Run (or join, or resume) the study until its budget is spent.

    ``launcher`` defaults to the registry's launcher for the spec's [cluster] launcher.

    Ctrl-C stops the running trial, records it as FAIL with its GPU time, enqueues its config
    again so the next run resumes with it, and re-raises KeyboardInterrupt.
    """
    emit = on_event or (lambda event: None)
    study, limit = open_study(spec, options)
    storage = study._storage  # noqa: SLF001 - the RDB storage, for heartbeats and the lock
    raw_storage = getattr(storage, "_backend", storage)
    launcher = launcher or get_launcher(spec)
    name = study.study_name
    launched, stopped = 0, "budget"
    asked: list[optuna.Trial] = []  # see _admit
    waiting_on: set[int] = set()  # trials running elsewhere that this coordinator waits out
    grace = options.grace_period_s or GRACE_PERIOD_S

    def note(message: str) -> None:
        emit(TrialEvent(kind="note", used_gpu_seconds=_used(study, limit), limit_gpu_seconds=limit,
                        best_value=_best_value(study), message=message))

    if spec.study.ablation_share == 0:
        options = dataclasses.replace(options, ablation=False)
    search_limit = limit * (1.0 - spec.study.ablation_share) if options.ablation else limit
    try:
        while True:
            if options.max_trials is not None and launched >= options.max_trials:
                stopped = "max_trials"
                break
            admitted = with_retries(lambda: _admit(study, raw_storage, spec, limit, search_limit, options, asked),
                                    what="admitting a trial")
            if admitted is None:
                # Nothing fits now. A trial running elsewhere (another coordinator's, or a dead
                # one's until its heartbeat goes stale) may still free reserved budget or leave
                # a retry: wait for it, so that the study ends with no trial in flight.
                running = _running_elsewhere(study)
                if not running:
                    skipped = with_retries(lambda: _skip_unrunnable(study, raw_storage), what="closing the study")
                    if skipped:
                        note(f"budget spent: queued trial(s) {', '.join(map(str, skipped))} not run (status skipped)")
                    break
                if not running <= waiting_on:
                    launcher.close()  # an idle allocation goes back while we wait; launch takes a new one
                    note(f"budget reserved by trial(s) {', '.join(map(str, sorted(running)))} running elsewhere: "
                         f"waiting for them to end (a dead coordinator's trial goes stale {grace} s after its "
                         f"last heartbeat)")
                waiting_on |= running
                time.sleep(min(HEARTBEAT_INTERVAL_S, grace / 3))
                continue
            trial, params, reserved = admitted
            emit(TrialEvent(kind="start", number=trial.number, params=params,
                            used_gpu_seconds=_used(study, limit) , limit_gpu_seconds=limit,
                            best_value=_best_value(study)))
            request = TrialRequest(study_name=name, number=trial.number,
                                   params=complete_params(params, spec), spec=spec,
                                   run_dir=Path(options.runs_dir).resolve() / name / f"trial-{trial.number:04d}",
                                   seed=spec.study.seed + trial.number, max_gpu_seconds=reserved,
                                   # the baseline and ablation runs are references: measure them fully
                                   stop_below_tokens_per_sec_per_gpu=(
                                       None if trial.user_attrs.get("role") else _best_lower_bound(study, spec)))
            t0 = time.monotonic()
            try:
                # beat well inside the grace period other coordinators judge us by
                with _Heartbeat(raw_storage, trial._trial_id, min(HEARTBEAT_INTERVAL_S, grace / 3)):  # noqa: SLF001
                    result = launcher.launch(request)
            except KeyboardInterrupt:
                gpu_s = spec.cluster.world_size * (time.monotonic() - t0)
                _record_interrupted(study, trial, gpu_s, "interrupted (Ctrl-C); retried on the next run")
                stopped = "interrupted"
                raise
            except Exception as exc:  # the launcher itself broke (e.g. no Slurm allocation)
                _record_interrupted(study, trial, 0.0, f"launcher failed: {exc}")
                raise
            launched += 1
            with_retries(lambda: _record(study, trial, result), what=f"recording trial {trial.number}")
            emit(TrialEvent(kind="end", number=trial.number, params=params, result=result,
                            used_gpu_seconds=_used(study, limit), limit_gpu_seconds=limit,
                            best_value=_best_value(study)))
    finally:
        launcher.close()
        if stopped == "interrupted":
            emit(TrialEvent(kind="stop", message="interrupted: run the same command again to resume"))
    return summarize(study, launched=launched, stopped=stopped)


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
    storage = study._storage  # noqa: SLF001
    with admission_lock(raw_storage, study.study_name):
        trials = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
        if any(t.state == TrialState.RUNNING for t in trials):
            return []  # another coordinator just started one; it ends the study
        for t in trials:
            what = t.user_attrs.get("role") or ("retry" if "retry_of" in t.user_attrs else "queued")
            attrs = {"status": "skipped", "gpu_seconds": 0.0,
                     "message": f"not run: the budget was spent before this {what} run"}
            for key, value in attrs.items():
                storage.set_trial_user_attr(t._trial_id, key, value)  # noqa: SLF001
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)  # noqa: SLF001
    return [t.number for t in trials]


def _fail_stale_trials(study: optuna.Study) -> None:
    # tuner drives trials with ask/tell and beats for them itself (RDB heartbeats alone only
    # protect Study.optimize), so the stale check is ours to call; it is marked experimental.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _admit(study: optuna.Study, raw_storage: Any, spec: StudySpec, limit: float,
           search_limit: float, options: RunOptions, asked: list[optuna.Trial]):
    """Under the admission lock: check the budget, ask, reserve. None when nothing fits.

    ``asked`` carries trials across retries: one asked for by an attempt that a dropped
    connection cut short is RUNNING with nobody to run it, so the next attempt fails it (and
    re-enqueues its config once) before asking again.
    """
    while asked:
        _abandon_admission(study, asked[0])
        asked.pop(0)
    with admission_lock(raw_storage, study.study_name):
        # under the lock: two coordinators never both fail (and retry) one dead trial (SQLite
        # has no row locks), and a retry is enqueued before the ledger is read
        _fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        ledger = ledger_from_trials(trials, limit)
        estimate = estimate_trial_cost(ledger.measured_costs, first_estimate_gpu_seconds=_first_estimate(spec))
        waiting = any(t.state == TrialState.WAITING for t in trials)
        if options.ablation and study.user_attrs.get("ablation_planned"):
            if not waiting:  # the search is over and its ablation runs are done
                return None
        elif ledger.used_gpu_seconds + estimate > search_limit and not waiting:
            if not options.ablation or not _plan_ablation_once(study, spec, trials):
                return None
        cap = trial_cap(ledger, estimate)
        if cap is None:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Heartbeat ... used with Study.optimize"
            trial = study.ask()
        asked.append(trial)
        # a beat at once: if this process dies before launching, the trial goes stale
        raw_storage.record_heartbeat(trial._trial_id)  # noqa: SLF001
        params = suggest_params(trial, spec)
        trial.set_user_attr("reserved_gpu_seconds", float(cap))
        trial.set_user_attr("estimated_gpu_seconds", float(estimate))
        trial.set_user_attr("launcher", spec.cluster.launcher)
        asked.clear()
        return trial, params, cap


def _abandon_admission(study: optuna.Study, trial: optuna.Trial) -> None:
    """FAIL a trial whose admission a storage error cut short; it never ran, costs nothing."""
    if study._storage.get_trial(trial._trial_id).state.is_finished():  # noqa: SLF001
        return
    trial.set_user_attr("gpu_seconds", 0.0)
    trial.set_user_attr("message", "admission cut short by a storage error; never launched")
    study.tell(trial, state=TrialState.FAIL)
    _stale_trial_retry(study, study._storage.get_trial(trial._trial_id))  # noqa: SLF001


def plan_ablation(spec: StudySpec, best_params: dict[str, Any], baseline: dict[str, Any],
                  order: Sequence[str] = ()) -> list[tuple[str | None, dict[str, Any]]]:
    """The ablation runs: (None, best) then (knob, best with that knob set to the baseline's).

    Knobs go in ``order`` first (the search's fANOVA ranking, so that a budget that runs out
    mid-ablation has measured the knobs that matter), then the rest in the spec's order.
    Knobs already at the baseline's value need no run. Reverting `num_workers` to 0 drops
    `prefetch_factor`; reverting `prefetch_factor` when the baseline has no workers is not a
    one-knob change, so it is skipped.
    """
    runs: list[tuple[str | None, dict[str, Any]]] = [(None, dict(best_params))]
    knobs = [k for k in order if k in spec.knob_names]
    for knob in [*knobs, *(k for k in spec.knob_names if k not in knobs)]:
        if knob not in baseline or best_params.get(knob) == baseline[knob]:
            continue
        params = dict(best_params)
        params[knob] = baseline[knob]
        if knob == "num_workers" and baseline[knob] == 0:
            params.pop("prefetch_factor", None)
        if knob == "num_workers" and baseline[knob] > 0 and "prefetch_factor" not in params:
            params["prefetch_factor"] = baseline.get("prefetch_factor", 2)
        runs.append((knob, params))
    return runs


def _plan_ablation_once(study: optuna.Study, spec: StudySpec, trials) -> bool:
    """Enqueue the ablation runs (once per study). False when there is nothing to ablate."""
    if study.user_attrs.get("ablation_planned"):
        return False
    study.set_user_attr("ablation_planned", True)
    base = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                 and t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"), None)
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.user_attrs.get("role") != "ablation"]
    if base is None or not ok:
        return False
    best = max(ok, key=lambda t: t.value)
    search = [r for r in study_record(study).trials if r.role is None]
    order = [d["knob"] for d in fanova_importance(search, spec.knob_names, n_boot=0)
             if d["fanova"] is not None]
    runs = plan_ablation(spec, best.params, base.params, order)
    for knob, params in runs:
        attrs = {"role": "ablation", "ablation_of": best.number}
        if knob is not None:
            attrs["ablation_knob"] = knob
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)
    return True


def _record(study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
    if study._storage.get_trial(trial._trial_id).state.is_finished():  # noqa: SLF001
        return  # retried after a dropped connection, but the first tell had landed
    for step, value in result.step_values:
        trial.report(value, step)
    attrs = {"status": result.status, "gpu_seconds": result.gpu_seconds,
             "wall_seconds": result.wall_seconds, "world_size": result.world_size,
             "launcher": result.launcher, "peak_mem_gib": result.peak_mem_gib,
             "data_wait_frac": result.data_wait_frac, "startup_seconds": result.startup_seconds,
             "log_path": result.log_path, "message": result.message}
    for key, value in result.extra.items():
        attrs.setdefault(key, value)
    for key, value in attrs.items():
        if value is not None and value != "":
            trial.set_user_attr(key, _jsonable(value))
    if result.extra.get("slurm_failure") or result.extra.get("infrastructure_failure"):
        # Node failure, preemption, an allocation that never came: not the config's fault, so
        # no constraint that would steer the sampler away; FAIL, charged, retried once.
        study.tell(trial, state=TrialState.FAIL)
        _stale_trial_retry(study, study._storage.get_trial(trial._trial_id))  # noqa: SLF001
        return
    value = result.tokens_per_sec_per_gpu
    # A failed trial is COMPLETE with value 0 and a violated constraint: samplers learn to
    # avoid its region (FAIL trials are ignored by TPE), and best_trial never picks it.
    trial.set_constraint("failed", 0.0 if value is not None else 1.0)
    study.tell(trial, value if value is not None else 0.0)


def _record_interrupted(study: optuna.Study, trial: optuna.Trial, gpu_seconds: float, message: str) -> None:
    """The trial did not finish through no fault of its config: FAIL, charged, retried once."""
    try:
        trial.set_user_attr("gpu_seconds", gpu_seconds)
        trial.set_user_attr("message", message)
        study.tell(trial, state=TrialState.FAIL)
        _stale_trial_retry(study, study._storage.get_trial(trial._trial_id))  # noqa: SLF001
    except Exception:  # the interrupt wins; a stale-trial check cleans up later
        pass


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _used(study: optuna.Study, limit: float) -> float:
    trials = with_retries(lambda: study.get_trials(deepcopy=False), what="reading the ledger")
    return ledger_from_trials(trials, limit).used_gpu_seconds


def _best_lower_bound(study: optuna.Study, spec: StudySpec) -> float | None:
    """The best ok trial's 95% CI lower bound (for adaptive measurement), or None."""
    if not spec.trial.adaptive:
        return None
    bounds = []
    for t in with_retries(lambda: study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
                          what="reading finished trials"):
        if t.user_attrs.get("status") == "ok":
            ci = batch_means_ci([t.intermediate_values[k] for k in sorted(t.intermediate_values)])
            if ci is not None:
                bounds.append(ci[1])
    return max(bounds) if bounds else None


def _best_value(study: optuna.Study) -> float | None:
    try:
        return with_retries(lambda: study.best_value, what="reading the best value")
    except ValueError:
        return None


# -------------------------------------------------------------------------- read-outs

def summarize(study: optuna.Study, *, launched: int = 0, stopped: str = "") -> RunSummary:
    trials = study.get_trials(deepcopy=False)
    limit = float(study.user_attrs.get("budget_limit_gpu_seconds", 0.0))
    statuses = Counter(trial_status(t) for t in trials
                       if t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING))
    best = None
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"]
    if ok:
        b = max(ok, key=lambda t: t.value)
        best = {"trial": b.number, "tokens_per_sec_per_gpu": b.value, "params": b.params,
                "role": b.user_attrs.get("role")}
    return RunSummary(study_name=study.study_name, launched=launched, statuses=dict(statuses),
                      used_gpu_seconds=ledger_from_trials(trials, limit).used_gpu_seconds,
                      limit_gpu_seconds=limit, best=best, stopped=stopped,
                      simulated=bool(study.user_attrs.get("simulated", False)))


def load_existing_study(storage: str | Any, study_name: str) -> optuna.Study:
    """Load a study for reading from a URL or an open storage.

    Raises:
        StudyConflictError: no study has that name; the message names the (redacted)
            storage and the studies it does hold.
    """
    store = open_storage(storage, heartbeat=False, create_tables=False) if isinstance(storage, str) else storage
    try:
        return optuna.load_study(study_name=study_name, storage=store)
    except KeyError:
        where = redact_url(storage) if isinstance(storage, str) else type(storage).__name__
        names = sorted(s.study_name for s in store.get_all_studies())
        there = f"studies there: {', '.join(names)}" if names else "it holds no study"
        raise StudyConflictError(f"no study named {study_name!r} in {where} ({there})") from None


def study_status(storage_url: str, study_name: str | None = None) -> list[RunSummary]:
    """Summaries of one study, or of every study in the storage."""
    if study_name:
        return [summarize(load_existing_study(storage_url, study_name))]
    storage = open_storage(storage_url, heartbeat=False, create_tables=False)
    return [summarize(optuna.load_study(study_name=s.study_name, storage=storage))
            for s in storage.get_all_studies()]
