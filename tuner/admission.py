"""Admission: under the study's lock, check the budget, ask the sampler, screen, reserve.

The coordinator (tuner.coordinator) calls :func:`admit` before each launch. It fails stale
trials, reads the ledger, asks the scheduling core (tuner.scheduling.next_admission) what to
do, enqueues the ablation runs when their time comes, and asks Optuna for a trial whose config
is neither an exact repeat (tuner.repeats) nor known-bad (tuner.screening): those are recorded
unrun, at 0 GPU-s, and the loop asks again. The trial's GPU-second cap is reserved in its user
attrs, so coordinators sharing a study overspend by at most one trial.
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import batching, repeats, scheduling
from tuner.ablation import plan_ablation_once
from tuner.budget import ledger_from_trials
from tuner.launch import Launcher
from tuner.optuna_internals import study_storage, trial_id
from tuner.screening import is_deliberate, screen
from tuner.space import complete_params, suggest_params
from tuner.spec import StudySpec
from tuner.storage import admission_lock
from tuner.study import enqueue_lost_retries, retry_once
from tuner.unrun import end_unrun

__all__ = ["admit", "finished", "last_run_params", "MAX_PRUNED_IN_A_ROW"]

MAX_PRUNED_IN_A_ROW = 200
"""Screened-out or repeat proposals in a row after which the search is exhausted (the
ablation round still runs), and one more after which the admission gives up."""


def admit(study: optuna.Study, raw_storage: Any, spec: StudySpec, limits: tuple[float, float],
           ablation: bool, asked: list[optuna.Trial], launcher: Launcher | None = None):
    """Under the admission lock: check the budget, ask, reserve. None when nothing fits.

    ``asked`` carries trials across retries: one asked for by an attempt that a dropped
    connection cut short is RUNNING with nobody to run it, so the next attempt fails it (and
    re-enqueues its config once) before asking again. ``launcher``: screens configs
    (tuner.screening, its NCCL preflight) and says whether its resident worker is up, so the
    next trial costs no start-up (tuner.batching).
    """
    warm = launcher.warm() if launcher is not None else False
    limit, search_limit = limits
    with admission_lock(raw_storage, study.study_name):
        while asked:
            abandon_admission(study, asked[0])
            asked.pop(0)
        # under the lock: two coordinators never both fail (and retry) one dead trial (SQLite
        # has no row locks), and a retry is enqueued before the ledger is read
        fail_stale_trials(study)
        # a suggestion that repeats a finished config (tuner.repeats) or that screening prunes
        # (tuner.screening) is recorded unrun, and the loop asks again
        first_estimate = scheduling.first_estimate(spec)
        proposals, swept = 0, False
        while True:
            if proposals >= MAX_PRUNED_IN_A_ROW and not study.user_attrs.get("search_exhausted"):
                # the sampler proposes only configs that cannot run: the search is over, as when
                # every config ran (tuner.repeats), but the ablation round still re-measures what
                # it found, on what the budget left (it used to end the study here, unspent)
                study.set_user_attr("search_exhausted", True)
                study.set_user_attr("search_exhausted_reason", f"{MAX_PRUNED_IN_A_ROW} proposals in a row "
                                    "were screened out or repeats")
            elif proposals >= MAX_PRUNED_IN_A_ROW + 1:
                return None  # not even a queued run was admitted
            trials = study.get_trials(deepcopy=False)
            if not swept:  # a retry owed but never queued (its FAIL committed, then its process or storage went)
                swept = True
                if enqueue_lost_retries(study, trials):
                    continue  # read the trials again, the retry among them
            attrs = study.user_attrs
            admission = scheduling.next_admission(
                ledger_from_trials(trials, limit), first_estimate_gpu_seconds=first_estimate,
                search_limit_gpu_seconds=search_limit, ablation=ablation,
                ablation_planned=bool(attrs.get("ablation_planned")),
                queued=any(t.state == TrialState.WAITING for t in trials),
                search_exhausted=bool(attrs.get("search_exhausted")),
                estimate_gpu_seconds=batching.estimate_from_trials(
                    trials, first_estimate_gpu_seconds=first_estimate, warm=warm),
                costliest_ok_gpu_seconds=batching.cap_basis(trials, first_estimate_gpu_seconds=first_estimate))
            if admission.action == "plan_ablation":  # the runs just enqueued are WAITING now
                if not plan_ablation_once(study, spec, trials, limit_gpu_seconds=limit,
                                          worker_params=last_run_params(trials) if warm else None):
                    return None
                continue
            if admission.action != "launch":
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "Heartbeat ... used with Study.optimize"
                trial = study.ask()
            asked.append(trial)
            # a beat at once: if this process dies before launching, the trial goes stale
            raw_storage.record_heartbeat(trial_id(trial))
            params = suggest_params(trial, spec)
            if repeats.screen(study, spec, trial, params, trials):  # an exact repeat: never launched
                asked.clear()
                proposals += 1
                continue
            verdict = None if is_deliberate(trial.user_attrs) else screen(
                study, spec, complete_params(params, spec), launcher=launcher)
            if verdict is not None:  # known-bad: 0 GPU-s (tuner.screening)
                end_unrun(study, trial, "pruned", verdict.reason)
                asked.clear()
                proposals += 1
                continue
            trial.set_user_attr("reserved_gpu_seconds", float(admission.cap_gpu_seconds))
            trial.set_user_attr("estimated_gpu_seconds", float(admission.estimate_gpu_seconds))
            trial.set_user_attr("launcher", spec.cluster.launcher)
            asked.clear()
            return trial, params, admission.cap_gpu_seconds, admission.cap_basis_gpu_seconds


def last_run_params(trials: list[optuna.trial.FrozenTrial]) -> dict[str, Any] | None:
    """The params of the latest finished trial that ran (GPU-seconds spent): the config a
    resident worker holds, where the runoff's order starts (tuner.runoff)."""
    ran = [t for t in trials if t.state.is_finished() and t.user_attrs.get("gpu_seconds")]
    return dict(max(ran, key=lambda t: t.number).params) if ran else None


def fail_stale_trials(study: optuna.Study) -> None:
    # tuner drives trials with ask/tell and beats for them itself (RDB heartbeats alone only
    # protect Study.optimize), so the stale check is ours to call; it is marked experimental.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def finished(study: optuna.Study, trial: optuna.Trial) -> bool:
    return study_storage(study).get_trial(trial_id(trial)).state.is_finished()


def abandon_admission(study: optuna.Study, trial: optuna.Trial) -> None:
    """FAIL a trial whose admission a storage error cut short; it never ran, costs nothing."""
    if finished(study, trial):
        return
    trial.set_user_attr("gpu_seconds", 0.0)
    trial.set_user_attr("never_launched", True)
    trial.set_user_attr("message", "admission cut short by a storage error; never launched")
    study.tell(trial, state=TrialState.FAIL)
    retry_once(study, study_storage(study).get_trial(trial_id(trial)))
