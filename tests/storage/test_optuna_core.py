"""tuner's two-statement trial reads build the FrozenTrials Optuna's own reads build."""

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from tuner.storage import open_storage, rdb_storage, study_storage, trial_id


def _varied_study(storage, directions=("maximize", "minimize")):
    """Trials in every state, with every kind of param, value, attr and intermediate value."""
    study = optuna.create_study(storage=storage, directions=list(directions))
    dists = {"lr": FloatDistribution(1e-5, 1e-1, log=True), "frac": FloatDistribution(0.0, 1.0, step=0.25),
             "layers": IntDistribution(1, 64, log=True), "mb": IntDistribution(1, 16, step=3),
             "algo": CategoricalDistribution(["Ring", None, True, 2.5, 7])}
    values = [(1.5, -math.inf), (math.inf, 0.0), (-2.0, 3.25)]
    for i, (a, b) in enumerate(values):
        t = study.ask()
        t.suggest_float("lr", 1e-5, 1e-1, log=True)
        t.suggest_float("frac", 0.0, 1.0, step=0.25)
        t.suggest_int("layers", 1, 64, log=True)
        t.suggest_int("mb", 1, 16, step=3)
        t.suggest_categorical("algo", ["Ring", None, True, 2.5, 7])
        for step, v in enumerate([1000.0 + i, math.nan, math.inf, -math.inf, 3.0]):
            study_storage(study).set_trial_intermediate_value(trial_id(t), step * 7, v)  # report() is single-objective
        t.set_user_attr("status", "ok")
        t.set_user_attr("nested", {"a": [1, 2, {"b": None}], "c": "d"})
        t.set_user_attr("zero", 0)
        t.set_constraint("failed", 0.0)
        study.tell(t, [a, b][:len(directions)])
    pruned = study.ask(dists)
    study_storage(study).set_trial_intermediate_value(trial_id(pruned), 1, 5.0)
    study.tell(pruned, state=TrialState.PRUNED)
    failed = study.ask({"algo": dists["algo"]})
    failed.set_user_attr("status", "oom")
    study.tell(failed, state=TrialState.FAIL)
    study.enqueue_trial({"mb": 4, "algo": None}, user_attrs={"role": "ablation"})
    running = study.ask({"lr": dists["lr"]})  # pops the queued one: its fixed params and attrs, and lr
    running.set_user_attr("reserved_gpu_seconds", 120.0)
    study.enqueue_trial({"mb": 7}, user_attrs={"role": "retry"})  # stays WAITING
    return study


def _optuna_storage(url):
    """Optuna's own RDB storage on the same database: the reference."""
    return optuna.storages.RDBStorage(url)


def _fields(trial):
    """Every field a FrozenTrial compares on, NaNs made comparable."""
    def same(v):
        return "nan" if isinstance(v, float) and math.isnan(v) else v
    return (trial.number, trial.state, trial.values, trial.datetime_start, trial.datetime_complete, trial.params,
            trial.distributions, trial.user_attrs, trial.system_attrs,
            {k: same(v) for k, v in trial.intermediate_values.items()}, trial_id(trial))


@pytest.mark.parametrize("directions", [("maximize", "minimize"), ("maximize",)])
def test_reads_build_the_trials_optuna_builds(storage_url, directions):
    """get_trial and every filter of _get_trials the study cache uses (all, newer than an id, the
    unfinished ids it holds, by state) give the same trials, field by field, as Optuna's ORM reads;
    a study's own reads through its cache too."""
    storage = open_storage(storage_url)
    study = _varied_study(storage, directions)
    mine, theirs = rdb_storage(study), _optuna_storage(storage_url)
    sid = study._study_id
    everyone = theirs._get_trials(sid, None, set(), -1)
    assert len(everyone) == 7 and {t.state for t in everyone} == set(TrialState)
    ids = [trial_id(t) for t in everyone]
    cases = [(None, set(), -1), (None, set(), ids[2]), (None, {ids[0], ids[6]}, ids[4]), (None, {ids[6]}, ids[6]),
             ((TrialState.COMPLETE, TrialState.WAITING), set(), -1), ((TrialState.RUNNING,), {ids[1]}, ids[3]),
             ((TrialState.FAIL,), set(), ids[-1])]
    for states, included, after in cases:
        want = theirs._get_trials(sid, states, included, after)
        got = mine._get_trials(sid, states, included, after)
        assert [_fields(t) for t in got] == [_fields(t) for t in want], (states, included, after)
    for tid in ids:
        assert _fields(mine.get_trial(tid)) == _fields(theirs.get_trial(tid))
    assert [_fields(t) for t in study.get_trials()] == [_fields(t) for t in everyone]
    theirs.engine.dispose()


def test_reads_of_what_is_not_there_raise_as_optuna_does(storage_url):
    storage = open_storage(storage_url)
    study = optuna.create_study(storage=storage)
    mine = rdb_storage(study)
    assert mine._get_trials(study._study_id, None, set(), -1) == []
    with pytest.raises(KeyError):
        mine.get_trial(10**6)
    with pytest.raises(KeyError):
        mine._get_trials(10**6, None, set(), -1)


def test_the_running_trial_reads_in_two_statements(pg_url):
    """The reason for the module: a study cache's read of one running trial is two statements
    (Optuna's: six), and a read with nothing new is one."""
    import sqlalchemy

    study = _varied_study(open_storage(pg_url))
    first = trial_id(study.get_trials()[0])
    statements = []
    engine = rdb_storage(study).engine
    sqlalchemy.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    study.get_trials(deepcopy=False)   # re-reads the unfinished trials (one RUNNING, one WAITING)
    assert len(statements) == 2
    rdb_storage(study).get_trial(first)
    assert len(statements) == 4


def test_study_user_attrs_read_as_optuna_core_them(storage_url):
    storage = open_storage(storage_url)
    study = optuna.create_study(storage=storage)
    assert rdb_storage(study).get_study_user_attrs(study._study_id) == {}
    for key, value in {"ablation_planned": True, "baseline": {"micro_batch": 4, "nccl": None}, "n": 3}.items():
        study.set_user_attr(key, value)
    study.set_user_attr("n", 4)
    theirs = _optuna_storage(storage_url)
    assert rdb_storage(study).get_study_user_attrs(study._study_id) == theirs.get_study_user_attrs(study._study_id)
    assert study.user_attrs["n"] == 4
    with pytest.raises(KeyError):
        rdb_storage(study).get_study_user_attrs(10**6)
    theirs.engine.dispose()


def test_a_database_error_is_raised_as_optunas_sessions_raise_it(tmp_path):
    """StorageInternalError with the driver's error as its cause, as Optuna's own reads and
    writes raise it: what tuner's retries (tuner.storage) and users' scripts expect."""
    import sqlalchemy

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 't.db'}"))
    trial = study.ask()
    storage = rdb_storage(study)
    with storage.engine.begin() as conn:
        conn.execute(sqlalchemy.text("DROP TABLE trial_user_attributes"))
    for call in (lambda: storage.get_trial(trial_id(trial)), lambda: storage._get_trials(study._study_id, None, set(), -1),
                 lambda: storage.record(trial_id(trial), user_attrs={"status": "ok"})):
        with pytest.raises(optuna.exceptions.StorageInternalError) as raised:
            call()
        assert isinstance(raised.value.__cause__, sqlalchemy.exc.OperationalError)
