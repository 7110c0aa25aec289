"""The one module that touches Optuna's private attributes.

tuner drives trials with ask/tell from several processes and keeps its own heartbeats, so it
needs a few things Optuna does not expose: a trial's storage id, the RDB storage behind a
study's cache, and a hook where the cache creates trials. They are reached here and nowhere
else; ``tests/test_optuna_internals.py`` fails loudly if an Optuna upgrade moves them.

Example:
    >>> import optuna
    >>> study = optuna.create_study()
    >>> trial_id(study.ask()) >= 0
    True
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = ["HeartbeatRDBStorage", "StudyView", "trial_id", "study_storage", "rdb_storage", "missing_internals",
           "set_finished_trial_user_attrs"]


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (Optuna keeps it private: ``_trial_id``)."""
    return trial._trial_id  # noqa: SLF001


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage a study reads and writes through (a cache in front of an RDB storage)."""
    return study._storage  # noqa: SLF001


def rdb_storage(study: optuna.Study) -> Any:
    """The storage behind the study's cache: the RDB storage, for heartbeats and locks."""
    storage = study_storage(study)
    return getattr(storage, "_backend", storage)


def set_finished_trial_user_attrs(study: optuna.Study, trial: FrozenTrial, attrs: dict[str, Any]) -> bool:
    """Set user attrs on a finished trial (Optuna refuses: ``check_trial_is_updatable``), so a
    recommendation made after the study ran marks its trial where Optuna's CLI and
    optuna-dashboard show it. Writes the rows through the RDB storage's own session and model
    (the study's cache keeps its old copy); False, writing nothing, on any other storage."""
    import json

    from optuna.storages._rdb import models

    rdb = rdb_storage(study)
    if not isinstance(rdb, optuna.storages.RDBStorage):
        return False
    session = rdb.scoped_session()
    try:
        for key, value in attrs.items():
            row = (session.query(models.TrialUserAttributeModel)
                   .filter_by(trial_id=trial_id(trial), key=key).one_or_none())
            if row is None:
                session.add(models.TrialUserAttributeModel(trial_id=trial_id(trial), key=key,
                                                           value_json=json.dumps(value)))
            else:
                row.value_json = json.dumps(value)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return True


class HeartbeatRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose RUNNING trials always carry a heartbeat.

    Optuna finds a trial stale only from its heartbeat row, and tuner drives trials with
    ask/tell: a trial whose coordinator died between ``ask`` and its first beat (or an ``ask``
    retried after its first attempt had landed) would stay RUNNING forever. Beating the moment
    a trial becomes RUNNING leaves only the milliseconds between two commits uncovered.
    """

    def _beats(self) -> bool:
        return self.heartbeat_interval is not None

    def _first_beat(self, trial_id_: int) -> None:
        try:
            self.record_heartbeat(trial_id_)
        except Exception:  # noqa: BLE001 - the coordinator's own heartbeat retries it
            pass

    # Optuna's _CachedStorage (what Study wraps an RDBStorage in) creates trials through this
    # private method; missing_internals() reports it if a new Optuna stops calling it.
    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        frozen = super()._create_new_trial(study_id, template_trial)
        if self._beats() and frozen.state == TrialState.RUNNING:  # not an enqueued (WAITING) one
            self._first_beat(trial_id(frozen))
        return frozen

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        changed = super().set_trial_state_values(trial_id, state, values)
        if changed and state == TrialState.RUNNING and self._beats():  # a WAITING trial popped
            self._first_beat(trial_id)
        return changed


class StudyView:
    """A study as a sampler reads it: every trial passed through ``seen_as`` first.

    Optuna's samplers read a study's trials through ``Study._get_trials`` (TPE, GP and the
    search spaces they infer); everything else is the study's own. tuner.search hands its
    samplers this view so a screened trial (FAIL, which every Optuna sampler ignores) is seen
    as the failure it stands for (tuner.search.as_sampler_sees_it).
    """

    def __init__(self, study: optuna.Study, seen_as: Callable[[FrozenTrial], FrozenTrial]) -> None:
        self._study, self._seen_as = study, seen_as

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        trials = (self._seen_as(t) for t in self._study._get_trials(deepcopy=deepcopy, use_cache=use_cache))  # noqa: SLF001
        return [t for t in trials if states is None or t.state in states]

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


def missing_internals() -> list[str]:
    """What this module relies on and the installed Optuna lacks ([] when all is there)."""
    rdb = HeartbeatRDBStorage("sqlite:///:memory:")
    study = optuna.create_study(storage=rdb)
    trial = study.ask()
    checks = {"Study._storage": lambda: study._storage,  # noqa: SLF001
              "Trial._trial_id": lambda: trial._trial_id,  # noqa: SLF001
              "FrozenTrial._trial_id": lambda: study.trials[0]._trial_id,  # noqa: SLF001
              "the study cache's _backend": lambda: study._storage._backend,  # noqa: SLF001
              "RDBStorage._create_new_trial": lambda: optuna.storages.RDBStorage._create_new_trial,  # noqa: SLF001
              "Study._get_trials (what samplers read; StudyView)": lambda: study._get_trials(  # noqa: SLF001
                  deepcopy=False, states=None, use_cache=False)}
    missing = []
    for name, reach in checks.items():
        try:
            reach()
        except (AttributeError, TypeError):
            missing.append(name)
    if not missing and rdb_storage(study) is not rdb:
        missing.append("the study cache's _backend is not the RDB storage it wraps")
    return missing
