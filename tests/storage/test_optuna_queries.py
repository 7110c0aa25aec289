"""tuner's own few-column queries of Optuna's tables give what Optuna's full reads give."""

import datetime

import optuna

from tuner.storage import open_storage, rdb_storage


def _mixed_study(storage):
    """Trials in every state the ledger tells apart, with ledger attrs and others beside them."""
    study = optuna.create_study(storage=storage)
    done = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    for key, value in {"gpu_seconds": 40.0, "status": "ok", "warm": True, "worker_startup_gpu_seconds": 5.0,
                       "message": "not a ledger attr"}.items():
        done.set_user_attr(key, value)
    study.tell(done, 1.0)
    failed = study.ask()
    failed.set_user_attr("gpu_seconds", 90.0)
    failed.set_user_attr("status", "oom")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    running = study.ask()
    running.set_user_attr("reserved_gpu_seconds", 120.0)
    study.enqueue_trial({"x": 0.5}, user_attrs={"role": "ablation"})
    recovered = study.ask()
    recovered.set_user_attr("recovered_from", failed.number)
    recovered.set_user_attr("ran_gpu_seconds", 7.0)
    return study


def test_the_ledger_view_gives_the_budget_what_full_trials_give(storage_url):
    """One query with only the ledger's attrs, on the lock's connection or a session of its own:
    the ledger, the cap basis and the cost estimate come out the same as from full trials."""
    from tuner import budget
    from tuner.storage import admission_lock, ledger_view

    study = _mixed_study(open_storage(storage_url))
    full = study.get_trials(deepcopy=False)
    with admission_lock(rdb_storage(study), study.study_name) as held:
        views = [ledger_view(study, budget.LEDGER_ATTRS), ledger_view(study, budget.LEDGER_ATTRS, conn=held)]
    assert (held is not None) == storage_url.startswith("postgresql")   # PostgreSQL lends its lock's connection
    for view in views:
        assert [(t.number, t.state) for t in view] == [(t.number, t.state) for t in full]
        assert "message" not in view[0].user_attrs
        assert budget.ledger_from_trials(view, 1000.0) == budget.ledger_from_trials(full, 1000.0)
        assert (budget.cap_basis(view, first_estimate_gpu_seconds=1.0)
                == budget.cap_basis(full, first_estimate_gpu_seconds=1.0) == 40.0)
        assert budget.costs_from_trials(view) == budget.costs_from_trials(full)


def test_ledger_attrs_name_every_attr_the_budget_reads():
    """A key read by the ledger or the costs but missing from LEDGER_ATTRS would read as absent
    under the lock (tuner.storage.ledger_view) and silently change the budget."""
    import ast
    import inspect

    from tuner import budget

    read = set()
    for fn in (budget.ledger_from_trials, budget.costs_from_trials):
        for node in ast.walk(ast.parse(inspect.getsource(fn))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                read.add(node.args[0].value)
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                read.add(node.slice.value)
    assert read and read <= set(budget.LEDGER_ATTRS), read - set(budget.LEDGER_ATTRS)


def test_upkeep_is_due_only_for_a_trial_without_a_beat_or_with_a_stale_one(storage_url):
    from tuner.storage import fail_stale_trials, upkeep_due

    storage = open_storage(storage_url, grace_period_s=60)
    beats = optuna.storages._rdb.models.TrialHeartbeatModel  # noqa: SLF001
    study = optuna.create_study(storage=storage)
    assert not upkeep_due(study)                      # nothing running
    trial = study.ask()                               # beaten the moment it runs
    assert not upkeep_due(study)
    with storage.scoped_session() as session:         # its beat lost (an ask that committed as the storage went)
        session.query(beats).delete()
        session.commit()
    assert upkeep_due(study)                          # an orphan to beat
    assert fail_stale_trials(study, {"status": "lost"}) == []   # beaten now, not yet stale
    assert not upkeep_due(study)
    with storage.scoped_session() as session:         # its coordinator stopped beating an hour ago
        row = session.query(beats).one()
        row.heartbeat = row.heartbeat - datetime.timedelta(hours=1)
        session.commit()
    assert upkeep_due(study)
    assert [t.number for t in fail_stale_trials(study, {"status": "lost"})] == [trial.number]
    assert not upkeep_due(study)


def test_trial_state_reads_the_state_the_storage_holds(storage_url):
    from tuner.storage import trial_state

    for storage in (open_storage(storage_url), None):   # tuner's RDB storage, and in memory
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        assert trial_state(study, trial) == optuna.trial.TrialState.RUNNING
        study.tell(trial, 1.0)
        assert trial_state(study, trial) == optuna.trial.TrialState.COMPLETE
