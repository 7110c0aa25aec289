"""The Slurm launcher against a real Slurm on this machine (tests/slurm_cluster.py: munge,
slurmctld and two slurmd nodes), no fake srun.

Trials run the fast stand-in workload (tests/fixtures/fast_objective.py) as 2 gloo
processes under torchrun inside srun steps (one node x 2, or two nodes x 1 with a c10d
rendezvous across them); one trial runs the real FSDP2 objective across the two nodes.
Without slurm-wlm/munge (or root) the cluster tests skip; the pure helpers always run.
"""

import dataclasses
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.spine_helpers import FAST_OBJECTIVE
from tuner.errors import LauncherError, TunerError
from tuner.launch import (
    SlurmError,
    SlurmLauncher,
    TrialRequest,
    get_launcher,
    run_slurm,
)
from tuner.spec import complete_params, load_spec
from tuner.study import RunOptions, run_study

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPACE = """
micro_batch = [1, 2, 4]
padding = ["max_length", "packed"]
nccl_algo = ["Ring"]
nccl_proto = ["default"]
"""


def slurm_spec(tmp_path, *, name="slurm", timeout_s=60, gpus_per_node=2, command=None,
               model='preset = "tiny"\nseq_len = 64', space=DEFAULT_SPACE, estimate_gpu_seconds=10,
               **cluster):
    """A quickstart-like spec on launcher `slurm`: gloo, CPU processes, the fast workload."""
    command = command or [str(FAST_OBJECTIVE)]
    text = "\n".join([
        f'[study]\nname = "{name}"\nsampler = "random"\nablation_share = 0.0',
        f"[model]\n{model}",
        f'[cluster]\nlauncher = "slurm"\nnodes = 1\ngpus_per_node = {gpus_per_node}\n'
        f'backend = "gloo"\ngpu = "cpu"\nshared_dir = "{tmp_path / "shared"}"',
        f"[trial]\nwarmup_steps = 1\nmeasure_steps = 4\ntimeout_s = {timeout_s}\n"
        f"estimate_gpu_seconds = {estimate_gpu_seconds}\ncommand = {json.dumps(command)}",
        f"[space]\n{space}"])
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    spec = load_spec(path)
    # an allocation another test leaked (its nodes never free) fails a test in minutes, not an hour
    cluster = {"pending_limit_s": 300.0, **cluster}
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, **cluster))


def request(spec, tmp_path, params, number=0):
    return TrialRequest(study_name=spec.study.name, number=number,
                        params=complete_params(params, spec), spec=spec,
                        run_dir=tmp_path / "runs" / spec.study.name / f"trial-{number:04d}")


def when_step_runs(cluster, action, timeout_s=150.0, marker=None):
    """Run ``action`` from a thread as soon as a trial's job step is running: squeue lists it,
    or (``marker``) a trial process whose environment names ``marker`` runs. A slow or failed
    squeue on a loaded machine is polled again, not the end of the watch."""
    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                steps = cluster.run("squeue", "-h", "--steps", "-o", "%j|%T", timeout_s=10).stdout.split()
            except (subprocess.SubprocessError, OSError):
                steps = []
            if any(s.startswith("trial-") for s in steps) or (marker and trial_processes_left(marker)):
                time.sleep(1.0)  # let torchrun start its workers
                action()
                return
            time.sleep(0.2)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def trial_processes_left(marker: str) -> list[str]:
    """fast_objective / torchrun processes whose environment mentions ``marker``."""
    pids = subprocess.run(["pgrep", "-f", "fast_objective.py"], capture_output=True, text=True).stdout.split()
    left = []
    for pid in pids:
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                left.append(pid)
        except OSError:
            pass
    return left


def trial_steps(cluster) -> list[str]:
    return [s for s in cluster.run("squeue", "-h", "--steps", "-o", "%i|%j").stdout.split()
            if "|trial-" in s]


# ------------------------------------------------------------------ pure helpers


def test_a_missing_slurm_command_is_a_one_line_launcher_error():
    # a TunerError: the CLI prints it as one line and exits 2; still a ValueError for old callers
    assert issubclass(SlurmError, LauncherError) and issubclass(SlurmError, TunerError)
    assert issubclass(SlurmError, ValueError)
    with pytest.raises(SlurmError, match="`tuner-no-such-slurm-command` not found"):
        run_slurm("tuner-no-such-slurm-command", "--version")


def test_srun_command_starts_torchrun_on_every_node(tmp_path):
    spec = slurm_spec(tmp_path, nodes=4, gpus_per_node=8, srun_args=("--mpi=none",))
    cmd = SlurmLauncher(spec).command(request(spec, tmp_path, {"micro_batch": 1}, number=3), "123", "n1")
    assert cmd[:3] == ["srun", "--jobid", "123"]
    assert "--whole" in cmd and "--export=ALL" in cmd and "--mpi=none" in cmd
    assert cmd[cmd.index("--nodes") + 1] == "4" and cmd[cmd.index("--ntasks-per-node") + 1] == "1"
    torchrun = cmd[cmd.index("torch.distributed.run") + 1:]
    assert torchrun[torchrun.index("--nnodes") + 1] == "4"
    assert torchrun[torchrun.index("--nproc_per_node") + 1] == "8"
    assert torchrun[torchrun.index("--rdzv-endpoint") + 1].startswith("n1:")
    assert torchrun[-1] == str(FAST_OBJECTIVE)


# ------------------------------------------------------------------ a real Slurm

@pytest.mark.slow
def test_study_trials_run_as_slurm_steps_of_one_allocation(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("NCCL_PROTO", "LL")  # `default` must unset it on every rank
    spec = slurm_spec(tmp_path, name="slurm-study")
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"
    summary = run_study(spec, RunOptions(storage_url=storage, budget_gpu_seconds=1000,
                                         runs_dir=tmp_path / "runs", max_trials=2, ablation=False))
    assert summary.launched == 2
    study = optuna.load_study(study_name="slurm-study", storage=storage)
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(trials) == 2
    from tests.fixtures.fast_objective import expected_tokens_per_sec_per_gpu
    for t in trials:
        assert t.user_attrs["status"] == "ok", t.user_attrs.get("message")
        assert t.user_attrs["launcher"] == "slurm" and t.user_attrs["world_size"] == 2
        assert sorted(t.intermediate_values) == [1, 2, 3, 4]
        assert t.value == pytest.approx(expected_tokens_per_sec_per_gpu(t.params))
        assert t.user_attrs["gpu_seconds"] == pytest.approx(2 * t.user_attrs["wall_seconds"])
        assert t.user_attrs["nccl_env"] == {"NCCL_ALGO": "Ring"}          # passed through srun
        assert t.user_attrs["log_path"].startswith(str(tmp_path / "shared" / "slurm-study"))
    assert len({t.user_attrs["slurm_job_id"] for t in trials}) == 1       # one allocation, reused
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []             # released by close()


@pytest.mark.slow
def test_timeout_cancels_the_step_and_close_the_allocation(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "hang")
    spec = slurm_spec(tmp_path, timeout_s=5)
    launcher = get_launcher(spec)
    try:
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}))
        assert result.status == "timeout", result.message
        assert 5 <= result.wall_seconds < 5 + 120   # cancelled, not run out: srun's exit takes seconds under load
        assert result.gpu_seconds == pytest.approx(2 * result.wall_seconds)
        assert trial_steps(slurm_cluster) == []                  # the step is gone ...
        assert slurm_cluster.job_ids() == [result.extra["slurm_job_id"]]   # ... the allocation stays
        assert trial_processes_left(str(tmp_path)) == []
        monkeypatch.setenv("FAST_OBJECTIVE_MODE", "ok")
        # the next trial in the same allocation, with room to start on a loaded machine (5 s is
        # the hang's timeout, not an ok trial's)
        roomy = dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, timeout_s=120))
        again = launcher.launch(request(roomy, tmp_path, {"micro_batch": 2}, number=1))
        assert again.status == "ok" and again.extra["slurm_job_id"] == result.extra["slurm_job_id"]
    finally:
        launcher.close()
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
def test_ctrl_c_leaves_no_job_and_no_process(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "hang")
    spec = slurm_spec(tmp_path, timeout_s=240)   # outlasts when_step_runs' window on a loaded machine
    launcher = get_launcher(spec)
    main = threading.get_ident()
    # Ctrl-C raises here even where the suite was started with SIGINT ignored (nohup, `&` in a script)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    when_step_runs(slurm_cluster, lambda: signal.pthread_kill(main, signal.SIGINT), marker=str(tmp_path))
    try:
        with pytest.raises(KeyboardInterrupt):
            launcher.launch(request(spec, tmp_path, {"micro_batch": 1}))
        assert slurm_cluster.wait_queue_empty(timeout_s=60) == []
        deadline = time.monotonic() + 60
        while trial_processes_left(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert trial_processes_left(str(tmp_path)) == []
    finally:
        signal.signal(signal.SIGINT, previous)
        launcher.close()  # idempotent; on a failure above, the allocation must not outlive the test


@pytest.mark.slow
def test_allocation_pending_too_long_is_an_error_trial(slurm_cluster, tmp_path):  # noqa: F811
    every_cpu = ["-N2", "--ntasks-per-node=1", "-c2"]
    blocker = slurm_cluster.run("sbatch", "--parsable", *every_cpu, "-o", "/dev/null",
                                "--wrap", "sleep 120").stdout.strip()
    launcher = SlurmLauncher(slurm_spec(tmp_path), pending_limit_s=3)
    try:
        spec = launcher.spec
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}))
        assert result.status == "error"
        assert result.message.startswith("slurm: allocation pending > 3 s")
        assert "Reason=" in result.message and result.gpu_seconds == 0
        assert slurm_cluster.wait_queue_empty(timeout_s=1) == [blocker]   # ours was cancelled
    finally:
        launcher.close()
        slurm_cluster.run("scancel", blocker)
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
def test_no_allocation_again_and_again_stops_the_run(slurm_cluster, tmp_path):  # noqa: F811
    spec = slurm_spec(tmp_path, partition="no-such-partition")
    launcher = get_launcher(spec)
    for number in (0, 1):
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}, number=number))
        assert result.status == "error" and result.gpu_seconds == 0
        assert result.message.startswith("slurm: sbatch refused the allocation"), result.message
        assert "partition" in result.message.lower()
    with pytest.raises(SlurmError, match="3 times in a row"):
        launcher.launch(request(spec, tmp_path, {"micro_batch": 1}, number=2))
    assert slurm_cluster.job_ids() == []


@pytest.mark.slow
def test_node_failure_is_an_error_trial_and_the_next_trial_gets_a_new_allocation(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "hang")
    spec = slurm_spec(tmp_path, timeout_s=240)   # outlasts when_step_runs' window on a loaded machine
    launcher = get_launcher(spec)
    def node_down():
        node = slurm_cluster.run("squeue", "-h", "--steps", "-o", "%N").stdout.split()[0]
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=tuner-test")
    when_step_runs(slurm_cluster, node_down)
    try:
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}))
        assert result.status == "error"
        assert result.message.startswith("slurm: NODE_FAIL"), result.message
        assert result.extra["slurm_failure"] is True
        _wait_node_idle(slurm_cluster)
        monkeypatch.setenv("FAST_OBJECTIVE_MODE", "ok")
        again = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}, number=1))
        assert again.status == "ok", again.message
        assert again.extra["slurm_job_id"] != result.extra["slurm_job_id"]
    finally:
        launcher.close()
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


def _wait_node_idle(cluster, timeout_s=20.0):
    """The downed node re-registers (ReturnToService=2); resume it if it does not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T").stdout.split("\n")
        down = [line.split()[0] for line in states if line.strip() and not line.split()[1].startswith(("idle", "mix", "alloc"))]
        if not down:
            return
        for node in down:
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
        time.sleep(0.5)
    raise AssertionError(f"nodes did not come back: {states}")


@pytest.mark.slow
def test_preemption_is_an_error_trial(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "hang")
    spec = slurm_spec(tmp_path, timeout_s=240)   # outlasts when_step_runs' window on a loaded machine
    launcher = get_launcher(spec)
    urgent = []
    when_step_runs(slurm_cluster, lambda: urgent.append(slurm_cluster.run(
        "sbatch", "--parsable", "-p", "urgent", "-N2", "--ntasks-per-node=1", "-c2", "-o", "/dev/null",
        "--wrap", "sleep 60").stdout.strip()))
    try:
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 1}))
        assert result.status == "error"
        assert result.message.startswith("slurm: PREEMPTED"), result.message
    finally:
        launcher.close()
        if urgent:
            slurm_cluster.run("scancel", *urgent)
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
def test_two_coordinators_hold_their_own_allocations(slurm_cluster, tmp_path):  # noqa: F811
    spec = slurm_spec(tmp_path)
    a, b = get_launcher(spec), get_launcher(spec)
    try:
        held, _ = a._ensure_allocation(request(spec, tmp_path, {"micro_batch": 1}, number=0))
        rb = b.launch(request(spec, tmp_path, {"micro_batch": 2}, number=1))  # runs beside a's
        assert rb.status == "ok", rb.message
        assert rb.extra["slurm_job_id"] != held.job_id
        b.close()
        deadline = time.monotonic() + 60
        while slurm_cluster.job_ids() != [held.job_id] and time.monotonic() < deadline:
            time.sleep(0.3)
        assert slurm_cluster.job_ids() == [held.job_id]          # b's close left a's alone
    finally:
        a.close()
        b.close()
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
def test_a_dead_coordinators_allocation_ends_by_itself(slurm_cluster, tmp_path):  # noqa: F811
    launcher = SlurmLauncher(slurm_spec(tmp_path), lease_stale_s=3)
    held, _ = launcher._ensure_allocation(request(launcher.spec, tmp_path, {"micro_batch": 1}))
    held.lease._stop.set()   # the coordinator is SIGKILLed: no more renewals, no close()
    assert slurm_cluster.wait_queue_empty(timeout_s=20) == []
    launcher.close()


@pytest.mark.slow
def test_multi_node_trial_rendezvous_across_two_nodes(slurm_cluster, tmp_path):  # noqa: F811
    spec = slurm_spec(tmp_path, nodes=2, gpus_per_node=1)
    launcher = get_launcher(spec)
    try:
        result = launcher.launch(request(spec, tmp_path, {"micro_batch": 4}))
    finally:
        launcher.close()
    assert result.status == "ok", result.message
    assert result.world_size == 2 and result.extra["slurm_nodes"] == ",".join(slurm_cluster.nodes)
    assert result.tokens_per_sec_per_gpu == pytest.approx(4000.0)
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "objectives" / "fsdp_finetune.py").exists(),
                    reason="objectives/fsdp_finetune.py is not written yet")
def test_one_real_fsdp_trial_across_two_slurm_nodes(slurm_cluster, tmp_path):  # noqa: F811
    # A real FSDP trial on 2 CPU ranks takes ~30-60 s here: the first estimate must allow it,
    # or the budget cap (3x the estimate) kills it before its timeout.
    spec = slurm_spec(tmp_path, name="slurm-real", timeout_s=240, command=["-m", "objectives.fsdp_finetune"],
                      estimate_gpu_seconds=240, nodes=2, gpus_per_node=1,
                      space='micro_batch = [2]\npadding = ["packed"]',
                      model='preset = "tiny"\nseq_len = 128')
    storage = f"sqlite:///{tmp_path / 'tuner.db'}"
    run_study(spec, RunOptions(storage_url=storage, budget_gpu_seconds=10000,
                               runs_dir=tmp_path / "runs", max_trials=1, ablation=False))
    (trial,) = optuna.load_study(study_name="slurm-real", storage=storage).trials
    assert trial.user_attrs["status"] == "ok", trial.user_attrs.get("message")
    assert trial.value > 0 and len(trial.intermediate_values) == 4
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []


@pytest.mark.slow
def test_warm_trials_share_one_step_and_close_cancels_it(slurm_cluster, tmp_path):  # noqa: F811
    resident = Path(__file__).resolve().parents[1] / "fixtures" / "resident_objective.py"
    spec = slurm_spec(tmp_path, name="slurm-warm", command=[str(resident)])
    launcher = get_launcher(spec)
    try:
        results = [launcher.launch(request(spec, tmp_path, {"micro_batch": m}, number=n))
                   for n, m in enumerate((1, 2, 64, 4))]
        assert launcher.warm()
        assert len(trial_steps(slurm_cluster)) == 1                          # one step ran them all
    finally:
        launcher.close()
    assert [r.status for r in results] == ["ok", "ok", "oom", "ok"]
    assert len({r.extra["pid"] for r in results if r.status == "ok"}) == 1
    assert [r.extra["warm"] for r in results] == [False, True, True, True]
    assert "worker_startup_gpu_seconds" in results[0].extra
    assert len({r.extra["slurm_job_id"] for r in results}) == 1
    assert slurm_cluster.wait_queue_empty(timeout_s=60) == []
