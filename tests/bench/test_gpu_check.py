"""bench/gpu_check.py, the GPU kit (issue 35): its dry run on CPU (gloo, tiny shapes) runs the
GPU run's code paths, once per module, where Optuna, SQLAlchemy and ``datasets`` cannot be
imported (as on the GPU machine); a check past its time box is killed and recorded; bad input
is one line; the report's arithmetic."""

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.gpu_check import Kit, main, narrowed_plan  # noqa: E402
from bench.gpu_kit.plan import CHECKS, RunSpec, dry_run_plan, gpu_plan  # noqa: E402
from bench.gpu_kit.report import markdown, memory_rows, switch_row, table  # noqa: E402

# In every process of the kit (checks, torchrun, ranks): these packages are "not installed".
NOT_ON_THE_GPU_MACHINE = """
import sys
for _name in ("optuna", "sqlalchemy", "datasets"):
    sys.modules[_name] = None  # import fails, importlib.util.find_spec says None
"""


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_check")
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(NOT_ON_THE_GPU_MACHINE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(root / "site")])}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", "--dry-run", "--out", str(root / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - t0
    doc = json.loads((root / "out" / "gpu_check.json").read_text())
    res = {name: c["result"] for name, c in doc["checks"].items()}
    return SimpleNamespace(proc=proc, doc=doc, res=res, seconds=seconds, out=root / "out")


@pytest.mark.slow
def test_dry_run_finishes_every_check_and_writes_json_markdown_and_a_table(kit):
    assert kit.proc.returncode == 0, kit.proc.stdout[-3000:] + kit.proc.stderr[-3000:]
    doc = kit.doc
    assert doc["dry_run"] is True and doc["finished"] and positive(doc["elapsed_s"])
    assert {"kit", "schema_version", "started", "plan", "checks", "git_commit"} <= set(doc)
    for name in CHECKS:
        check = doc["checks"][name]
        assert check["status"] == "ok", (name, check["error"])
        assert positive(check["seconds"]) and positive(check["time_box_s"]) and check["result"]
    assert doc["elapsed_s"] <= dry_run_plan().budget_s
    for name in CHECKS:
        assert f"\n{name} " in kit.proc.stdout  # the table at the end
    md = (kit.out / "gpu_check.md").read_text()
    assert md.startswith("### GPU check (dry run") and "| config |" in md and "Warm switches" in md
    device = kit.res["device"]
    assert device["name"] == "cpu" and device["torch"] and device["transformers"] and device["helper_gpu"] == "cpu"


@pytest.mark.slow
def test_throughput_rows_measure_each_config_beside_helpers_prediction(kit):
    rows = kit.res["throughput"]["rows"]
    assert [r["name"] for r in rows] == [r.name for r in dry_run_plan().throughput_runs]
    for r in rows:
        assert r["status"] == "ok", r["error"]
        for key in ("tokens_per_sec_per_gpu", "step_time_s", "peak_mem_gib", "startup_seconds", "wall_s",
                    "to_first_step_s", "n_params"):
            assert positive(r[key]), (key, r[key])
        assert r["attention_in_model"] == r["attention"]      # model.attention reached the model
        assert "mfu" in r and r["mfu"] is None                # no MFU on a CPU rather than a wrong one
        assert positive(r["predicted"]["tokens_per_sec_per_gpu"]) and positive(r["measured_over_predicted"])
        assert 0 < r["padding_efficiency"] <= 1


@pytest.mark.slow
def test_memory_rows_put_analytic_and_trace_beside_the_measured_peak(kit):
    mem = kit.res["memory"]
    assert [r["name"] for r in mem["rows"]] == [r.name for r in dry_run_plan().throughput_runs]
    for r in mem["rows"]:
        for key in ("measured_allocated_gb", "analytic_tensors_gb", "trace_tensors_gb", "analytic_total_gb",
                    "trace_total_gb", "analytic_over_measured", "trace_over_measured"):
            assert positive(r[key]), (key, r[key])
        assert r["peak_mem_kind"].startswith("cpu_peak_rss")   # on CPU: peak RSS, not the CUDA allocator
        assert r["measured_reserved_gb"] is None and r["measured_fits"] is True


@pytest.mark.slow
def test_warm_switches_cover_every_level_against_cold_starts(kit):
    sw = kit.res["warm_switches"]["switches"]
    assert [r["level"] for r in sw] == ["process", "none", "data_loader", "model", "communicators"]
    assert all(r["status"] == "ok" and r["level_as_expected"] for r in sw)
    assert positive(sw[0]["cold_to_first_step_s"])           # the worker's own cold start
    for r in sw[1:]:
        assert positive(r["warm_to_first_step_s"]) and r["warm_setup_s"] >= 0
    assert sw[3]["cold_source"] == "throughput check" and sw[4]["cold_source"] == "cold twin"
    assert positive(sw[3]["cold_over_warm"]) and positive(sw[4]["cold_over_warm"])
    assert positive(kit.res["warm_switches"]["predicted_cold_startup_s"])


@pytest.mark.slow
def test_checkpoint_save_async_save_and_load_beside_helpers_plan(kit):
    ck = kit.res["checkpoint"]
    for key in ("sync_save_blocking_s", "async_save_blocking_s", "load_s", "bytes", "n_params", "measured_write_gbs"):
        assert positive(ck[key]), (key, ck[key])
    assert ck["async_save_background_s"] >= 0 and ck["sync_saves"] == ck["async_saves"] == 1
    assert ck["loaded_step"] == dry_run_plan().checkpoint_every
    assert all(positive(v) for v in ck["predicted"].values())


@pytest.mark.slow
def test_nccl_variables_reach_the_trial_and_a_refusal_is_the_trials_error(kit):
    env, rejected = kit.res["nccl"]["env"], kit.res["nccl"]["rejected"]
    assert env["status"] == "ok" and env["as_set"] and env["in_trial"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert env["read_by_nccl"] is None and "gloo" in env["note"]  # NCCL never loads on gloo: said, not faked
    assert rejected["status"] == "error" and rejected["reported_as_trial_error"]
    assert "gloo" in rejected["emulated"] and rejected["error"]["message"]


@pytest.mark.slow
def test_a_check_past_its_time_box_is_killed_and_keeps_what_it_finished(tmp_path):
    # 60 configs' memory predictions: the analytic ones are instant, 60 traces take far over 8 s
    runs = tuple(RunSpec({"micro_batch": mb, "padding": "packed", "activation_checkpointing": False})
                 for mb in range(1, 61))
    plan = dataclasses.replace(dry_run_plan(), throughput_runs=runs,
                               time_boxes_s={**dry_run_plan().time_boxes_s, "memory": 8.0})
    out = tmp_path / "out"
    assert Kit(plan, out, tmp_path / "scratch", ("memory",)).run() == 1
    doc = json.loads((out / "gpu_check.json").read_text())
    check = doc["checks"]["memory"]
    assert check["status"] == "timeout" and "8 s time box" in check["error"]
    predictions = check["result"]["predictions"]
    assert len(predictions) == 60 and all("total" in p["analytic"] for p in predictions.values())
    assert sum("trace" in p for p in predictions.values()) < 60
    assert doc["checks"]["device"]["status"] == "not selected" and doc["finished"]
    for proc in Path("/proc").iterdir():  # nothing of this kit is left running
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        assert str(out).encode() not in cmdline, f"process {proc.name} outlived its check"


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["--dry-run"]) == 2
    assert main(["--dry-run", "--out", str(tmp_path), "--only", "device,warp"]) == 2
    (tmp_path / "file").write_text("")
    assert main(["--out", str(tmp_path / "file")]) == 2
    assert main(["--out", str(tmp_path), "--budget-s", "0"]) == 2
    assert main(["--out", str(tmp_path), "--runs", "mb1 packed sdpa,mb3 packed sdpa"]) == 2
    assert main(["--out", str(tmp_path), "--box", "checkpoint=ten"]) == 2
    assert main(["--out", str(tmp_path), "--box", "ckpt=100"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["gpu_check: --out DIR is required (where gpu_check.json goes)",
                   "gpu_check: --only: unknown check 'warp'; one of " + ", ".join(CHECKS),
                   f"gpu_check: --out {tmp_path / 'file'}: exists and is not a folder",
                   "gpu_check: --budget-s 0.0: must be more than 5 seconds",
                   "gpu_check: --runs: unknown config 'mb3 packed sdpa'; one of "
                   + ", ".join(r.name for r in gpu_plan().throughput_runs),
                   "gpu_check: --box checkpoint=ten: seconds must be a number above 5",
                   "gpu_check: --box ckpt=100: unknown check 'ckpt'; one of " + ", ".join(CHECKS)]


def test_runs_and_boxes_narrow_the_plan():
    plan, problem = narrowed_plan(gpu_plan(), "mb1 packed eager, mb2 packed sdpa ac", ["checkpoint=170", "throughput=130"])
    assert problem is None and [r.name for r in plan.throughput_runs] == ["mb1 packed eager", "mb2 packed sdpa ac"]
    assert plan.time_boxes_s["checkpoint"] == 170 and plan.time_boxes_s["throughput"] == 130
    assert plan.time_boxes_s["nccl"] == gpu_plan().time_boxes_s["nccl"] and plan.switch_runs == gpu_plan().switch_runs


def test_the_gpu_plan_fits_one_device_call_and_exercises_every_knob():
    plan = gpu_plan()
    assert sum(plan.time_boxes_s[c] for c in CHECKS if c != "memory") <= plan.budget_s <= 540  # 10-minute command
    runs = plan.throughput_runs
    assert {r.params["micro_batch"] for r in runs} == {1, 2, 4, 8}
    assert {r.params["activation_checkpointing"] for r in runs} == {True, False}
    assert {r.attention for r in runs} == {"sdpa", "eager"} and {r.params["padding"] for r in runs} == {
        "packed", "max_length", "longest"}
    # every warm switch but the NCCL one lands on a config check 2 measures cold
    names = {r.name for r in runs}
    assert [r.name in names for r in plan.switch_runs] == [True, True, True, True, False]


def test_report_rows_compare_in_one_unit_and_an_oom_is_a_measured_no_fit():
    rows = memory_rows({"a": {"analytic": {"total": 90.0, "overhead": 5.0}, "trace": {"error": "boom"}}},
                       [{"name": "a", "status": "oom", "peak_mem_gib": None}], framework_overhead_gb=1.0,
                       capacity_gb=85.5)
    r = rows[0]
    assert r["analytic_tensors_gb"] == 85.0 and r["analytic_reserved_gb"] == 89.0 and r["analytic_fits"] is False
    assert r["measured_fits"] is False and r["analytic_over_measured"] is None and r["trace_error"] == "boom"
    run, prev = RunSpec({"micro_batch": 2, "padding": "packed"}), RunSpec({"micro_batch": 1, "padding": "packed"})
    row = switch_row(run, prev, {"job": 1, "level": "none", "status": "ok", "to_first_step_s": 2.0,
                                 "summary": {"resident": {"setup_seconds": 0.5}, "tokens_per_sec_per_gpu": 900.0}},
                     "none", {"source": "cold twin", "to_first_step_s": 20.0, "tokens_per_sec_per_gpu": 1000.0})
    assert row["cold_over_warm"] == 10.0 and row["level_as_expected"] and row["warm_setup_s"] == 0.5
    assert row["warm_over_cold_tokens"] == 0.9  # does the warm trial measure what a cold one does
    cold_only = switch_row(run, prev, {"job": 1, "level": "none", "status": "error", "summary": None}, "none", None)
    assert cold_only["warm_over_cold_tokens"] is None and cold_only["level_as_expected"] is None


def test_markdown_and_table_of_a_kit_that_has_not_run_yet(tmp_path):
    kit = Kit(dry_run_plan(), tmp_path / "out", tmp_path / "scratch", CHECKS)
    assert "Check status: device pending" in markdown(kit.doc)
    assert table(kit.doc).splitlines()[2].startswith("device         pending")
    some = Kit(dry_run_plan(), tmp_path / "some", tmp_path / "scratch", ("device", "checkpoint"))
    text = markdown(some.doc)  # a check not selected has no section (not an empty one)
    assert "Checkpoints (DCP" in text and "NCCL:" not in text and "Warm switches" not in text
    assert "Throughput (" not in text and "Memory, GB" not in text


@pytest.mark.parametrize("module", ["plan", "report", "trials"])
def test_the_kits_doctests(module):  # bench/ is outside pytest's doctest paths
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"bench.gpu_kit.{module}"))
    assert result.attempted > 0 and result.failed == 0
