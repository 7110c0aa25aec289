"""tuner's own queries of Optuna's tables: what the admission needs, in one statement each.

Optuna's ``get_trials`` and ``get_trial`` read every param, value and attr of the trials they
return (five or six queries); the admission lock, held while every coordinator of a study
waits, and the per-trial bookkeeping need a few columns. These read them through the table
models tuner.storage's internals module reaches (it alone touches Optuna's private names), on
any RDB storage; on any other storage they fall back to the study's own reads.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import optuna
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from tuner.storage._optuna_core import trial_state_statement
from tuner.storage._optuna_internals import (
    HeartbeatRDBStorage,
    rdb_models,
    rdb_storage,
    scoped_session,
    study_id,
    study_storage,
    trial_id,
)

__all__ = ["trial_state", "LedgerTrial", "ledger_view", "upkeep_due", "set_finished_trial_user_attrs"]


def trial_state(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> TrialState:
    """A trial's state as the storage holds it now: on an RDB storage one column of one row (the
    statement ``HeartbeatRDBStorage.record`` checks with; a ``get_trial`` reads the whole trial);
    elsewhere the study's storage's."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, optuna.storages.RDBStorage):
        return study_storage(study).get_trial(trial_id(trial)).state
    with scoped_session(rdb) as session:
        state = session.execute(trial_state_statement(), {"trial_id": trial_id(trial)}).scalar()
    if state is None:
        raise KeyError(f"no trial with id {trial_id(trial)}")
    return state


@dataclasses.dataclass(frozen=True)
class LedgerTrial:
    """A trial as the budget arithmetic reads it (tuner.budget.ledger_from_trials, cap_basis):
    its number, state and the user attrs it was asked for."""

    number: int
    state: TrialState
    user_attrs: dict[str, Any]


def ledger_view(study: optuna.Study, keys: Sequence[str], conn: Any = None) -> list[Any]:
    """Every trial of the study with only the user attrs named by ``keys``, in trial order: on
    an RDB storage one query (a full ``get_trials`` reads every param, value and attr in
    several, under the admission lock that every coordinator waits on); on any other storage the
    study's own trials. What the budget computes from either is the same. ``conn``: the
    PostgreSQL admission lock's connection (tuner.storage.admission_lock) to read on."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, optuna.storages.RDBStorage):
        return study.get_trials(deepcopy=False)
    trial, attr = rdb_models.TrialModel.__table__, rdb_models.TrialUserAttributeModel.__table__
    query = (sqlalchemy.select(trial.c.number, trial.c.state, attr.c.key, attr.c.value_json)
             .select_from(trial.outerjoin(attr, sqlalchemy.and_(attr.c.trial_id == trial.c.trial_id,
                                                                 attr.c.key.in_(list(keys)))))
             .where(trial.c.study_id == study_id(study)))
    if conn is not None:
        rows = conn.execute(query).all()
    else:
        with scoped_session(rdb) as session:
            rows = session.execute(query).all()
    out: dict[int, LedgerTrial] = {}
    for number, state, key, value in rows:
        row = out.setdefault(number, LedgerTrial(number, state, {}))
        if key is not None:
            row.user_attrs[key] = json.loads(value)
    return [out[n] for n in sorted(out)]


def upkeep_due(study: optuna.Study) -> bool:
    """Whether :func:`fail_stale_trials` has anything to do: a RUNNING trial of the study with
    no heartbeat (an orphan to beat) or one older than the grace period (server clock, as
    Optuna judges it). Read-only, so a coordinator asks outside the admission lock and takes it
    only when this is True."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, HeartbeatRDBStorage) or rdb.heartbeat_interval is None:
        return False
    trial, beat = rdb_models.TrialModel, rdb_models.TrialHeartbeatModel
    with scoped_session(rdb) as session:
        rows = (session.query(trial.trial_id, beat.heartbeat)
                .outerjoin(beat, beat.trial_id == trial.trial_id)
                .filter(trial.study_id == study_id(study), trial.state == TrialState.RUNNING).all())
        if not rows:
            return False
        now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)  # the server's clock
    return any(when is None or now - when > rdb.grace for _, when in rows)


def set_finished_trial_user_attrs(study: optuna.Study, trial: FrozenTrial, attrs: dict[str, Any]) -> bool:
    """Set user attrs on a finished trial (Optuna refuses: ``check_trial_is_updatable``), so a
    recommendation made after the study ran marks its trial where Optuna's CLI and
    optuna-dashboard show it. Writes the rows through the RDB storage's own session and model
    (the study's cache keeps its old copy); False, writing nothing, on any other storage."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, optuna.storages.RDBStorage):
        return False
    session = rdb.scoped_session()
    try:
        for key, value in attrs.items():
            row = (session.query(rdb_models.TrialUserAttributeModel)
                   .filter_by(trial_id=trial_id(trial), key=key).one_or_none())
            if row is None:
                session.add(rdb_models.TrialUserAttributeModel(trial_id=trial_id(trial), key=key,
                                                               value_json=json.dumps(value)))
            else:
                row.value_json = json.dumps(value)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return True
