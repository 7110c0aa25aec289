"""Honest accounting: budget-cap kills, dead coordinators, extended budgets, budgets spent."""

import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.spine_helpers import fast_spec
from tests.study.test_coordinator import FakeLauncher
from tuner.budget import ledger_from_trials
from tuner.launch import Launcher, TrialResult
from tuner.report import render_recipe
from tuner.search import suggest_params
from tuner.stats import analyze_study
from tuner.storage import rdb_storage, trial_id
from tuner.study import Heartbeat, RunOptions, open_study, run_study


class CostlyThird(Launcher):
    """10 GPU-s a trial, but trial 2 needs 20: with 15 left it is cut at its cap."""

    name = "fake"

    def launch(self, request):
        cost = 20.0 if request.number == 2 else 10.0
        if cost > request.max_gpu_seconds:
            return TrialResult(status="timeout", launcher="fake", world_size=2, gpu_seconds=request.max_gpu_seconds,
                               wall_seconds=request.max_gpu_seconds / 2, message="killed at its cap")
        return TrialResult(status="ok", launcher="fake", world_size=2, gpu_seconds=cost, wall_seconds=cost / 2,
                           step_values=tuple((s, 100.0 * (1 + request.params["micro_batch"]) + s) for s in range(4)))


def test_a_trial_cut_by_the_budget_is_stopped_by_budget_not_a_timeout_to_avoid(tmp_path):
    """Before: stored as `timeout`, and RECIPE said "Avoid: ...: 1 of 1 failed (1 timeout)"."""
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    summary = run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=35.0),
                        launcher=CostlyThird(spec))
    study = optuna.load_study(study_name="fast", storage=db)
    cut = study.trials[2]
    assert cut.state == TrialState.FAIL and cut.user_attrs["status"] == "stopped_by_budget"
    assert cut.user_attrs["gpu_seconds"] == 15.0 and "budget" in cut.user_attrs["message"]
    assert not [t for t in study.trials if t.user_attrs.get("retry_of") == 2]        # not retried
    assert "constraints:failed" not in cut.system_attrs                               # does not steer the sampler
    assert summary.statuses.get("stopped_by_budget") == 1 and "timeout" not in summary.statuses
    analysis = analyze_study(study, n_boot=0)
    assert analysis["n_stopped_by_budget"] == 1 and analysis["n_failed"]["timeout"] == 0
    assert "Avoid" not in render_recipe(analysis)


def test_a_dead_coordinators_trial_is_charged_the_time_it_ran_not_its_reservation(tmp_path):
    """Before: kill -9 charged the whole reservation (3x the estimate) for a trial that ran seconds."""
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    study, limit = open_study(spec, storage_url=db, budget_gpu_seconds=100.0)
    dead = study.ask()
    suggest_params(dead, spec)
    dead.set_user_attr("reserved_gpu_seconds", 60.0)
    with Heartbeat(rdb_storage(study), trial_id(dead), 0.2, gpus=2, reserved_gpu_seconds=60.0):
        time.sleep(0.7)                                     # it ran ~0.7 s on 2 GPUs, then its coordinator died
    ran = optuna.load_study(study_name="fast", storage=db).trials[0].user_attrs["ran_gpu_seconds"]
    assert 1.0 <= ran <= 3.0                                # 2 x (0.6 + one 0.2 s beat ahead)
    run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", grace_period_s=1),
              launcher=FakeLauncher(spec))
    trials = optuna.load_study(study_name="fast", storage=db).trials
    assert trials[0].state == TrialState.FAIL
    charged = {e.number: e.charged_gpu_seconds for e in ledger_from_trials(trials, limit).entries}
    assert charged[0] == pytest.approx(ran)                 # not 60
    assert any(t.user_attrs.get("retry_of") == 0 for t in trials)


def test_extending_a_finished_study_searches_on_and_plans_the_ablation_again(tmp_path):
    """Before: `--budget 80gpuh` on a finished 40 GPU-h study ran 0 trials."""
    spec = fast_spec(tmp_path, ablation_share=0.2)
    db = f"sqlite:///{tmp_path}/t.db"
    first = run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=100.0),
                      launcher=FakeLauncher(spec))
    study = optuna.load_study(study_name="fast", storage=db)
    rounds_before = {t.user_attrs["ablation_round"] for t in study.trials if t.user_attrs.get("role") == "ablation"}
    assert first.used_gpu_seconds >= 90.0 and rounds_before == {1}
    second = run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=160.0),
                       launcher=FakeLauncher(spec))
    study = optuna.load_study(study_name="fast", storage=db)
    assert second.launched >= 4 and second.used_gpu_seconds >= 150.0
    rounds = {t.user_attrs["ablation_round"] for t in study.trials if t.user_attrs.get("role") == "ablation"}
    assert rounds == {1, 2}                                 # the ablation re-planned against 160
    first_round = min(t.number for t in study.trials if t.user_attrs.get("ablation_round") == 1)
    searched_after = [t for t in study.trials if t.number > first_round and not t.user_attrs.get("role")
                      and t.state == TrialState.COMPLETE]
    assert searched_after                                   # the search went on
    assert study.user_attrs["budget_extended_from_gpu_seconds"] == 100.0


@pytest.mark.slow
def test_a_sim_budget_is_spent_not_left_over_after_the_ablation(tmp_path):
    """Before: a 400 GPU-h sim run stopped at 345 GPU-h ("stopped: budget", 55 left, 86%) once
    the ablation was done. The same command at 40 GPU-h, which takes minutes, not half an hour
    (the 400 GPU-h run, >= 98%, is in issue 18's closing note). At 40 GPU-h one trial is ~2-3%
    of the budget, so what is left when the next one no longer fits can be that much."""
    import subprocess
    import sys
    from pathlib import Path

    # the shipped spec with random search: the accounting is the sampler's business nowhere, and the
    # model-guided sampler's refits would be most of the test's minutes
    shipped = Path(__file__).resolve().parents[2] / "studies" / "llama7b-h100x32.toml"
    spec = tmp_path / "llama7b-h100x32.toml"
    spec.write_text(shipped.read_text().replace('sampler = "auto"', 'sampler = "random"', 1))
    assert 'sampler = "random"' in spec.read_text()
    db = f"sqlite:///{tmp_path}/t.db"
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "run", "--study", str(spec), "--launcher", "sim",
                           "--budget", "40gpuh", "--storage", db, "--quiet", "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    study = optuna.load_study(study_name="llama7b-h100x32-sim", storage=db)
    used = ledger_from_trials(study.trials, 40 * 3600).used_gpu_seconds
    assert used >= 0.95 * 40 * 3600 and used <= 40 * 3600 + 1e-6
    assert any(t.user_attrs.get("role") == "ablation" and t.state == TrialState.COMPLETE for t in study.trials)
    launched = [t for t in study.trials if t.user_attrs.get("status") not in ("repeat", "skipped", "pruned")]  # ran
    keys = [repr(sorted(t.params.items())) for t in launched if not t.user_attrs.get("role")
            and "retry_of" not in t.user_attrs]
    assert len(keys) == len(set(keys))                       # no accidental repeat was launched
