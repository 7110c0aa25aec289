"""tuner.runbook_script: the runbook's batch script, and three allocations of it on a real local Slurm.

The slow test runs the rendered script (torchrun included) with a one-minute limit and the warning
25 s before it (Slurm may send it up to 30 s earlier still, so 25-55 s before the limit, never in
the allocation's first 5 s; the step is killed 8 s before the limit if it has not stopped);
tests/fixtures/requeue_train.py stands in for train.py. Each allocation must end on the warning
with a checkpoint, and the next must resume from exactly that step.
"""

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helper import plan_training
from tuner.plan import BatchScript, batch_script, plan_batch_script

TRAIN = Path(__file__).resolve().parents[1] / "fixtures" / "requeue_train.py"


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, tokens=100e9)


def test_the_warning_goes_to_the_batch_shell_which_checkpoints_and_requeues(plan13):
    # issue 31 item 1: --signal=USR1@120 without B: killed torchrun; a time-limit kill is never requeued
    text = batch_script(plan_batch_script(plan13))
    assert "#SBATCH --signal=B:USR1@" in text and "trap on_warning USR1" in text
    assert 'touch "$STOP_FILE"' in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "--max-restarts=0" in text and "#SBATCH --requeue" in text
    ck = plan13["checkpoint"]
    assert f"--collective-timeout-s {ck['collective_timeout_s']}" in text
    assert f"--init-timeout-s {ck['init_timeout_s']}" in text and "HEARTBEAT" not in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    # Slurm may send the warning at the allocation's start: the trap comes before any other command
    commands = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert commands.index("trap on_warning USR1") < commands.index(next(c for c in commands if c.startswith("set ")))


@pytest.mark.parametrize("gpus", [1, 4, 8, 12, 16, 24, 32, 256])
def test_processes_launched_equal_gpus_planned(gpus):
    # issue 31 item 2: --gpus 12 launched 2 x 8 = 16 processes
    plan = plan_training("1.3b" if gpus < 4 else "7b", gpus, tokens=50e9)
    s = plan_batch_script(plan)
    text = batch_script(s)
    assert s.nodes * s.gpus_per_node == gpus
    assert f"--nproc-per-node={s.gpus_per_node}" in text and f"TRAIN_NODES={s.nodes}" in text
    assert f"#SBATCH --gpus-per-node={s.gpus_per_node}" in text


def test_spare_nodes_are_allocated_and_kept_through_a_node_failure():
    plan = plan_training("175b", 256, tokens=300e9)
    s = plan_batch_script(plan)
    text = batch_script(s)
    assert s.spare_nodes == plan["checkpoint"]["spare_nodes"] == 1
    assert "#SBATCH --nodes=33   # 32 training + 1 spare" in text and "#SBATCH --no-kill" in text
    assert s.max_allocations >= 2 and s.time_limit_minutes <= 48 * 60


def test_bad_script_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="warning_s 90 must lie between"):
        BatchScript(job_name="x", nodes=1, gpus_per_node=1, time_limit_minutes=1, warning_s=90, max_allocations=3,
                    entry=("t.py",))
    with pytest.raises(ValueError, match="warning_s 20 must lie between stop_grace_s"):
        BatchScript(job_name="x", nodes=1, gpus_per_node=1, time_limit_minutes=1, warning_s=20, stop_grace_s=20,
                    max_allocations=3, entry=("t.py",))
    with pytest.raises(ValueError, match="job_name"):
        BatchScript(job_name="a b", nodes=1, gpus_per_node=1, time_limit_minutes=5, warning_s=60, max_allocations=3,
                    entry=("t.py",))


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_three_allocations_on_a_real_slurm_each_resuming_from_the_last_checkpoint(slurm_cluster, tmp_path):
    started = time.monotonic()
    work = tmp_path / "job"
    work.mkdir()
    ckpt = work / "ckpt"
    s = dataclasses.replace(plan_batch_script(plan_training("1.3b", 4, tokens=26e9)), gres=False, exclusive=False,
                            nodes=1, gpus_per_node=1, time_limit_minutes=1, warning_s=25, stop_grace_s=8, ckpt_dir=str(ckpt),
                            launcher=(sys.executable, "-m", "torch.distributed.run"),
                            entry=(str(TRAIN), "--stop-file", '"$STOP_FILE"', "--done-allocation", "2"))
    (work / "job.sh").write_text(batch_script(s))
    out = slurm_cluster.run("sbatch", "--chdir", str(work), str(work / "job.sh"), check=True).stdout
    job = out.split()[-1]
    state, lifted = "", set()
    while time.monotonic() - started < 420:
        info = slurm_cluster.run("scontrol", "show", "job", job).stdout
        state = next((w.split("=", 1)[1] for w in info.split() if w.startswith("JobState=")), "")
        restarts = next((w.split("=", 1)[1] for w in info.split() if w.startswith("Restarts=")), "0")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        if state == "PENDING" and "Reason=BeginTime" in info and restarts not in lifted:
            # Slurm holds a requeued job ~120 s before it is eligible again; shorten the hold so the
            # test takes a minute per allocation (the script's behaviour is unchanged). Not to zero:
            # slurmd refuses a launch whose credential dates from the second the last one was
            # revoked in ("Job credential revoked"), so the next allocation starts 5 s later.
            slurm_cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now+5")
            lifted.add(restarts)
        time.sleep(1.0)
    log = "\n".join(p.read_text() for p in work.glob("*.out"))
    events = _events(ckpt / "events.jsonl")
    assert state == "COMPLETED", f"{state}\n{log[-3000:]}\n{events}\n{slurm_cluster.logs()}"
    resumes = [e for e in events if e["event"] == "resume"]
    saves = [e for e in events if e["event"] == "saved-on-warning"]
    assert [e["allocation"] for e in resumes] == [0, 1, 2], events
    assert [e["allocation"] for e in saves] == [0, 1], events        # each of the first two ended on the warning
    assert resumes[0]["step"] == 0 and all(saves[k]["step"] > resumes[k]["step"] for k in (0, 1))
    assert [r["step"] for r in resumes[1:]] == [s["step"] for s in saves]   # continued from each checkpoint
    assert events[-1]["event"] == "done" and (ckpt / "DONE").exists()
    assert log.count("time limit near") == 2 and log.count("requeueing") == 2 and "training finished" in log
    print(f"3 allocations, steps {[r['step'] for r in resumes]} -> {events[-1]['step']}, "
          f"{time.monotonic() - started:.0f} s wall")
