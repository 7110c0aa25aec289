"""Trials that end without running: one way to record them.

`skipped` (queued runs the spent budget cannot pay for), `pruned` (configs the model knows
cannot run, tuner.search) and `repeat` (a sampler's exact repeat, tuner.search) are PRUNED
trials with ``gpu_seconds`` 0, their status and a one-line ``message``: analysis lists them
and never counts them as measurements (docs/contracts.md). PRUNED, not FAIL: nothing ran, so
optuna-dashboard and ``optuna trials`` count them apart from the failures that did run.
Samplers see them as before (tuner.search.as_sampler_sees_it).
"""

from __future__ import annotations

import datetime

import optuna
from optuna.trial import TrialState

from tuner.storage._optuna_internals import rdb_models, rdb_storage, scoped_session, study_storage, trial_id

__all__ = ["end_unrun", "end_if_waiting"]


def _attrs(status: str, message: str) -> dict[str, object]:
    return {"status": status, "gpu_seconds": 0.0, "message": message}


def end_unrun(study: optuna.Study, trial: optuna.Trial | optuna.trial.FrozenTrial, status: str, message: str) -> None:
    """End a trial that never ran: PRUNED, no GPU time, ``status`` and ``message`` user attrs."""
    storage = study_storage(study)
    for key, value in _attrs(status, message).items():
        storage.set_trial_user_attr(trial_id(trial), key, value)
    storage.set_trial_state_values(trial_id(trial), TrialState.PRUNED)


def end_if_waiting(study: optuna.Study, trial: optuna.trial.FrozenTrial, status: str, message: str) -> bool:
    """:func:`end_unrun` for a queued trial, only while it is still WAITING: False, writing
    nothing, when another coordinator's ``ask`` has popped it meanwhile (RUNNING: that
    coordinator runs it). On an RDB storage the check and the writes are one transaction on
    the locked trial row, the row Optuna's pop locks too; elsewhere (one process) a re-read."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, optuna.storages.RDBStorage):
        if study_storage(study).get_trial(trial_id(trial)).state != TrialState.WAITING:
            return False
        end_unrun(study, trial, status, message)
        return True
    with scoped_session(rdb) as session:
        row = rdb_models.TrialModel.find_or_raise_by_id(trial_id(trial), session, for_update=True)
        if row.state != TrialState.WAITING:
            return False
        for key, value in _attrs(status, message).items():
            rdb._set_trial_attr_without_commit(session, rdb_models.TrialUserAttributeModel,  # noqa: SLF001
                                               trial_id(trial), key, value)
        row.state = TrialState.PRUNED
        row.datetime_complete = datetime.datetime.now()
    return True
