"""The circuit breaker: a study whose trials keep failing the same way stops, says why once,
and exits non-zero, instead of burning its budget (issue 18, item 1)."""

import os
import re
import subprocess
import sys

import optuna
import pytest

from tests.spine_helpers import fast_spec
from tuner.errors import CircuitBreakerError
from tuner.launch import Launcher, TrialResult
from tuner.study import CircuitBreaker, RunOptions, run_study, signature


class SameErrorLauncher(Launcher):
    name = "broken"

    def launch(self, request):
        return TrialResult(status="error", launcher="broken", world_size=2, gpu_seconds=1.0, wall_seconds=0.5,
                           message=f"exit 1: StopIteration (runs/fast/trial-{request.number:04d}/result.jsonl)")


def test_three_same_errors_trip_it_oom_and_other_errors_do_not():
    breaker = CircuitBreaker(limit=3)
    for n, status in enumerate(["oom", "oom", "oom", "oom"]):   # configs out of memory: the search's finding
        breaker.observe(n, status, "CUDA out of memory")
    breaker.observe(4, "error", "exit 1: ImportError: no module named x")
    breaker.observe(5, "error", "exit 1: StopIteration (trial-0005)")
    breaker.observe(6, "error", "exit 1: StopIteration (trial-0006)")
    with pytest.raises(CircuitBreakerError, match=r"^stopped: trials 5, 6, 7 failed with the same error: "
                                                  r"exit 1: StopIteration \(trial-0007\); .*--max-same-errors 0"):
        breaker.observe(7, "error", "exit 1: StopIteration (trial-0007)")
    assert signature("error", "trial 12 on port 29500") == signature("error", "trial 3 on port 29611")
    tree = CircuitBreaker(limit=3)                 # an error that follows a knob value is the search's finding
    for n, mb in enumerate([1, 2, 4, 8]):
        tree.observe(n, "error", "no algorithm/protocol available", {"nccl_algo": "Tree", "micro_batch": mb})
    with pytest.raises(CircuitBreakerError, match="trials 0, 1, 2, 3, 4 failed"):
        tree.observe(4, "error", "no algorithm/protocol available", {"nccl_algo": "Ring", "micro_batch": 1})
    never = CircuitBreaker(limit=0)
    for n in range(10):
        never.observe(n, "error", "same")


def test_a_study_stops_after_three_same_errors_with_the_budget_mostly_left(tmp_path):
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    with pytest.raises(CircuitBreakerError, match=r"trials 0, 1, 2(, \d+)* failed with the same error"):
        run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=100.0),
                  launcher=SameErrorLauncher(spec))
    trials = optuna.load_study(study_name="fast", storage=db).trials
    assert 3 <= len(trials) <= 6 and not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    # the setting it names lets a user go on anyway
    run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=10.0,
                               max_same_errors=0), launcher=SameErrorLauncher(spec))
    assert len(optuna.load_study(study_name="fast", storage=db).trials) > len(trials)


@pytest.mark.slow
def test_tuner_run_whose_trials_all_crash_stops_after_three_with_the_reason(tmp_path):
    """Real torchrun trials failing the same way (a failure preflight cannot see: a custom
    workload that crashes): `tuner run` stops after 3, prints the reason once, exits 2."""
    spec = fast_spec(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "run", "--study", spec.source_path,
                           "--storage", f"sqlite:///{tmp_path}/t.db", "--budget", "0.5gpuh",
                           "--runs-dir", str(tmp_path / "runs")],
                          env={**os.environ, "FAST_OBJECTIVE_MODE": "crash"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.match(r"tuner run: error: stopped: trials 0, 1, 2(, \d+)* failed with the same error: ", last)
    assert proc.stderr.count("failed with the same error") == 1
    study = optuna.load_study(study_name="fast", storage=f"sqlite:///{tmp_path}/t.db")
    assert 3 <= len(study.trials) <= 6
    assert sum(t.user_attrs["gpu_seconds"] for t in study.trials) < 0.05 * 0.5 * 3600   # the budget was not burnt
