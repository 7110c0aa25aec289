"""objectives/checkpoint.py: which checkpoint is the latest, the drill's arithmetic; and real
runs under torchrun (slow): an async save then a resume, and the failure drill (kill -9 one
rank, torchrun --max-restarts brings it back)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from objectives.checkpoint import checkpoint_folder, drill_report, latest_checkpoint

REPO = Path(__file__).resolve().parents[2]
from tests.objectives.test_fsdp_finetune import read_lines, trial_config  # noqa: E402


def test_latest_is_the_newest_complete_checkpoint(tmp_path):
    folder = checkpoint_folder(tmp_path, study="s", trial_number=2)
    assert latest_checkpoint(folder) is None
    for step, complete in ((4, True), (8, True), (12, False)):  # step 12 was cut short: no .metadata
        path = folder / f"step-{step:08d}"
        path.mkdir(parents=True)
        if complete:
            (path / ".metadata").write_bytes(b"x")
    (folder / "notes").mkdir()
    assert latest_checkpoint(folder) == (8, folder / "step-00000008")


def test_drill_report_splits_the_lost_time_into_its_parts():
    # 10 steps of 1 s from t=100; checkpoint at 5; killed at 109.5 (9 steps done); new
    # processes at 112, reload 1 s ending at 115; steps 5.. redone from t=116.
    events = [{"event": "step", "step": s, "seconds": 1.0, "unix_time": 101.0 + s} for s in range(9)]
    events += [{"event": "error", "kind": "error"},
               {"event": "resume", "step": 5, "reload_s": 1.0, "process_start": 112.0, "unix_time": 115.0}]
    events += [{"event": "step", "step": s, "seconds": 1.0, "unix_time": 116.0 + s - 5} for s in range(5, 12)]
    r = drill_report(events, kill_time=109.5, every=5)
    assert (r["checkpoint_step"], r["steps_done_before_kill"], r["steps_redone"]) == (5, 9, 4)
    assert (r["detection_s"], r["restart_s"], r["reload_s"]) == (2.5, 2.0, 1.0)
    assert r["lost_s"] == 120.0 - 109.5 and r["bound_s"] == 5.0 + 2.5 + 2.0 + 1.0


# ----------------------------------------------------------- real runs under torchrun

def start_torchrun(tmp_path, raw, name, *, extra=(), env=None):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps(raw))
    full_env = {**os.environ, "TUNER_TRIAL_CONFIG": str(run_dir / "trial.json"),
           "TUNER_RESULT_FILE": str(run_dir / "result.jsonl"), "PYTHONPATH": str(REPO), **(env or {})}
    log = open(run_dir / "torchrun.log", "wb")  # noqa: SIM115 - closed by the caller's wait
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             *extra, "-m", "objectives.fsdp_finetune"], cwd=REPO, env=full_env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    return proc, run_dir / "result.jsonl", log


def finish(proc, log, timeout=300):
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.slow
def test_async_save_then_a_new_run_resumes_from_the_latest(tmp_path):
    raw = trial_config(tmp_path, tp_degree=2)  # DCP of TP-sharded (DTensor) blocks
    raw["trial"].update(measure_steps=4, checkpoint_every=2, checkpoint_mode="async",
                        checkpoint_dir=str(tmp_path / "ckpt"))
    for name in ("first", "second"):
        proc, result, log = start_torchrun(tmp_path, raw, name)
        finish(proc, log)
        assert proc.returncode == 0, (tmp_path / name / "torchrun.log").read_text()[-3000:]
    first, second = read_lines(tmp_path / "first" / "result.jsonl"), read_lines(result)
    saved = first[-1]["checkpoint"]
    assert saved["mode"] == "async" and saved["saves"] == 2 and saved["bytes"] > 0
    assert saved["blocking_s_mean"] > 0 and saved["background_s_mean"] > 0
    resume = next(e for e in second if e["event"] == "resume")
    assert resume["step"] == 4 and second[-1]["checkpoint"]["resumed_from_step"] == 4
    assert [e["step"] for e in second if e["event"] == "step"] == [4]  # only the unsaved step runs again


def rank_pid(parent: int, rank: int) -> int | None:
    """The pid of torchrun's worker with RANK=rank (Linux /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rfind(")") + 2:].split()[1]) != parent:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"RANK={rank}".encode() in env:
            return int(entry.name)
    return None


def run_drill(tmp_path, raw, name, *, every, kill_after):
    """Start a run with one restart allowed, kill -9 rank 1 once step ``kill_after`` is done,
    wait for the restarted group: (torchrun's exit code, the result file, the kill's unix time)."""
    raw = {**raw, "trial": {**raw["trial"], "warmup_steps": 1, "measure_steps": 24, "checkpoint_every": every,
                            "checkpoint_mode": "sync", "checkpoint_dir": str(tmp_path / name / "ckpt")}}
    # A restarted worker group can read the previous attempt's addresses from torchrun's shared
    # store and fail to connect (pytorch/pytorch#135712); a store of the workers' own avoids it.
    proc, result, log = start_torchrun(tmp_path, raw, name, extra=("--max-restarts", "1"),
                                       env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [e["step"] for e in read_lines(result) if e["event"] == "step"] if result.exists() else []
            if steps and steps[-1] >= kill_after:
                break
            time.sleep(0.02)
        pid = rank_pid(proc.pid, 1)
        assert pid is not None, "no rank 1 under torchrun"
        os.kill(pid, signal.SIGKILL)
        kill_time = time.time()
    finally:
        finish(proc, log)
    return proc.returncode, result, kill_time


def restarted_rank_aborted(log: str) -> bool:
    """torchrun's root cause of the run's failure (printed once its restarts are spent: the
    restarted group's) is a worker that died of SIGABRT or SIGSEGV: a crash inside torch's C++
    runtime, which writes no line of the objective's."""
    root = log.rpartition("Root Cause")[2]
    return re.search(r"exitcode\s*:\s*-(6|11)\b", root) is not None


@pytest.mark.slow
def test_failure_drill_kill_one_rank_and_resume_from_the_checkpoint(tmp_path):
    every, kill_after = 5, 13  # kill once step 13 is done: the checkpoint at 10 is complete
    raw = trial_config(tmp_path, grad_accum=1)
    returncode, result, kill_time = run_drill(tmp_path, raw, "drill", every=every, kill_after=kill_after)
    log = (tmp_path / "drill" / "torchrun.log").read_text()
    if returncode != 0 and restarted_rank_aborted(log):
        # Once in CI (none in 53 runs here, with up to 3 busy loops beside), a rank of the restarted group
        # aborted inside torch ("terminate called without an active exception", gloo on CPU)
        # seconds after the restart. The drill measures the objective's recovery, so it runs
        # once more from scratch; a second abort fails. The workers' faulthandler stacks are in
        # the first log.
        print("\nrestarted group aborted inside torch; drill run again:\n" + log[-3000:])
        returncode, result, kill_time = run_drill(tmp_path, raw, "drill-again", every=every, kill_after=kill_after)
        log = (tmp_path / "drill-again" / "torchrun.log").read_text()
    assert returncode == 0, log[-3000:]
    events = read_lines(result)
    r = drill_report(events, kill_time=kill_time, every=every)
    print("\nfailure drill (2 CPU ranks, gloo, checkpoint every 5 steps, sync):")
    for key in ("checkpoint_step", "steps_done_before_kill", "steps_redone", "step_before_kill_s",
                "step_after_restart_s", "interval_s", "detection_s",
                "restart_s", "reload_s", "first_step_after_restart_s", "lost_s", "bound_s"):
        print(f"  {key:28s} {r[key]:.3f}" if isinstance(r[key], float) else f"  {key:28s} {r[key]}")
    assert r["checkpoint_step"] % every == 0 and r["checkpoint_step"] >= 10
    assert 0 <= r["steps_redone"] < every
    assert events[-1]["event"] == "summary" and events[-1]["checkpoint"]["resumed_from_step"] == r["checkpoint_step"]
    # With every - 1 steps redone at the slower rate the bound is met exactly: 1 us of float slack
    assert r["lost_s"] <= r["bound_s"] + 1e-6
