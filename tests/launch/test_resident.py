"""Resident workers through the local launcher: real torchrun jobs (2 processes) of a fake
workload that implements the resident mode (tests/fixtures/resident_objective.py)."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spine_helpers import fast_spec
from tuner.launch import TrialRequest, get_launcher
from tuner.spec import complete_params

pytestmark = pytest.mark.slow  # torchrun jobs

RESIDENT = Path(__file__).resolve().parents[1] / "fixtures" / "resident_objective.py"
REPO = Path(__file__).resolve().parents[2]


def resident_spec(tmp_path, **trial):
    spec = fast_spec(tmp_path)
    return dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, command=(str(RESIDENT),), **trial))


def request(spec, tmp_path, number, **params):
    return TrialRequest(study_name=spec.study.name, number=number, params=complete_params(params, spec),
                        spec=spec, run_dir=tmp_path / f"trial-{number}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:  # it ended between the kill(0) and the read
        return False


def test_one_worker_runs_several_configs_and_charges_each_its_own_time(tmp_path):
    spec = resident_spec(tmp_path)
    launcher = get_launcher(spec)
    try:
        assert not launcher.warm()
        first = launcher.launch(request(spec, tmp_path, 0, micro_batch=1))
        assert launcher.warm()
        second = launcher.launch(request(spec, tmp_path, 1, micro_batch=2, nccl_algo="Ring"))
        oom = launcher.launch(request(spec, tmp_path, 2, micro_batch=64))
        after = launcher.launch(request(spec, tmp_path, 3, micro_batch=4))
    finally:
        launcher.close()
    assert [r.status for r in (first, second, oom, after)] == ["ok", "ok", "oom", "ok"]
    assert [r.tokens_per_sec_per_gpu for r in (first, second, after)] == pytest.approx([1000.0, 2000.0, 4000.0])
    assert first.extra["pid"] == second.extra["pid"] == after.extra["pid"]       # one worker, OOM recovered
    assert (first.extra["warm"], second.extra["warm"], after.extra["warm"]) == (False, True, True)
    assert first.extra["worker_startup_gpu_seconds"] == pytest.approx(2 * 0.5)   # charged to the first trial
    assert "worker_startup_gpu_seconds" not in second.extra
    for r in (first, second, oom, after):
        assert r.gpu_seconds == pytest.approx(2 * r.wall_seconds)
    assert not alive(first.extra["pid"])                                          # close() stopped it


def test_a_cold_command_still_works_one_launch_per_trial(tmp_path):
    spec = fast_spec(tmp_path)              # fast_objective.py ignores TUNER_WORKER_DIR
    launcher = get_launcher(spec)
    try:
        results = [launcher.launch(request(spec, tmp_path, n, micro_batch=m)) for n, m in enumerate((1, 2))]
        assert not launcher.warm()
    finally:
        launcher.close()
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.extra["warm"] for r in results] == [False, False]
    assert [r.tokens_per_sec_per_gpu for r in results] == pytest.approx([1000.0, 2000.0])


def test_a_warm_trial_that_hangs_times_out_and_the_next_starts_a_fresh_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDENT_OBJECTIVE_MODE", "hang")
    spec = resident_spec(tmp_path, timeout_s=25)  # the first (cold) trial starts a worker: seconds on a loaded machine
    launcher = get_launcher(spec)
    try:
        first = launcher.launch(request(spec, tmp_path, 0, micro_batch=1))
        hung = launcher.launch(request(spec, tmp_path, 1, micro_batch=2))
        assert not launcher.warm()
        monkeypatch.delenv("RESIDENT_OBJECTIVE_MODE")
        fresh = launcher.launch(request(spec, tmp_path, 2, micro_batch=2))
    finally:
        launcher.close()
    assert (first.status, hung.status, fresh.status) == ("ok", "timeout", "ok")
    assert not alive(first.extra["pid"])                  # the hung worker was killed
    assert fresh.extra["warm"] is False and fresh.extra["pid"] != first.extra["pid"]


_COORDINATOR = """
import signal, sys
# Ctrl-C raises, as in a terminal, even where the suite was started with SIGINT ignored (inherited)
signal.signal(signal.SIGINT, signal.default_int_handler)
from tuner.study import RunOptions, run_study
import dataclasses
from tests.spine_helpers import fast_spec
from pathlib import Path
spec = fast_spec(Path({tmp!r}), timeout_s=600)
spec = dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, command=({cmd!r},)))
run_study(spec, RunOptions(storage_url="sqlite:///{tmp}/t.db", runs_dir=Path({tmp!r}) / "runs",
                           budget_gpu_seconds=1e6, ablation=False))
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_orphans_when_the_coordinator_is_stopped(tmp_path, monkeypatch, how):
    monkeypatch.setenv("RESIDENT_OBJECTIVE_MODE", "hang")   # the worker sits in its second job
    script = tmp_path / "coordinator.py"
    script.write_text(_COORDINATOR.format(tests=str(Path(__file__).resolve().parents[1]), tmp=str(tmp_path), cmd=str(RESIDENT)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        announced = None
        deadline = time.monotonic() + 90
        while announced is None and time.monotonic() < deadline:
            found = list((tmp_path / "runs").glob("*/trial-*/worker/job-00001.json"))
            announced = found[0].parent / "worker.json" if found else None
            time.sleep(0.2)
        assert announced is not None, "the worker never got a second job"
        import json
        pid = json.loads(announced.read_text())["pid"]
        assert alive(pid)
        proc.send_signal(how)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
