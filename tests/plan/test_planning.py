"""tuner.plan: `tuner plan` answers every point; the proxy spec runs the chosen layout in the
workload's knobs (PP falls back, saying so); --validate runs real CPU trials end to end (slow)."""

import pytest

from helper import plan_training
from tuner.cli import main
from tuner.knobs import KNOBS
from tuner.plan import format_plan, proxy_spec


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, gpu="H100-80GB", tokens=100e9, cost_per_gpu_hour=2.5)


def test_a_runbook_folder_it_cannot_write_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    for where, needle in ((tmp_path / "taken", "is a file, not a folder"), ("/proc/x", "cannot create the folder")):
        assert main(["plan", "--model-size", "7b", "--gpus", "32", "--tokens", "1e9", "--runbook", str(where)]) == 2
        err = capsys.readouterr().err
        assert f"--runbook {where}: {needle}" in err and len(err.strip().splitlines()) == 1


def test_cli_plan_answers_every_point(capsys, plan13):
    assert main(["plan", "--model-size", "13b", "--gpus", "32", "--gpu", "H100-80GB", "--tokens", "100e9",
                 "--cost-per-gpu-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    win = plan13["chosen"]["layout"]
    for needle in (f"DECISION: {win}", "hsdp", "fsdp+tp8", "pp2+fsdp",          # layouts compared
                   "Memory per GPU", "spare", "GiB",                            # memory, fits, headroom
                   "micro-batch", "global batch", "optimizer steps",           # batch
                   "tokens/s/GPU (band", "held-out", "MFU",                    # throughput with a band
                   "GPU-hours", "cost",                                        # wall, GPU-h, cost
                   f"slower than {win}",                                       # why the others lose
                   "Young/Daly", "worst-case lost work", "detection", "restart", "reload", "keep the last",
                   "collective timeout 100 s", "SlurmdTimeout", "Not validated"):
        assert needle in out, needle
    assert "85.5" not in out and "static" not in out.split("Memory per GPU")[1].split("\n")[1]


def test_cli_plan_bad_input_is_one_line(capsys):
    assert main(["plan", "--model-size", "70b", "--gpus", "8", "--gpu", "A100-40GB", "--tokens", "1e9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not fit" in err
    assert main(["plan", "--model-size", "13b", "--gpus", "13", "--tokens", "1e9"]) == 2     # issue 31 item 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "gpu_count 13 cannot be spread evenly" in err and "use 12 or 14" in err
    with pytest.raises(SystemExit):
        main(["plan", "--model-size", "13b", "--gpus", "0", "--tokens", "1e9"])


def test_cli_plan_launch_settings_reach_the_lost_work_bound(capsys):
    assert main(["plan", "--model-size", "13b", "--gpus", "32", "--tokens", "100e9", "--spare-nodes", "1",
                 "--slurmd-timeout-s", "120"]) == 0
    out = capsys.readouterr().out
    assert "relaunch on the 1 spare node(s)" in out and "SlurmdTimeout 120 s" in out


def test_format_plan_shows_failed_limit(plan13):
    text = format_plan(plan13)
    assert "<= limit 30 min" in text
    slow = plan_training("13b", 32, tokens=100e9, storage_write_gbs_per_node=0.05)
    assert "cannot be met" in format_plan(slow)


def test_proxy_spec_uses_the_workloads_layout_knobs_and_falls_back_only_for_pp(plan13):
    fsdp = {**plan13, "chosen": {**plan13["chosen"], "workload_knobs": {"sharding": "full_shard"}}}
    raw, notes = proxy_spec(fsdp, name="p")
    assert raw["space"]["sharding"] == ["full_shard"] and raw["cluster"]["gpu"] == "cpu" and not notes
    hsdp = {**plan13, "chosen": {**plan13["chosen"],
                                 "workload_knobs": {"sharding": "hybrid_shard", "shard_group_size": 8, "tp_degree": 2}}}
    raw, notes = proxy_spec(hsdp, name="p")
    assert {k: raw["space"][k] for k in ("sharding", "tp_degree", "shard_group_size")} == {
        "sharding": ["hybrid_shard"], "tp_degree": [2], "shard_group_size": [1]}   # 2 replicas x 1 shard x TP2
    assert raw["cluster"]["gpus_per_node"] == 4 and not any("pp_degree" in n for n in notes)
    assert all(k in KNOBS for k in raw["space"])
    pp = {**plan13, "chosen": {**plan13["chosen"], "workload_knobs": {"sharding": "full_shard", "pp_degree": 2}}}
    raw, notes = proxy_spec(pp, name="p")
    assert "pp_degree" not in raw["space"] and any("no pp_degree knob" in n for n in notes)


@pytest.mark.slow
def test_validate_runs_the_proxy_end_to_end_on_cpu(tmp_path, capsys):
    assert main(["plan", "--model-size", "13b", "--gpus", "32", "--tokens", "100e9", "--validate",
                 "--runbook", str(tmp_path / "rb")]) == 0
    out = capsys.readouterr().out
    assert "Proxy validation (CPU processes via the local launcher)" in out
    assert out.count("measured ") >= 2 and "after recalibration" in out and "band after validation" in out
    md = (tmp_path / "rb" / "RUNBOOK.md").read_text()
    assert "## 9. Proxy validation" in md and "Not run." not in md
    assert "Validated on a CPU proxy only" in md and "Validated on a CPU proxy only" in out   # issue 31 item 9
    print(out[out.index("Proxy validation"):])


@pytest.mark.slow
def test_plan_imports_no_torch_optuna_plotly_or_scipy_optimize():
    import subprocess
    import sys
    code = ("import sys, io, contextlib; from tuner.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['plan', '--model-size', '13b', '--gpus', '32', '--tokens', '100e9'])\n"
            "print(sorted(m for m in ('torch', 'optuna', 'plotly', 'scipy.optimize') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_gpu_proxy_spec_is_a_valid_study_on_the_plans_gpu(plan13):
    from tuner.spec import parse_spec
    raw, _ = proxy_spec(plan13, name="p", target="gpu", launcher="slurm")
    spec = parse_spec(raw, origin="plan-proxy")
    assert spec.cluster.gpu == "H100-80GB" and spec.cluster.gpus_per_node == 4 and spec.cluster.launcher == "slurm"
    assert spec.model.preset == "llama-1b" and spec.model.seq_len == 2048
    cpu = parse_spec(proxy_spec(plan13, name="p")[0], origin="plan-proxy")
    assert cpu.cluster.backend == "gloo" and cpu.model.preset == "tiny"
