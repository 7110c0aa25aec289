"""Trials that end without running: one way to record them.

`skipped` (queued runs the spent budget cannot pay for), `pruned` (configs the model knows
cannot run, tuner.search) and `repeat` (a sampler's exact repeat, tuner.search) are PRUNED
trials with ``gpu_seconds`` 0, their status and a one-line ``message``: analysis lists them
and never counts them as measurements (docs/contracts.md). PRUNED, not FAIL: nothing ran, so
optuna-dashboard and ``optuna trials`` count them apart from the failures that did run.
Samplers see them as before (tuner.search.as_sampler_sees_it).
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from tuner.storage._optuna_internals import study_storage, trial_id

__all__ = ["end_unrun"]


def end_unrun(study: optuna.Study, trial: optuna.Trial | optuna.trial.FrozenTrial, status: str, message: str) -> None:
    """End a trial that never ran: PRUNED, no GPU time, ``status`` and ``message`` user attrs."""
    storage = study_storage(study)
    for key, value in {"status": status, "gpu_seconds": 0.0, "message": message}.items():
        storage.set_trial_user_attr(trial_id(trial), key, value)
    storage.set_trial_state_values(trial_id(trial), TrialState.PRUNED)
