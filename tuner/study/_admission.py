"""Admission: read the ledger and decide; ask, screen and plan; reserve under the study's lock.

The coordinator (tuner.study) calls :func:`admit` before each launch. It reads the study and
asks the admission arithmetic (tuner.budget.next_admission) what to do. The admission lock
(tuner.storage.admission_lock) is taken for the study's upkeep only when there is some to do (a
trial gone stale or without a heartbeat, a retry a dead process owed but never queued, a trial
this coordinator asked for and lost track of): every FAIL-and-retry is made under it, so no
two coordinators fail, or retry, one trial. Outside the lock it does what takes time: the
ablation's statistics when the round is due (tuner.study's ``ablation_plan``, applied under the
lock only if no other coordinator planned it meanwhile), the sampler's refit inside
``study.ask()``, and the screening of the asked config: an exact repeat (tuner.search) or a
known-bad config (tuner.search) is recorded unrun, at 0 GPU-s, and the loop decides again. The
trial's GPU-second cap is then reserved in its user attrs under the lock, against the ledger
read again (one query: tuner.storage.ledger_view), so coordinators sharing a study overspend by
at most one trial.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import optuna
from optuna.trial import TrialState

from tuner import budget
from tuner.budget import ledger_from_trials
from tuner.launch import Launcher
from tuner.search import is_deliberate, screen, screen_repeat, suggest_params
from tuner.spec import StudySpec, complete_params
from tuner.storage import (
    LedgerTrial,
    admission_lock,
    end_unrun,
    ledger_view,
    rdb_storage,
    study_storage,
    trial_id,
    trial_state,
    upkeep_due,
    write_trial,
)
from tuner.storage import fail_stale_trials as storage_fail_stale
from tuner.study._ablation import ablation_plan, apply_ablation_plan
from tuner.study._lifecycle import enqueue_lost_retries, owed_retries, retry_once
from tuner.study._outcome import INTERRUPTED, LOST

__all__ = ["admit", "Admitted", "finished", "last_run_params", "fail_stale_trials", "runoff_waits", "MAX_PRUNED_IN_A_ROW"]

class Admitted(NamedTuple):
    """A trial admitted to run, its cap reserved."""

    trial: optuna.Trial
    params: dict[str, Any]
    """The searched knobs' values, as the sampler suggested them."""
    full_params: dict[str, Any]
    """Every knob's value, as the workload receives it (tuner.spec's ``complete_params``, once)."""
    reserved_gpu_seconds: float
    cap_basis_gpu_seconds: float
    trials: list[optuna.trial.FrozenTrial]
    """The study as the admission decided on it (read before its ask): the finished trials the
    start's progress line and the adaptive bar use, without reading the study again."""
    ledger: list[Any]
    """The ledger as the reservation read it under the lock, this trial's reservation in it
    (tuner.storage.LedgerTrial rows): the start's GPU-seconds used, without another read."""


MAX_PRUNED_IN_A_ROW = 200
"""Screened-out or repeat proposals in a row after which the search is exhausted (the
ablation round still runs), and one more after which the admission gives up."""


def admit(study: optuna.Study, raw_storage: Any, spec: StudySpec, limits: tuple[float, float],
          ablation: bool, asked: list[optuna.Trial], launcher: Launcher | None = None) -> Admitted | None:
    """Check the budget, ask, screen, reserve. An :class:`Admitted`, or None when nothing fits.

    ``asked`` carries trials across retries: one asked for by an attempt that a dropped
    connection cut short is RUNNING with nobody to run it, so the next attempt fails it (and
    re-enqueues its config once) before asking again. ``launcher``: screens configs
    (tuner.search, its NCCL preflight) and says whether its resident worker is up, so the
    next trial costs no start-up (tuner.budget).
    """
    warm = launcher.warm() if launcher is not None else False
    limit, search_limit = limits
    first_estimate = spec.first_estimate_gpu_seconds
    proposals, fresh = 0, True
    while True:
        trials = study.get_trials(deepcopy=False)
        # the study's upkeep under the lock, only when there is some: two coordinators never both
        # fail (and retry) one dead trial (SQLite has no row locks), and a retry is enqueued
        # before the ledger is read
        if fresh and (asked or owed_retries(trials) or upkeep_due(study)):
            with admission_lock(raw_storage, study.study_name):
                while asked:
                    abandon_admission(study, asked[0])
                    asked.pop(0)
                fail_stale_trials(study)
                # a retry owed but never queued (its FAIL committed, then its process or storage went)
                enqueue_lost_retries(study, study.get_trials(deepcopy=False))
            trials = study.get_trials(deepcopy=False)
        fresh = False
        if proposals >= MAX_PRUNED_IN_A_ROW and not study.user_attrs.get("search_exhausted"):
            # the sampler proposes only configs that cannot run: the search is over, as when
            # every config ran (tuner.search), but the ablation round still re-measures what
            # it found, on what the budget left
            study.set_user_attr("search_exhausted", True)
            study.set_user_attr("search_exhausted_reason", f"{MAX_PRUNED_IN_A_ROW} proposals in a row "
                                "were screened out or repeats")
        elif proposals >= MAX_PRUNED_IN_A_ROW + 1:
            return None  # not even a queued run was admitted
        attrs = study.user_attrs
        estimate = budget.estimate_from_trials(trials, first_estimate_gpu_seconds=first_estimate, warm=warm)
        admission = budget.next_admission(
            ledger_from_trials(trials, limit), first_estimate_gpu_seconds=first_estimate,
            search_limit_gpu_seconds=search_limit, ablation=ablation,
            ablation_planned=bool(attrs.get("ablation_planned")),
            queued=any(t.state == TrialState.WAITING for t in trials),
            search_exhausted=bool(attrs.get("search_exhausted")), estimate_gpu_seconds=estimate,
            costliest_ok_gpu_seconds=budget.cap_basis(trials, first_estimate_gpu_seconds=first_estimate))
        if admission.action == "plan_ablation" and runoff_waits(attrs, trials):
            return None  # the coordinator waits for those runs (tuner.study's loop), then plans
        if admission.action == "plan_ablation":  # its statistics outside the lock, its runs enqueued under it
            plan = ablation_plan(attrs, spec, trials, limit_gpu_seconds=limit,
                                 worker_params=last_run_params(trials) if warm else None)
            with admission_lock(raw_storage, study.study_name):
                applied = apply_ablation_plan(study, plan)
            if applied is False:
                return None
            continue  # the runs just enqueued are WAITING now (or another coordinator's are)
        if admission.action != "launch":
            return None
        # the sampler refits inside ask(), outside the lock
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "Heartbeat ... used with Study.optimize"
            trial = study.ask()
        asked.append(trial)
        # a beat at once, so the trial goes stale if this process dies before launching: tuner's
        # storage gave it one as it became RUNNING (tuner.storage), any other gets it here
        if not getattr(raw_storage, "beats_when_running", False):
            raw_storage.record_heartbeat(trial_id(trial))
        try:
            params = suggest_params(trial, spec)
            if screen_repeat(study, spec, trial, params, trials):  # an exact repeat: never launched
                asked.clear()
                proposals += 1
                continue
            full = complete_params(params, spec)  # once per trial: what screening judges is what runs
            verdict = None if is_deliberate(trial.user_attrs) else screen(
                study, spec, full, launcher=launcher, trials=trials)
            if verdict is not None:  # known-bad: 0 GPU-s (tuner.search)
                end_unrun(study, trial, "pruned", verdict.reason)
                asked.clear()
                proposals += 1
                continue
            with admission_lock(raw_storage, study.study_name) as held:  # reserve against the ledger as it is now
                now = ledger_view(study, budget.LEDGER_ATTRS, conn=held)
                cap = budget.trial_cap(ledger_from_trials(now, limit), admission.estimate_gpu_seconds,
                                       budget.cap_basis(now, first_estimate_gpu_seconds=first_estimate))
                if cap is None:  # another coordinator reserved what was left meanwhile
                    _release(study, trial)
                    asked.clear()
                    return None
                # one statement for the three, on the lock's own connection where it has one
                reservation = {"reserved_gpu_seconds": float(cap),
                               "estimated_gpu_seconds": float(admission.estimate_gpu_seconds),
                               "launcher": spec.cluster.launcher}
                write_trial(study, trial, user_attrs=reservation, conn=held)
                ledger = [LedgerTrial(t.number, t.state, {**t.user_attrs, **reservation} if t.number == trial.number
                                      else dict(t.user_attrs)) for t in now]
        except optuna.exceptions.UpdateFinishedTrialError:
            # another coordinator ended the trial between our ask and here (a queued run it
            # skipped as unaffordable, or found stale): it is theirs now; ask again
            if not finished(study, trial):
                raise
            asked.clear()
            continue
        asked.clear()
        return Admitted(trial, params, full, cap, admission.cap_basis_gpu_seconds, trials, ledger)


def _release(study: optuna.Study, trial: optuna.Trial) -> None:
    """A trial asked for but not admitted after all (the budget another coordinator took): a
    queued run goes back to the queue (tuner.study's retry), a search proposal ends unrun."""
    if is_deliberate(trial.user_attrs):
        abandon_admission(study, trial, "another coordinator reserved the budget that was left; queued again")
    else:
        end_unrun(study, trial, "skipped", "not run: another coordinator reserved the budget that was left")


def last_run_params(trials: list[optuna.trial.FrozenTrial]) -> dict[str, Any] | None:
    """The params of the latest finished trial that ran (GPU-seconds spent): the config a
    resident worker holds, where the runoff's order starts (tuner.stats)."""
    ran = [t for t in trials if t.state.is_finished() and t.user_attrs.get("gpu_seconds")]
    return dict(max(ran, key=lambda t: t.number).params) if ran else None


def runoff_waits(study_attrs: Any, trials: list[optuna.trial.FrozenTrial]) -> bool:
    """Whether the runoff must wait: the round's runs are enqueued (``ablation_stage`` 1) and
    some still run on other coordinators. The runoff's finalists are chosen once, on every run
    of the round (a dead coordinator's run goes stale, is retried, and is waited for too)."""
    if study_attrs.get("ablation_stage") != 1:
        return False
    return any(t.state == TrialState.RUNNING and t.user_attrs.get("role") == "ablation" for t in trials)


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """FAIL the trials whose coordinator stopped beating, with status `lost` and a message, and
    retry each once (tuner.study.retry_once); returns their numbers. tuner drives trials with
    ask/tell and beats for them itself (RDB heartbeats alone only protect Study.optimize), so
    the stale check is ours to call. Call it under the admission lock."""
    grace = getattr(rdb_storage(study), "grace_period", None)
    message = (f"its coordinator stopped beating for over {grace} s (the grace period): it died, was frozen, "
               "or lost the storage; charged its last heartbeat's GPU-seconds, retried once")

    def attrs(user_attrs: Mapping[str, Any]) -> dict[str, Any]:
        # no reservation: asked, never admitted (an ask that committed as the storage went, or
        # its process died before reserving): never launched, costs nothing, as abandon_admission
        if "reserved_gpu_seconds" in user_attrs:
            return {"status": LOST, "message": message}
        return _never_launched(f"asked but never admitted: its coordinator stopped beating for over {grace} s "
                               "before reserving its budget; never launched, queued again once")
    failed = storage_fail_stale(study, attrs)
    for frozen in failed:
        retry_once(study, frozen)
    return [t.number for t in failed]


def _never_launched(message: str) -> dict[str, Any]:
    """The user attrs of a trial FAILed before its launch: it costs nothing (the budget ledger)."""
    return {"gpu_seconds": 0.0, "never_launched": True, "status": INTERRUPTED, "message": message}


def finished(study: optuna.Study, trial: optuna.Trial) -> bool:
    return trial_state(study, trial).is_finished()


def abandon_admission(study: optuna.Study, trial: optuna.Trial,
                      message: str = "admission cut short by a storage error; never launched") -> None:
    """FAIL a trial whose admission was cut short, and queue its config again (once); it never
    ran, costs nothing. Call it under the admission lock, as every FAIL-and-retry."""
    if finished(study, trial):
        return
    for key, value in _never_launched(message).items():
        trial.set_user_attr(key, value)
    study.tell(trial, state=TrialState.FAIL)
    retry_once(study, study_storage(study).get_trial(trial_id(trial)))
