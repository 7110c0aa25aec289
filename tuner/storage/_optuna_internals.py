"""The one module that touches Optuna's private attributes.

tuner drives trials with ask/tell from several processes and keeps its own heartbeats, so it
needs a few things Optuna does not expose: a trial's storage id, the RDB storage behind a
study's cache, and a hook where the cache creates trials. They are reached here and nowhere
else; ``tests/storage/test_optuna_internals.py`` fails loudly if an Optuna upgrade moves them.
Optuna's table models are handed on (``rdb_models``) to tuner's own few-column queries
(tuner/storage/_optuna_queries.py).

Example:
    >>> import optuna
    >>> study = optuna.create_study()
    >>> trial_id(study.ask()) >= 0
    True
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import warnings
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from typing import Any

import optuna
import sqlalchemy
from optuna.storages._rdb import models as _models
from optuna.trial import FrozenTrial, TrialState

from tuner.storage._optuna_core import (
    optuna_errors,
    read_study_user_attrs,
    read_trial,
    read_trials,
    trial_state_statement,
    upsert_rows,
)

__all__ = ["HeartbeatRDBStorage", "trial_id", "params_in_one_transaction", "study_storage", "rdb_storage",
           "missing_internals", "fail_stale_trials", "write_trial", "study_id",
           "rdb_models", "scoped_session"]

StaleAttrs = Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""What a stale trial's FAIL writes: user attrs, or a function of those it holds that returns them."""


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (Optuna keeps it private: ``_trial_id``)."""
    return trial._trial_id  # noqa: SLF001


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage a study reads and writes through (a cache in front of an RDB storage)."""
    return study._storage  # noqa: SLF001


def study_id(study: optuna.Study) -> int:
    """The storage's id of a study (Optuna keeps it private: ``_study_id``)."""
    return study._study_id  # noqa: SLF001


rdb_models = _models
"""Optuna's RDB table models (a private module): tuner.storage's own queries read through them."""


def scoped_session(storage: optuna.storages.RDBStorage) -> Any:
    """A session of the RDB storage that commits on exit and rolls back on error (Optuna's own)."""
    from optuna.storages._rdb.storage import _create_scoped_session
    return _create_scoped_session(storage.scoped_session)


def params_in_one_transaction(trial: optuna.Trial) -> contextlib.AbstractContextManager[Any]:
    """Around suggesting a trial's parameters: one transaction for all of them on tuner's
    storage (Optuna writes one per parameter); a no-op on any other storage."""
    backend = getattr(study_storage(trial.study), "_backend", None)
    if isinstance(backend, HeartbeatRDBStorage):
        return backend.params_held(trial_id(trial))
    return contextlib.nullcontext()


def rdb_storage(study: optuna.Study) -> Any:
    """The storage behind the study's cache: the RDB storage, for heartbeats and locks."""
    storage = study_storage(study)
    return getattr(storage, "_backend", storage)


def write_trial(study: optuna.Study, trial: optuna.Trial | FrozenTrial, *, steps: Sequence[tuple[int, float]] = (),
                user_attrs: dict[str, Any] | None = None, constraints: dict[str, float] | None = None,
                conn: Any = None) -> None:
    """A running trial's intermediate values and user attrs: in one transaction on tuner's RDB
    storage (``HeartbeatRDBStorage.record``), else one by one (an in-memory study of a bench or a
    test). ``constraints``: Optuna's constraint values (``Trial.set_constraint``), in the same
    transaction, each only where not set yet. ``conn``: the PostgreSQL admission lock's own
    connection (tuner.storage.admission_lock): user attrs alone are written on it in one statement.

    Raises:
        optuna.exceptions.UpdateFinishedTrialError: the trial is finished (another process
            found it stale); nothing of it is written.
    """
    storage = rdb_storage(study)
    system = {f"{_CONSTRAINTS}:{k}": float(v) for k, v in (constraints or {}).items()}
    if conn is not None and not steps and not system and user_attrs and isinstance(storage, optuna.storages.RDBStorage):
        _upsert_running_trial_attrs(conn, trial_id(trial), user_attrs)
    elif hasattr(storage, "record"):
        system = storage.record(trial_id(trial), steps=steps, user_attrs=user_attrs, system_attrs=system)
    else:
        for step, value in steps:
            study_storage(study).set_trial_intermediate_value(trial_id(trial), step, value)
        for key, value in (user_attrs or {}).items():
            study_storage(study).set_trial_user_attr(trial_id(trial), key, value)
        if isinstance(trial, optuna.Trial):
            for key, value in (constraints or {}).items():
                trial.set_constraint(key, value)
        system = {}
    if isinstance(trial, optuna.Trial) and user_attrs:   # the trial's own copy, as set_user_attr keeps it
        trial._cached_frozen_trial.user_attrs.update(user_attrs)  # noqa: SLF001
    if isinstance(trial, optuna.Trial) and system:
        trial._cached_frozen_trial.system_attrs.update(system)  # noqa: SLF001


def _upsert_running_trial_attrs(conn: Any, trial_id_: int, attrs: Mapping[str, Any]) -> None:
    """INSERT ... SELECT ... ON CONFLICT DO UPDATE: every attr in one PostgreSQL statement,
    written only while the trial is RUNNING (the condition and the write are one statement, so
    nothing finishes the trial between them). Plain SQL with bound values: the statement's text
    depends only on the number of attrs, so it is compiled once."""
    attr, trial = _models.TrialUserAttributeModel.__tablename__, _models.TrialModel.__tablename__
    rows = ", ".join(f"(:k{i}, :v{i})" for i in range(len(attrs)))
    statement = sqlalchemy.text(
        f"INSERT INTO {attr} (trial_id, key, value_json) SELECT t.trial_id, v.key, v.value_json "
        f"FROM {trial} AS t CROSS JOIN (VALUES {rows}) AS v (key, value_json) "
        "WHERE t.trial_id = :trial_id AND t.state = :running "
        "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = EXCLUDED.value_json")
    values: dict[str, Any] = {"trial_id": trial_id_, "running": TrialState.RUNNING.name}
    for i, (key, value) in enumerate(attrs.items()):
        values[f"k{i}"], values[f"v{i}"] = key, json.dumps(value)
    if conn.execute(statement, values).rowcount != len(attrs):
        raise optuna.exceptions.UpdateFinishedTrialError(
            f"trial {trial_id_} is not RUNNING any more (another coordinator found it stale): its attrs were not written")


_CONSTRAINTS = "constraints"
"""The prefix of the system attrs Optuna's ``Trial.set_constraint`` writes (``constraints:<key>``);
missing_internals() checks Optuna still uses it."""


class HeartbeatRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose RUNNING trials always carry a heartbeat.

    Optuna finds a trial stale only from its heartbeat row: under ask/tell a trial whose
    coordinator died between ``ask`` and its first beat would stay RUNNING forever. It beats the
    moment it runs; :meth:`beat_orphans` (with every stale check) covers the commit between.
    """

    @property
    def beats_when_running(self) -> bool:
        """Whether a trial gets its first heartbeat the moment it becomes RUNNING (created by
        ``ask`` or a WAITING one popped): a coordinator need not beat it again before launching."""
        return self.heartbeat_interval is not None

    @property
    def grace(self) -> datetime.timedelta:
        """How old a RUNNING trial's beat may be before it is stale (grace period, else 2 intervals)."""
        return datetime.timedelta(seconds=self.grace_period or 2 * (self.heartbeat_interval or 0))

    def _first_beat(self, trial_id_: int) -> None:
        try:
            self.record_heartbeat(trial_id_)
        except Exception:  # noqa: BLE001 - the coordinator's own heartbeat retries it
            pass

    # Optuna's _CachedStorage (what Study wraps an RDBStorage in) creates trials through this
    # private method; missing_internals() reports it if a new Optuna stops calling it.
    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        frozen = super()._create_new_trial(study_id, template_trial)
        if self.beats_when_running and frozen.state == TrialState.RUNNING:  # not an enqueued (WAITING) one
            self._first_beat(trial_id(frozen))
        return frozen

    # Optuna's reads of whole trials (get_trial, and _get_trials, what its cache calls) in two
    # statements instead of six, and of the study's user attrs in one, without ORM objects (_optuna_core)
    def get_trial(self, trial_id: int) -> FrozenTrial:
        return read_trial(self.engine, trial_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return read_study_user_attrs(self.engine, study_id)

    def _get_trials(self, study_id: int, states: Container[TrialState] | None, included_trial_ids: set[int],
                    trial_id_greater_than: int) -> list[FrozenTrial]:
        return read_trials(self.engine, study_id, states, included_trial_ids, trial_id_greater_than)

    # Optuna's cache writes each parameter here, a transaction apiece: params_held makes them one
    def _set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                         distribution: Any, previous_distribution: Any) -> None:
        held = self.__dict__.get("_held_params", {}).get(threading.get_ident())  # set by params_held only
        if held is not None and held[0] == trial_id:
            held[1].append((param_name, param_value_internal, distribution, previous_distribution))
        else:
            super()._set_trial_param(trial_id, param_name, param_value_internal, distribution, previous_distribution)

    @contextlib.contextmanager
    def params_held(self, trial_id_: int) -> Iterator[None]:
        """Hold this thread's parameter writes to ``trial_id_``, and the user attrs recorded alone
        (the sampler's); write them in one transaction on leaving, checked as Optuna checks each
        (none on an error: the trial is abandoned)."""
        from optuna.storages._rdb.storage import _create_scoped_session

        by_thread = self.__dict__.setdefault("_held_params", {})
        me = threading.get_ident()
        by_thread[me] = (trial_id_, [], {})
        try:
            yield
            _, held, attrs = by_thread[me]
        finally:
            del by_thread[me]
        if not held and not attrs:
            return
        param, trial_model, dists = _models.TrialParamModel, _models.TrialModel, optuna.distributions
        with _create_scoped_session(self.scoped_session, True) as session:  # Optuna's checks, the trial read once
            trial = trial_model.find_or_raise_by_id(trial_id_, session)
            self.check_trial_is_updatable(trial_id_, trial.state)
            upsert_rows(session.connection(), _models.TrialUserAttributeModel.__table__, trial_id_, "key",
                        {key: {"value_json": json.dumps(value)} for key, value in attrs.items()})
            unknown = {name for name, _, _, previous in held if previous is None}  # the cache knew no earlier trial's
            earlier = dict(session.query(param.param_name, param.distribution_json).distinct().join(trial_model).filter(
                trial_model.study_id == trial.study_id, param.param_name.in_(unknown)).all()) if unknown else {}
            for name, value, dist, previous in held:
                previous = previous or (dists.json_to_distribution(earlier[name]) if name in earlier else None)
                if previous is not None:
                    dists.check_distribution_compatibility(previous, dist)
                session.add(param(trial_id=trial_id_, param_name=name, param_value=value,
                                  distribution_json=dists.distribution_to_json(dist)))

    def record(self, trial_id_: int, *, steps: Sequence[tuple[int, float]] = (),
               user_attrs: dict[str, Any] | None = None, system_attrs: dict[str, Any] | None = None,
               heartbeat: bool = False) -> dict[str, Any]:
        """A running trial's intermediate values, user attrs and system attrs not set yet
        (constraints) in one transaction of plain statements (Optuna: some 60 round trips and an
        ORM object a row); returns the system attrs written. ``heartbeat``: its heartbeat too (the
        server's clock). All or nothing: a trial another process finished raises
        UpdateFinishedTrialError and nothing is written; a row another writer inserted first is
        given up, as Optuna's own sessions give it up (``ignore_integrity_error``)."""
        held = self.__dict__.get("_held_params", {}).get(threading.get_ident())  # params_held's, for this trial
        if held is not None and held[0] == trial_id_ and not (steps or system_attrs or heartbeat):
            held[2].update(user_attrs or {})
            return {}
        m, written = _models, {}
        try:
            with optuna_errors(), self.engine.begin() as conn:
                state = conn.execute(trial_state_statement(), {"trial_id": trial_id_}).scalar()
                if state is None:
                    raise KeyError(m.NOT_FOUND_MSG)
                self.check_trial_is_updatable(trial_id_, state)
                stored = {int(step): m.TrialIntermediateValueModel.intermediate_value_to_stored_repr(float(value))
                          for step, value in steps}
                upsert_rows(conn, m.TrialIntermediateValueModel.__table__, trial_id_, "step", {
                    step: {"intermediate_value": v, "intermediate_value_type": kind} for step, (v, kind) in stored.items()})
                upsert_rows(conn, m.TrialUserAttributeModel.__table__, trial_id_, "key",
                        {key: {"value_json": json.dumps(value)} for key, value in (user_attrs or {}).items()})
                if system_attrs:  # set once, as Optuna's set_constraint keeps them
                    written = upsert_rows(conn, m.TrialSystemAttributeModel.__table__, trial_id_, "key", {
                        key: {"value_json": json.dumps(value)} for key, value in system_attrs.items()}, update=False)
                    written = {key: system_attrs[key] for key in written}
                if heartbeat:
                    beat = m.TrialHeartbeatModel.__table__
                    if not conn.execute(beat.update().where(beat.c.trial_id == trial_id_)
                                        .values(heartbeat=sqlalchemy.func.now())).rowcount:
                        conn.execute(beat.insert().values(trial_id=trial_id_, heartbeat=sqlalchemy.func.now()))
        except sqlalchemy.exc.IntegrityError:
            return {}
        return written

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        changed = super().set_trial_state_values(trial_id, state, values)
        if changed and state == TrialState.RUNNING and self.beats_when_running:  # a WAITING trial popped
            self._first_beat(trial_id)
        return changed

    def beat_orphans(self, study_id: int) -> list[int]:
        """Give a first heartbeat (the server's ``now()``) to the study's RUNNING trials that
        have none; returns their ids. An ``ask`` that committed as the storage went has no beat
        and would never go stale; with this one it does a grace period later (never launched)."""
        with scoped_session(self) as session:
            running = {tid for (tid,) in session.query(_models.TrialModel.trial_id).filter(
                _models.TrialModel.study_id == study_id, _models.TrialModel.state == TrialState.RUNNING)}
            if not running:
                return []
            beaten = {tid for (tid,) in session.query(_models.TrialHeartbeatModel.trial_id).filter(
                _models.TrialHeartbeatModel.trial_id.in_(running))}
        orphans = sorted(running - beaten)
        for tid in orphans:
            self.record_heartbeat(tid)
        return orphans

    def fail_if_stale(self, trial_id_: int, attrs: StaleAttrs) -> bool:
        """FAIL a RUNNING trial whose heartbeat is older than the grace period, with ``attrs``
        (its status and message; or a function of the trial's user attrs as the locked row
        holds them, that returns them), in one transaction on the locked trial row. False when
        it is not RUNNING any more (its coordinator recorded it) or it beat again meanwhile.

        Optuna's own ``fail_stale_trials`` FAILs first and leaves the attrs to a callback, which
        cannot write them (a finished trial refuses user attrs): the FAIL carried no reason.
        """
        with scoped_session(self) as session:
            trial = _models.TrialModel.find_or_raise_by_id(trial_id_, session, for_update=True)
            if trial.state != TrialState.RUNNING:
                return False
            beat = _models.TrialHeartbeatModel.where_trial_id(trial_id_, session)
            now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)  # the server's clock
            if beat is None or now - beat.heartbeat <= self.grace:
                return False
            if callable(attrs):
                attrs = attrs({a.key: json.loads(a.value_json)
                               for a in _models.TrialUserAttributeModel.where_trial_id(trial_id_, session)})
            for key, value in attrs.items():
                self._set_trial_attr_without_commit(session, _models.TrialUserAttributeModel, trial_id_, key, value)
            trial.state = TrialState.FAIL
            trial.datetime_complete = datetime.datetime.now()
        return True


def fail_stale_trials(study: optuna.Study, attrs: StaleAttrs) -> list[FrozenTrial]:
    """FAIL the study's RUNNING trials whose heartbeat is older than the grace period, each
    with ``attrs`` (or ``attrs(its user attrs)``) written in the same transaction
    (:meth:`HeartbeatRDBStorage.fail_if_stale`);
    returns them, for the caller's retry. Staleness is judged on the database server's clock
    alone (heartbeats are written with its ``now()``): coordinators' clocks may differ."""
    rdb = rdb_storage(study)
    if not isinstance(rdb, HeartbeatRDBStorage) or rdb.heartbeat_interval is None:
        return []
    rdb.beat_orphans(study._study_id)  # noqa: SLF001 - a RUNNING trial with no beat goes stale too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        stale = rdb._get_stale_trial_ids(study._study_id)  # noqa: SLF001
    return [rdb.get_trial(t) for t in stale if rdb.fail_if_stale(t, attrs)]


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
              "RDBStorage._get_stale_trial_ids": lambda: optuna.storages.RDBStorage._get_stale_trial_ids,  # noqa: SLF001
              "RDBStorage._get_trials (what the study cache reads trials through)":
                  lambda: optuna.storages.RDBStorage._get_trials,  # noqa: SLF001
              "TrialUserAttributeModel.where_trial_id (fail_if_stale)":
                  lambda: _models.TrialUserAttributeModel.where_trial_id,
              "RDBStorage._set_trial_attr_without_commit (fail_if_stale, end_if_waiting)":
                  lambda: optuna.storages.RDBStorage._set_trial_attr_without_commit,  # noqa: SLF001
              "optuna.storages._rdb.storage._create_scoped_session": lambda: scoped_session(rdb),
              "Study._study_id": lambda: study._study_id,  # noqa: SLF001
              "Study._get_trials (what samplers read; StudyView)": lambda: study._get_trials(  # noqa: SLF001
                  deepcopy=False, states=None, use_cache=False),
              "RDBStorage._set_trial_param(_without_commit) (params_in_one_transaction)": lambda: (
                  optuna.storages.RDBStorage._set_trial_param, optuna.storages.RDBStorage._set_trial_param_without_commit),  # noqa: SLF001
              "RDBStorage's one-transaction writes (HeartbeatRDBStorage.record)": lambda: rdb.record(
                  trial._trial_id, steps=[(0, 1.0)], user_attrs={"checked": True})}  # noqa: SLF001
    missing = []
    for name, reach in checks.items():
        try:
            reach()
        except (AttributeError, TypeError, ImportError):
            missing.append(name)
    if not missing and rdb_storage(study) is not rdb:
        missing.append("the study cache's _backend is not the RDB storage it wraps")
    trial.set_constraint("checked", 1.0)
    if study.trials[0].system_attrs.get(f"{_CONSTRAINTS}:checked") != 1.0:
        missing.append(f"Trial.set_constraint's system attr `{_CONSTRAINTS}:<key>` (write_trial's constraints)")
    return missing
