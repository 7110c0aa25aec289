"""Optuna's tables read and written in plain SQLAlchemy Core statements, built once each.

Reads: the same FrozenTrials as ``RDBStorage`` builds, in two statements.

Optuna's ``get_trial`` and ``_get_trials`` (what ``Study.get_trials`` reaches through its cache,
which re-reads every unfinished trial on every call) load a trial through the ORM: one query for
the trials, then one per relation (params, values, user attrs, system attrs, intermediate
values), each row made an ORM object first. A coordinator reads its running trial that way some
six times per trial (docs/benchmarks.md, "Speed"). Here the trials are one query, and every
related row of them one ``UNION ALL`` query, read as plain rows; the FrozenTrials are built as
Optuna builds them (``RDBStorage._build_frozen_trial_from_trial_model``), which
``tests/storage/test_optuna_core.py`` checks field by field against Optuna's own on SQLite and
PostgreSQL. The trials are read before their rows, as Optuna reads them: a trial read FINISHED
has every row its finishing transaction wrote.

Writes: :func:`upsert_rows` and :func:`trial_state_statement`, what tuner's one-transaction
writes (``HeartbeatRDBStorage.record``, ``params_held``) are made of. A statement's Python
objects are built once (``functools.cache``): building them cost more than running them.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

import optuna
import sqlalchemy
from optuna import distributions
from optuna.storages._rdb import models as rdb_models  # Optuna's table models (as tuner.storage's internals)
from optuna.trial import FrozenTrial, TrialState

__all__ = ["read_trial", "read_trials", "read_study_user_attrs", "upsert_rows", "trial_state_statement", "optuna_errors",
           "StudyView"]

_PARAM, _VALUE, _USER, _SYSTEM, _STEP = range(5)


@contextlib.contextmanager
def optuna_errors() -> Any:
    """A database error raised as Optuna's sessions raise it (StorageInternalError, the driver's
    error its cause), so callers of these statements see what callers of Optuna's see; an
    IntegrityError as it is (the writer decides)."""
    try:
        yield
    except sqlalchemy.exc.IntegrityError:
        raise
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise optuna.exceptions.StorageInternalError(
            "An exception is raised during the commit. This typically happens due to invalid data in the commit, "
            "e.g. exceeding max length. ") from exc


@optuna_errors()
def read_trial(engine: sqlalchemy.engine.Engine, trial_id: int) -> FrozenTrial:
    """``RDBStorage.get_trial``: KeyError when there is no such trial."""
    one, related = _statements_for_one()
    with engine.connect() as conn:
        rows = conn.execute(one, {"trial_id": trial_id}).all()
        if not rows:
            raise KeyError(rdb_models.NOT_FOUND_MSG)
        return _build(rows, conn.execute(related, {"trial_id": trial_id}).all())[0]


@optuna_errors()
def read_trials(engine: sqlalchemy.engine.Engine, study_id: int, states: Container[TrialState] | None,
                included_trial_ids: set[int], trial_id_greater_than: int) -> list[FrozenTrial]:
    """``RDBStorage._get_trials``: the study's trials in ``states`` (None: all) whose id is in
    ``included_trial_ids`` (those at most ``trial_id_greater_than`` count) or greater than
    ``trial_id_greater_than`` (-1: every trial), in id order. KeyError when there is no such study."""
    included = sorted(i for i in included_trial_ids if i <= trial_id_greater_than)
    if states is not None:
        assert isinstance(states, Iterable)
    trials, related = _statements_for_study(states is not None, bool(included), trial_id_greater_than > -1)
    values = {"study_id": study_id, "states": list(states or ()), "included": included,
              "after": trial_id_greater_than}
    with engine.connect() as conn:
        rows = conn.execute(trials, values).all()
        if not rows:  # the study outer-joined: no row at all is a study that does not exist (Optuna's KeyError)
            raise KeyError(rdb_models.NOT_FOUND_MSG)
        rows = [r for r in rows if r.trial_id is not None]
        return _build(rows, conn.execute(related, values).all()) if rows else []


@functools.cache
def _statements_for_one() -> tuple[Any, Any]:
    """The two statements of one trial's read, built once (SQLAlchemy then reuses their compiled form)."""
    trial = rdb_models.TrialModel.__table__
    return (sqlalchemy.select(*_trial_columns()).where(trial.c.trial_id == sqlalchemy.bindparam("trial_id")),
            _related(lambda table: table.c.trial_id == sqlalchemy.bindparam("trial_id")))


@functools.cache
def _statements_for_study(by_state: bool, included: bool, after: bool) -> tuple[Any, Any]:
    """The two statements of a study's read, built once per shape of its filter."""
    study, trial = rdb_models.StudyModel.__table__, rdb_models.TrialModel.__table__
    which = [trial.c.study_id == sqlalchemy.bindparam("study_id")]
    if by_state:
        which.append(trial.c.state.in_(sqlalchemy.bindparam("states", expanding=True)))
    if after:
        newer = trial.c.trial_id > sqlalchemy.bindparam("after")
        which.append(sqlalchemy.or_(trial.c.trial_id.in_(sqlalchemy.bindparam("included", expanding=True)), newer)
                     if included else newer)
    trials = (sqlalchemy.select(*_trial_columns())
              .select_from(study.outerjoin(trial, sqlalchemy.and_(*which)))
              .where(study.c.study_id == sqlalchemy.bindparam("study_id")).order_by(trial.c.trial_id))
    chosen = sqlalchemy.select(trial.c.trial_id).where(*which).scalar_subquery()
    return trials, _related(lambda table: table.c.trial_id.in_(chosen))


@optuna_errors()
def read_study_user_attrs(engine: sqlalchemy.engine.Engine, study_id: int) -> dict[str, Any]:
    """``RDBStorage.get_study_user_attrs`` in one statement: KeyError when there is no such study."""
    with engine.connect() as conn:
        rows = conn.execute(_study_attrs_statement(), {"study_id": study_id}).all()
    if not rows:
        raise KeyError(rdb_models.NOT_FOUND_MSG)
    return {key: json.loads(value) for _, key, value in rows if key is not None}


@functools.cache
def _study_attrs_statement() -> Any:
    study, attr = rdb_models.StudyModel.__table__, rdb_models.StudyUserAttributeModel.__table__
    return (sqlalchemy.select(study.c.study_id, attr.c.key, attr.c.value_json)
            .select_from(study.outerjoin(attr, attr.c.study_id == study.c.study_id))
            .where(study.c.study_id == sqlalchemy.bindparam("study_id")).order_by(attr.c.study_user_attribute_id))


def upsert_rows(conn: Any, table: Any, trial_id_: int, key: str, rows: Mapping[Any, dict[str, Any]], *,
                update: bool = True) -> list[Any]:
    """Write ``rows`` (a key's column values) of one trial: an UPDATE of the keys it holds (none
    where ``update`` is False) and one INSERT of the others; returns the keys inserted."""
    if not rows:
        return []
    held_keys, update_rows = _upsert_statements(table, key, tuple(next(iter(rows.values()))))
    held = set(conn.execute(held_keys, {"trial_id": trial_id_}).scalars())
    new = [k for k in rows if k not in held]
    if update and held & rows.keys():
        conn.execute(update_rows, [{"_trial_id": trial_id_, "_key": k, **{f"_{c}": v for c, v in rows[k].items()}}
                                   for k in rows if k in held])
    if new:
        conn.execute(table.insert(), [{"trial_id": trial_id_, key: k, **rows[k]} for k in new])
    return new


@functools.cache
def trial_state_statement() -> Any:
    trial = rdb_models.TrialModel.__table__
    return sqlalchemy.select(trial.c.state).where(trial.c.trial_id == sqlalchemy.bindparam("trial_id"))


@functools.cache
def _upsert_statements(table: Any, key: str, columns: tuple[str, ...]) -> tuple[Any, Any]:
    """:func:`upsert_rows`'s read of the keys a trial holds and its UPDATE, built once."""
    trial = sqlalchemy.bindparam("_trial_id")
    return (sqlalchemy.select(table.c[key]).where(table.c.trial_id == sqlalchemy.bindparam("trial_id")),
            table.update().where(table.c.trial_id == trial, table.c[key] == sqlalchemy.bindparam("_key"))
            .values({c: sqlalchemy.bindparam(f"_{c}") for c in columns}))


def _trial_columns() -> list[Any]:
    trial = rdb_models.TrialModel.__table__
    return [trial.c.trial_id, trial.c.number, trial.c.state, trial.c.datetime_start, trial.c.datetime_complete]


def _related(where: Any) -> Any:
    """The query of every param, value, attr and intermediate value of the chosen trials, as
    (kind, trial_id, row id, name, index, number, text, value type), in row-id order per kind."""
    m = rdb_models
    num, text, integer = sqlalchemy.Float(precision=53), sqlalchemy.Text(), sqlalchemy.Integer()

    def null(kind: Any) -> Any:
        return sqlalchemy.cast(sqlalchemy.null(), kind)

    def part(kind: int, table: Any, row_id: Any, name: Any, index: Any, number: Any, txt: Any, typ: Any) -> Any:
        return sqlalchemy.select(sqlalchemy.literal(kind, integer).label("kind"), table.c.trial_id.label("trial_id"),
                                 row_id.label("row_id"), name.label("name"), index.label("idx"),
                                 number.label("num"), txt.label("txt"), typ.label("typ")).where(where(table))

    p, v = m.TrialParamModel.__table__, m.TrialValueModel.__table__
    u, s = m.TrialUserAttributeModel.__table__, m.TrialSystemAttributeModel.__table__
    i = m.TrialIntermediateValueModel.__table__
    as_text = sqlalchemy.String(32)
    return sqlalchemy.union_all(
        part(_PARAM, p, p.c.param_id, sqlalchemy.cast(p.c.param_name, text), null(integer),
             sqlalchemy.cast(p.c.param_value, num), p.c.distribution_json, null(as_text)),
        part(_VALUE, v, v.c.trial_value_id, null(text), v.c.objective, sqlalchemy.cast(v.c.value, num),
             null(text), sqlalchemy.cast(v.c.value_type, as_text)),
        part(_USER, u, u.c.trial_user_attribute_id, sqlalchemy.cast(u.c.key, text), null(integer), null(num),
             u.c.value_json, null(as_text)),
        part(_SYSTEM, s, s.c.trial_system_attribute_id, sqlalchemy.cast(s.c.key, text), null(integer), null(num),
             s.c.value_json, null(as_text)),
        part(_STEP, i, i.c.trial_intermediate_value_id, null(text), i.c.step,
             sqlalchemy.cast(i.c.intermediate_value, num), null(text), sqlalchemy.cast(i.c.intermediate_value_type, as_text)),
    ).order_by("kind", "row_id")


def _local(utc: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores naive UTC and hands back naive local time (``TrialModel.datetime_start``)."""
    return None if utc is None else utc.replace(tzinfo=datetime.UTC).astimezone().replace(tzinfo=None)


def _build(trial_rows: list[Any], related: list[Any]) -> list[FrozenTrial]:
    m = rdb_models
    parts: dict[int, dict[str, Any]] = {r.trial_id: {"params": {}, "dists": {}, "values": {}, "user": {},
                                                     "system": {}, "steps": {}} for r in trial_rows}
    for kind, tid, _, name, idx, number, txt, typ in related:
        held = parts.get(tid)
        if held is None:  # a trial that appeared between the two reads: read next time, as it is then
            continue
        if kind == _PARAM:
            dist = distributions.json_to_distribution(txt)
            held["dists"][name], held["params"][name] = dist, dist.to_external_repr(number)
        elif kind == _VALUE:
            held["values"][idx] = m.TrialValueModel.stored_repr_to_value(number, m.TrialValueModel.TrialValueType[typ])
        elif kind == _USER:
            held["user"][name] = json.loads(txt)
        elif kind == _SYSTEM:
            held["system"][name] = json.loads(txt)
        else:
            held["steps"][idx] = m.TrialIntermediateValueModel.stored_repr_to_intermediate_value(
                number, m.TrialIntermediateValueModel.TrialIntermediateValueType[typ])
    out = []
    for r in trial_rows:
        held = parts[r.trial_id]
        values = [held["values"][k] for k in sorted(held["values"])] if held["values"] else None
        out.append(FrozenTrial(number=r.number, state=r.state, value=None, values=values,
                               datetime_start=_local(r.datetime_start), datetime_complete=_local(r.datetime_complete),
                               params=held["params"], distributions=held["dists"], user_attrs=held["user"],
                               system_attrs=held["system"], intermediate_values=held["steps"], trial_id=r.trial_id))
    return out


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
