"""The study's lifecycle: create, join, load, summarise. No trial runs here.

Any number of coordinators, on any nodes, may run the same study: the study (Optuna RDB
storage) is the only shared state. Its user attrs hold the spec, its fingerprint and the
budget, so any process can join it (docs/contracts.md).

Example:
    >>> spec = load_spec("studies/quickstart.toml")                                  # doctest: +SKIP
    >>> study, limit = open_study(spec, storage_url="sqlite:///tuner.db",
    ...                           budget_gpu_seconds=180)                          # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.budget import ledger_from_trials
from tuner.errors import BudgetError, StudyConflictError
from tuner.search import coordinator_seed, make_sampler
from tuner.spec import StudySpec, baseline_params, spec_fingerprint
from tuner.stats import ROLE_ATTRS, trial_status
from tuner.storage import admission_lock, load_existing_study, open_storage
from tuner.study._outcome import NO_RESULT, infrastructure_failure

__all__ = ["RunSummary", "StudyConflictError", "open_study", "spec_diff", "retry_once", "enqueue_lost_retries", "owed_retries",
           "summarize", "load_existing_study", "study_status"]

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """Where a study stands: what `tuner run` prints at the end and `tuner status` prints."""

    study_name: str
    """The Optuna study name."""
    launched: int = 0
    """Trials this coordinator ran."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Finished trials of the whole study by status."""
    used_gpu_seconds: float = 0.0
    """GPU time charged to the budget (tuner.budget's rule)."""
    limit_gpu_seconds: float = 0.0
    """The budget limit."""
    best: dict[str, Any] | None = None
    """The best ok trial: number, tokens/s/GPU, params, role; None before any."""
    stopped: str = ""
    """Why the loop ended: `budget`, `max_trials`, `interrupted`, `search exhausted` (every config ran)."""
    simulated: bool = False
    """Trials came from the sim launcher's performance model, not from real jobs."""
    recommendation: dict[str, Any] | None = None
    """What `tuner analyze`/`report` last recommended (the study attr ``recommendation``), or None."""


def retry_once(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Enqueue a trial's config again, keeping why it ran (tuner.stats.ROLE_ATTRS), unless it
    is itself a retry that launched: a config that kills its coordinator must not loop.

    For trials that ended through no fault of their config: a dead coordinator (Optuna's
    stale-trial callback), Ctrl-C, a node failure, an admission a storage error cut short
    (user attr `never_launched`; such a retry is queued again, it never ran).
    """
    params = _retry_params(trial)
    if _launched_retry(trial.user_attrs) or params is None:
        return
    attrs = {k: v for k, v in trial.user_attrs.items() if k in ROLE_ATTRS}
    attrs["retry_of"] = trial.number
    study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)


def _launched_retry(attrs: dict[str, Any]) -> bool:
    return "retry_of" in attrs and not attrs.get("never_launched")


def _retry_params(trial: optuna.trial.FrozenTrial) -> dict[str, Any] | None:
    """The config a retry runs: the trial's params, or a queued run's fixed ones; None for a
    search proposal cut off before it had a config (nothing to retry: the sampler's next ask
    proposes afresh, screened, where an empty retry would take an unscreened config)."""
    params = trial.params or trial.system_attrs.get("fixed_params") or {}
    return params if params else None


def _wants_retry(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a finished trial ended through no fault of its config and earns a retry
    (:func:`retry_once`'s rule): FAIL with no result (found stale, Ctrl-C, an admission cut
    short: status `lost` or `interrupted`) or an infrastructure failure (tuner.study.outcome), not a recovered copy."""
    a = trial.user_attrs
    if trial.state != TrialState.FAIL or "recovered_from" in a or _launched_retry(a) or _retry_params(trial) is None:
        return False
    return a.get("status") in NO_RESULT or infrastructure_failure(a)


def owed_retries(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The finished trials that earn a retry (:func:`_wants_retry`) and have none queued or
    recovered: what :func:`enqueue_lost_retries` queues. Read-only, so a coordinator asks it
    outside the admission lock and takes the lock only when it is not empty."""
    covered = {t.user_attrs.get(k) for t in trials for k in ("retry_of", "recovered_from")} - {None}
    return [t for t in trials if _wants_retry(t) and t.number not in covered]


def enqueue_lost_retries(study: optuna.Study, trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """Queue the retries that were owed but never enqueued; returns the trials retried.

    A retry is enqueued just after its trial's FAIL, in another statement: a coordinator that
    dies, or a storage that goes away, between the two leaves the config unretried (Optuna's
    stale-trial callback runs after the FAIL is committed, so a failed callback is not run
    again). Call it under the admission lock, which every FAIL-and-retry also holds
    (tuner.study, tuner.study), so it never sees one half done. A trial whose result
    a spool recovered (user attr `recovered_from` on another trial) lost nothing.
    """
    done = []
    for t in owed_retries(trials):
        retry_once(study, t)
        done.append(t.number)
    return done


def _creation_attrs(spec: StudySpec, spec_dict: dict[str, Any], fingerprint: str, limit: float) -> dict[str, Any]:
    from tuner import __version__

    launcher = spec.cluster.launcher
    return {"spec": spec_dict, "spec_fingerprint": fingerprint, "budget_limit_gpu_seconds": float(limit),
            "launcher": launcher, "simulated": launcher == "sim", "tuner_version": __version__,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def open_study(spec: StudySpec, *, storage_url: str, study_name: str | None = None,
               budget_gpu_seconds: float | None = None,
               grace_period_s: int | None = None) -> tuple[optuna.Study, float]:
    """Create or join the study; returns it and its budget limit in GPU-seconds.

    A new study gets the spec, its fingerprint and the budget as user attrs, and the
    baseline enqueued first. Joining checks the fingerprint; a budget given here replaces the
    stored one.

    Raises:
        StudyConflictError: the name is taken by a study with another spec, or there is no
            budget anywhere (flag, spec or study).
        tuner.errors.BudgetError: a new study's budget is less than one trial's estimate, or a
            resumed study's new budget is less than it has used.
        tuner.errors.StorageError: the storage cannot be opened.
    """
    name = spec.study.name if study_name is None else study_name
    spec_dict = spec.to_dict()
    fingerprint = spec_fingerprint(spec_dict)
    storage = open_storage(storage_url, stale_trial_callback=retry_once, grace_period_s=grace_period_s)
    with admission_lock(storage, name):
        exists = name in {s.study_name for s in storage.get_all_studies()}
        if exists:
            study = optuna.load_study(study_name=name, storage=storage, sampler=make_sampler(spec))
            attrs = study.user_attrs
            _check_same_spec(name, attrs, spec_dict, fingerprint)
            limit = float(attrs["budget_limit_gpu_seconds"])
            if budget_gpu_seconds is not None and budget_gpu_seconds != limit:
                used = ledger_from_trials(study.get_trials(deepcopy=False), limit).used_gpu_seconds
                if budget_gpu_seconds < used:
                    raise BudgetError(f"--budget: {budget_gpu_seconds / 3600:g} GPU-h is less than the "
                                      f"{used / 3600:.2f} GPU-h study {name!r} has already used; give at least "
                                      f"that much (its budget now: {limit / 3600:g} GPU-h)")
                if budget_gpu_seconds > limit and (attrs.get("ablation_planned") or attrs.get("ablation_stage")):
                    # an extended study searches on; its ablation is planned again against
                    # the new budget, for the best config found by then
                    study.set_user_attr("ablation_planned", False)
                    study.set_user_attr("ablation_stage", 0)
                study.set_user_attr("budget_extended_from_gpu_seconds", limit)
                limit = budget_gpu_seconds
                study.set_user_attr("budget_limit_gpu_seconds", limit)
            _own_sampler(study, spec)
            if limit > float(attrs["budget_limit_gpu_seconds"]):  # extended now: the baseline runs
                _requeue_skipped_baseline(study, spec)
            return study, limit
        limit = budget_gpu_seconds or spec.budget_gpu_seconds
        if limit is None:
            raise StudyConflictError(f"study {name!r}: no budget; pass --budget (e.g. 40gpuh) or set [budget] limit in the spec")
        if limit < spec.first_estimate_gpu_seconds:
            raise BudgetError(f"budget {limit / 3600:g} GPU-h is less than one trial: the first is estimated at "
                              f"{spec.first_estimate_gpu_seconds / 3600:.2f} GPU-h ([trial] estimate_gpu_seconds, "
                              "else timeout_s x the GPUs); give a budget of several trials")
        study = optuna.create_study(study_name=name, storage=storage, sampler=make_sampler(spec),
                                    direction="maximize")
        for key, value in _creation_attrs(spec, spec_dict, fingerprint, limit).items():
            study.set_user_attr(key, value)
        _own_sampler(study, spec)
        base = baseline_params(spec)
        if base is not None:
            study.enqueue_trial(base, user_attrs={"role": "baseline"})
        return study, float(limit)


def check_joinable(storage: Any, name: str, spec: StudySpec) -> None:
    """Raise StudyConflictError, writing nothing, when study ``name`` exists in ``storage`` (an
    open Optuna storage) under another spec: what :func:`open_study` would refuse, asked before
    a run's slower checks (the preflight loads the data and the tokenizer)."""
    for summary in storage.get_all_studies():
        if summary.study_name == name:
            spec_dict = spec.to_dict()
            _check_same_spec(name, summary.user_attrs, spec_dict, spec_fingerprint(spec_dict))


def _check_same_spec(name: str, attrs: dict[str, Any], spec_dict: dict[str, Any], fingerprint: str) -> None:
    if "spec_fingerprint" not in attrs:
        raise StudyConflictError(f"study {name!r} exists but was not created by tuner (no spec attr); "
                                 "choose another --study-name")
    if attrs["spec_fingerprint"] != fingerprint:
        raise StudyConflictError(
            f"study {name!r} exists with another spec; use the same spec or another --study-name. "
            f"Differences: {spec_diff(attrs['spec'], spec_dict)}")


def _requeue_skipped_baseline(study: optuna.Study, spec: StudySpec) -> None:
    """Queue the baseline again when its only trials were skipped (a budget spent before it
    ran): a resumed study measures its baseline, or it has no speedup and no ablation."""
    base = baseline_params(spec)
    runs = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "baseline"]
    if base is not None and runs and all(t.user_attrs.get("status") == "skipped" for t in runs):
        study.enqueue_trial(base, user_attrs={"role": "baseline"})


def _own_sampler(study: optuna.Study, spec: StudySpec) -> None:
    """This coordinator's sampler, seeded by how many started on the study before it (under
    the admission lock): the first gets the spec's seed, a resume or a parallel coordinator
    another one, so seeded start-up trials do not repeat (tuner.search)."""
    starts = int(study.user_attrs.get("coordinator_starts", 0))
    study.set_user_attr("coordinator_starts", starts + 1)
    study.sampler = make_sampler(spec, seed=coordinator_seed(spec.study.seed, starts))


def spec_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> str:
    """`key: old -> new` for every leaf that differs, `; `-separated.

    Example:
        >>> spec_diff({"trial": {"measure_steps": 8}}, {"trial": {"measure_steps": 16}})
        'trial.measure_steps: 8 -> 16'
    """
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


# -------------------------------------------------------------------------- read-outs

def _shown_status(t: optuna.trial.FrozenTrial) -> str:
    """A trial's status as `tuner status` counts it: analysis's (tuner.stats.trial_status), but a
    FAIL that ended with no result through no fault of its config (Ctrl-C, a dead coordinator:
    `interrupted`, `lost`) under its own name, not as `fail`."""
    status = t.user_attrs.get("status")
    if t.state == TrialState.FAIL and status is not None and status in NO_RESULT:
        return str(status)
    return trial_status(t)


def summarize(study: optuna.Study, *, launched: int = 0, stopped: str = "") -> RunSummary:
    """Trials by status, budget used and limit, and the best ok trial of a study."""
    trials = study.get_trials(deepcopy=False)
    limit = float(study.user_attrs.get("budget_limit_gpu_seconds", 0.0))
    statuses = Counter(_shown_status(t) for t in trials
                       if t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED, TrialState.RUNNING,
                                      TrialState.WAITING))  # waiting: queued (a retry, an ablation run)
    best = None
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"]
    if ok:
        b = max(ok, key=lambda t: t.value)
        best = {"trial": b.number, "tokens_per_sec_per_gpu": b.value, "params": b.params,
                "role": b.user_attrs.get("role")}
    return RunSummary(study_name=study.study_name, launched=launched, statuses=dict(statuses),
                      used_gpu_seconds=ledger_from_trials(trials, limit).used_gpu_seconds,
                      limit_gpu_seconds=limit, best=best, stopped=stopped,
                      simulated=bool(study.user_attrs.get("simulated", False)),
                      recommendation=study.user_attrs.get("recommendation"))


def study_status(storage_url: str, study_name: str | None = None) -> list[RunSummary]:
    """Summaries of one study, or of every study in the storage."""
    if study_name:
        return [summarize(load_existing_study(storage_url, study_name))]
    storage = open_storage(storage_url, heartbeat=False, create_tables=False)
    return [summarize(optuna.load_study(study_name=s.study_name, storage=storage))
            for s in storage.get_all_studies()]

