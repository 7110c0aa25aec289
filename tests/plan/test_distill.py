"""tuner.plan: finished Optuna studies (written directly with optuna) -> calibration JSON."""

from __future__ import annotations

import itertools
import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import helper
from helper import measurement_plan
from helper.calibration import resolve_constants
from helper.throughput import step_time_breakdown
from tuner.errors import StudyConflictError
from tuner.plan import distill, study_measurements

optuna.logging.set_verbosity(optuna.logging.WARNING)

TRUTH = {"compute_efficiency": 0.15, "micro_step_overhead_s": 0.05, "data_cost_s_per_example": 0.002}
SPACE = {"micro_batch": [2, 4, 8], "grad_accum": [1, 2], "num_workers": [0, 1, 2],
         "nccl_algo": ["default", "Ring"]}
SPEC = {"study": {"name": "q"}, "budget": {"limit_gpu_seconds": 180.0},
        "model": {"preset": "tiny", "path": None, "seq_len": 256, "dtype": "auto",
                  "activation_checkpointing": False},
        "data": {"source": "synthetic"}, "cluster": {"launcher": "local", "nodes": 1, "gpus_per_node": 2,
                                                     "backend": "gloo", "gpu": "cpu"},
        "trial": {"warmup_steps": 2, "measure_steps": 8}, "space": {k: {"choices": v} for k, v in SPACE.items()},
        "baseline": {"micro_batch": 4, "grad_accum": 1, "num_workers": 0, "padding": "packed",
                     "nccl_algo": "default"}}


def _truth_tps(params: dict) -> float:
    m = {"preset": "tiny", "gpu": "cpu", "gpu_count": 2, "gpus_per_node": 2, "seq_len": 256,
         "padding": "packed", **params}
    plan, _ = measurement_plan(m)
    consts = {**resolve_constants(None, "cpu")[0], **TRUTH}
    return step_time_breakdown(plan, consts)["tokens_per_sec_per_gpu"]


def _make_study(storage, name: str = "q", *, spec: dict | None = SPEC) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    if spec is not None:
        study.set_user_attr("spec", spec)
        study.set_user_attr("launcher", "local")
    dists = {k: CategoricalDistribution(v) for k, v in SPACE.items()}
    for mb, ga, w in itertools.product(SPACE["micro_batch"], SPACE["grad_accum"], SPACE["num_workers"]):
        params = {"micro_batch": mb, "grad_accum": ga, "num_workers": w, "nccl_algo": "default"}
        attrs = {"status": "ok", "world_size": 2, "gpu_seconds": 30.0, "startup_seconds": 9.0}
        study.add_trial(create_trial(params=params, distributions=dists, value=_truth_tps(params),
                                     user_attrs=attrs))
    oom = {"micro_batch": 8, "grad_accum": 2, "num_workers": 0, "nccl_algo": "Ring"}
    study.add_trial(create_trial(params=oom, distributions=dists, value=0.0,
                                 user_attrs={"status": "oom", "gpu_seconds": 5.0}))
    study.add_trial(create_trial(params=oom, distributions=dists, state=TrialState.FAIL))
    return study


def test_distill_sqlite_study_writes_a_calibration_the_helper_loads(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    _make_study(url)
    out = tmp_path / "cal" / "calibration.json"
    cal = distill(url, ["q"], out)
    assert out.exists() and json.loads(out.read_text())["source"] == cal["source"]
    loaded = helper.load_calibration(out)
    assert "q" in loaded["source"] and loaded["provenance"]["studies"] == ["q"]
    q = cal["quality"]
    assert q["n_used"] == 18 and q["n_measurements"] == 18          # oom and FAIL trials left out
    assert q["median_abs_pct_error"] < 1.0
    assert set(q["per_knob"]["num_workers"]) == {"0", "1", "2"}
    block = loaded["constants"]["cpu"]
    assert block["compute_efficiency"] == pytest.approx(TRUTH["compute_efficiency"], rel=0.1)
    assert block["startup_fixed_s"] > 0 and "startup_fixed_s" in loaded["informed"]["cpu"]
    # the published GPU constants survive a CPU-only distillation
    assert loaded["constants"]["H100-80GB"] == helper.load_calibration()["constants"]["H100-80GB"]
    # and suggest/predict use it, saying so
    tps = helper.predict_throughput("tiny", 2, gpu="cpu", seq_len=256, micro_batch=4, gpus_per_node=2,
                                    calibration=str(out))
    assert tps.source == cal["source"]
    assert helper.suggest_config("tiny", 2, 2000, gpu="cpu", seq_len=256, gpus_per_node=2,
                                 calibration=loaded)["source"] == cal["source"]


def test_distill_accepts_a_storage_object_and_several_studies(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    _make_study(storage, "a")
    _make_study(storage, "b")
    cal = distill(storage, ["a", "b"], tmp_path / "c.json")
    assert cal["quality"]["n_used"] == 36 and cal["provenance"]["studies"] == ["a", "b"]


def test_measurements_take_knobs_from_params_then_baseline(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    study = _make_study(storage)
    ms = study_measurements(study)
    m = ms[0]
    assert m["preset"] == "tiny" and m["gpu"] == "cpu" and m["gpu_count"] == 2 and m["seq_len"] == 256
    assert m["padding"] == "packed"                 # not searched: from the spec's baseline
    assert m["startup_seconds"] == 9.0 and "prefetch_factor" not in m   # num_workers 0 first


def test_distill_errors_name_the_problem(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    with pytest.raises(StudyConflictError, match="no study named 'nope'"):
        distill(storage, ["nope"], tmp_path / "x.json")
    _make_study(storage, "plain", spec=None)
    with pytest.raises(StudyConflictError, match="no `spec` user attr"):
        distill(storage, "plain", tmp_path / "x.json")
    empty = optuna.create_study(study_name="empty", storage=storage)
    empty.set_user_attr("spec", SPEC)
    with pytest.raises(StudyConflictError, match="no finished trial with status ok"):
        distill(storage, "empty", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_distill_reports_leave_one_out_error_and_calibrates_memory_from_peak_mem(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    study = _make_study(url)
    # Trials that also recorded peak_mem_gib: memory 1.5x what the model says per step.
    dists = {k: CategoricalDistribution(v) for k, v in SPACE.items()}
    for mb in SPACE["micro_batch"]:
        params = {"micro_batch": mb, "grad_accum": 1, "num_workers": 0, "nccl_algo": "default"}
        mem = helper.estimate_memory("tiny", 2, micro_batch=mb, seq_len=SPEC["model"]["seq_len"], gpu="cpu")
        dynamic = mem["total"] - mem["static"] - helper.get_gpu("cpu").framework_overhead_gb
        measured_gb = mem["static"] + helper.get_gpu("cpu").framework_overhead_gb + 1.5 * dynamic
        study.add_trial(create_trial(params=params, distributions=dists, value=_truth_tps(params),
                                     user_attrs={"status": "ok", "world_size": 2,
                                                 "peak_mem_gib": measured_gb * 1e9 / 2**30}))
    cal = distill(url, ["q"], tmp_path / "cal.json")
    q = cal["quality"]
    assert q["loo_median_abs_pct_error"] is not None and q["loo_to_in_sample_ratio"] > 0
    assert q["memory"]["cpu"]["n"] == 3
    assert cal["constants"]["cpu"]["memory_scale"] == pytest.approx(1.5, rel=0.02)
    # the correction reaches the memory model through the calibration
    d = helper.predict_step_time("tiny", 2, gpu="cpu", seq_len=SPEC["model"]["seq_len"], micro_batch=2,
                                 calibration=cal)
    plain = helper.estimate_memory("tiny", 2, micro_batch=2, seq_len=SPEC["model"]["seq_len"], gpu="cpu")
    assert d["memory_total_gb"] > plain["total"]


def test_hsdp_and_tp_trials_are_fitted_through_helper_layouts(tmp_path):
    """A CPU layout study (the sim launcher, which models HSDP/TP with helper.layouts): every ok
    trial is a measurement, HSDP/TP ones carry their mesh, and the fit uses all of them."""
    from pathlib import Path

    from helper.layouts import Layout, layout_speed_ratio
    from tuner.spec import load_spec
    from tuner.study import RunOptions, run_study

    spec = load_spec(Path(__file__).resolve().parents[2] / "studies/cpu-layouts.toml").with_launcher("sim")
    url = f"sqlite:///{tmp_path}/l.db"
    run_study(spec, RunOptions(storage_url=url, runs_dir=tmp_path / "runs", max_trials=7, ablation=False))
    study = optuna.load_study(study_name=spec.study.name, storage=url)
    ms = study_measurements(study)
    ok = [t for t in study.trials if t.user_attrs.get("status") == "ok"]
    assert len(ms) == len(ok) >= 6
    meshes = {(m["layout"]["dp_replicate"], m["layout"]["dp_shard"], m["layout"]["tp"]) for m in ms if "layout" in m}
    assert meshes == {(2, 2, 1), (1, 2, 2)}   # HSDP (groups of 2); TP2 (HSDP x TP2 with groups of 2 is 1 x 2 x 2)
    cal = helper.fit_calibration(ms, base=helper.load_calibration())
    assert cal["quality"]["n_used"] == len(ms) and not cal["quality"]["skipped"]
    tp = next(m for m in ms if m.get("layout", {}).get("tp") == 2)
    plan, _ = measurement_plan(tp)
    assert layout_speed_ratio(plan, Layout(**tp["layout"]), resolve_constants(None, "cpu")[0]) < 1


def test_the_command_warns_on_stderr_when_a_study_was_simulated(tmp_path, capsys):
    from tuner.cli import main

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    _make_study(url).set_user_attr("simulated", True)
    assert main(["distill", "--storage", url, "--study-name", "q", "--out", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err
    assert "tuner distill: warning: some trials came from the sim launcher" in err and err.rstrip().endswith("(q)")
