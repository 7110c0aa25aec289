"""Optuna's trial reads in two statements: the same FrozenTrials as ``RDBStorage`` builds.

Optuna's ``get_trial`` and ``_get_trials`` (what ``Study.get_trials`` reaches through its cache,
which re-reads every unfinished trial on every call) load a trial through the ORM: one query for
the trials, then one per relation (params, values, user attrs, system attrs, intermediate
values), each row made an ORM object first. A coordinator reads its running trial that way some
six times per trial (docs/benchmarks.md, "Speed"). Here the trials are one query, and every
related row of them one ``UNION ALL`` query, read as plain rows; the FrozenTrials are built as
Optuna builds them (``RDBStorage._build_frozen_trial_from_trial_model``), which
``tests/storage/test_optuna_reads.py`` checks field by field against Optuna's own on SQLite and
PostgreSQL. The trials are read before their rows, as Optuna reads them: a trial read FINISHED
has every row its finishing transaction wrote.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Container, Iterable
from typing import Any

import optuna
import sqlalchemy
from optuna import distributions
from optuna.storages._rdb import models as rdb_models  # Optuna's table models (as tuner.storage's internals)
from optuna.trial import FrozenTrial, TrialState

__all__ = ["read_trial", "read_trials", "read_study_user_attrs", "StudyView"]

_PARAM, _VALUE, _USER, _SYSTEM, _STEP = range(5)


def read_trial(engine: sqlalchemy.engine.Engine, trial_id: int) -> FrozenTrial:
    """``RDBStorage.get_trial``: KeyError when there is no such trial."""
    trial = rdb_models.TrialModel.__table__
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.select(*_trial_columns()).where(trial.c.trial_id == trial_id)).all()
        if not rows:
            raise KeyError(rdb_models.NOT_FOUND_MSG)
        return _build(rows, _related(conn, lambda table: table.c.trial_id == trial_id))[0]


def read_trials(engine: sqlalchemy.engine.Engine, study_id: int, states: Container[TrialState] | None,
                included_trial_ids: set[int], trial_id_greater_than: int) -> list[FrozenTrial]:
    """``RDBStorage._get_trials``: the study's trials in ``states`` (None: all) whose id is in
    ``included_trial_ids`` (those at most ``trial_id_greater_than`` count) or greater than
    ``trial_id_greater_than`` (-1: every trial), in id order. KeyError when there is no such study."""
    study, trial = rdb_models.StudyModel.__table__, rdb_models.TrialModel.__table__
    included = sorted(i for i in included_trial_ids if i <= trial_id_greater_than)
    which = [trial.c.study_id == study_id]
    if states is not None:
        assert isinstance(states, Iterable)
        which.append(trial.c.state.in_(list(states)))
    if trial_id_greater_than > -1:
        newer = trial.c.trial_id > trial_id_greater_than
        which.append(sqlalchemy.or_(trial.c.trial_id.in_(included), newer) if included else newer)
    # the study outer-joined: no row at all is a study that does not exist (Optuna's KeyError)
    query = (sqlalchemy.select(*_trial_columns())
             .select_from(study.outerjoin(trial, sqlalchemy.and_(*which)))
             .where(study.c.study_id == study_id).order_by(trial.c.trial_id))
    with engine.connect() as conn:
        rows = conn.execute(query).all()
        if not rows:
            raise KeyError(rdb_models.NOT_FOUND_MSG)
        rows = [r for r in rows if r.trial_id is not None]
        if not rows:
            return []
        chosen = sqlalchemy.select(trial.c.trial_id).where(*which).scalar_subquery()
        return _build(rows, _related(conn, lambda table: table.c.trial_id.in_(chosen)))


def read_study_user_attrs(engine: sqlalchemy.engine.Engine, study_id: int) -> dict[str, Any]:
    """``RDBStorage.get_study_user_attrs`` in one statement: KeyError when there is no such study."""
    study, attr = rdb_models.StudyModel.__table__, rdb_models.StudyUserAttributeModel.__table__
    query = (sqlalchemy.select(study.c.study_id, attr.c.key, attr.c.value_json)
             .select_from(study.outerjoin(attr, attr.c.study_id == study.c.study_id))
             .where(study.c.study_id == study_id).order_by(attr.c.study_user_attribute_id))
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    if not rows:
        raise KeyError(rdb_models.NOT_FOUND_MSG)
    return {key: json.loads(value) for _, key, value in rows if key is not None}


def _trial_columns() -> list[Any]:
    trial = rdb_models.TrialModel.__table__
    return [trial.c.trial_id, trial.c.number, trial.c.state, trial.c.datetime_start, trial.c.datetime_complete]


def _related(conn: Any, where: Any) -> list[Any]:
    """Every param, value, attr and intermediate value of the chosen trials, in one query, as
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
    query = sqlalchemy.union_all(
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
    return conn.execute(query).all()


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
