"""Statistics on synthetic studies with known truth (written directly with Optuna)."""

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from tuner.report import write_analysis
from tuner.stats import analyze_study, format_summary, mean_ci, ratio_ci


def ar1(rng, n, mean, phi=0.5, rel_sd=0.05):
    e = np.empty(n)
    e[0] = rng.normal(0, 1 / math.sqrt(1 - phi * phi))
    for t in range(1, n):
        e[t] = phi * e[t - 1] + rng.normal()
    return mean * (1 + rel_sd * math.sqrt(1 - phi * phi) * e)


def iid_ci(x):
    m, h = np.mean(x), 1.96 * np.std(x, ddof=1) / math.sqrt(len(x))
    return m - h, m + h


def test_single_series_batch_means_is_never_zero_width_and_uses_every_step():
    ci = mean_ci([1000.0] * 4 + [500.0] * 3)                  # adaptive stopping left 7 steps
    assert ci["ci95"][0] < ci["ci95"][1] and ci["mean"] == pytest.approx((4000 + 1500) / 7)
    flat = mean_ci([1000.0] * 8)
    assert flat["ci95"][0] < 1000.0 < flat["ci95"][1]        # a floor, never zero width
    assert mean_ci([1.0, 2.0, 3.0]) is None                    # too few steps: no CI
    rng = np.random.default_rng(0)
    iid_hits = sum(iid_ci(x)[0] <= 1000.0 <= iid_ci(x)[1] for x in (ar1(rng, 40, 1000.0, phi=0.6) for _ in range(300)))
    assert iid_hits / 300 < 0.85                               # why the i.i.d. interval is not used


def test_speedup_ci_covers_the_true_ratio():
    rng = np.random.default_rng(1)
    hits, reps = 0, 300
    for _ in range(reps):
        r = ratio_ci(mean_ci(ar1(rng, 30, 1200.0)), mean_ci(ar1(rng, 30, 1000.0)))
        hits += r["ci95"][0] <= 1.2 <= r["ci95"][1]
    assert 0.90 <= hits / reps <= 0.99, hits / reps


TRUE_EFFECT = {"micro_batch": {1: 0.0, 2: 0.4, 4: 0.8},       # strong
               "padding": {"max_length": 0.0, "packed": 0.2},  # medium
               "num_workers": {0: 0.0, 2: 0.06}}               # weak (prefetch_factor conditional on it)


def truth(params):
    tps = 1000.0 * (1 + sum(TRUE_EFFECT[k][params[k]] for k in TRUE_EFFECT))
    return tps


def synthetic_study(n=60, seed=0):
    rng = np.random.default_rng(seed)
    study = optuna.create_study(direction="maximize", study_name="synthetic")
    space = {"micro_batch": [1, 2, 4], "padding": ["max_length", "packed"], "num_workers": [0, 2],
             "prefetch_factor": [2, 4], "nccl_proto": ["default", "Simple"]}   # nccl_proto: no effect
    study.set_user_attr("spec", {"space": {k: {"choices": v} for k, v in space.items()},
                                 "model": {"preset": "tiny", "seq_len": 64},
                                 "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": "cpu", "backend": "gloo",
                                             "launcher": "local"},
                                 "data": {"source": "synthetic"}})
    study.set_user_attr("budget_limit_gpu_seconds", 10_000.0)
    study.set_user_attr("simulated", False)
    for i in range(n):
        p = {k: v[rng.integers(len(v))] for k, v in space.items()}
        p = {k: (int(v) if isinstance(v, np.integer) else str(v) if isinstance(v, np.str_) else v) for k, v in p.items()}
        if i == 0:
            p = {"micro_batch": 1, "padding": "max_length", "num_workers": 0, "nccl_proto": "default"}
        if p["num_workers"] == 0:
            p.pop("prefetch_factor", None)
        dists = {k: CategoricalDistribution(space[k]) for k in p}
        attrs = {"gpu_seconds": 40.0, "status": "ok", "startup_seconds": 5.0, "world_size": 2}
        if i == 0:
            attrs["role"] = "baseline"
        if p["micro_batch"] == 4 and p["padding"] == "max_length" and i % 3 == 0:
            attrs["status"] = "oom"
            study.add_trial(optuna.trial.create_trial(params=p, distributions=dists, value=0.0, user_attrs=attrs,
                                                      system_attrs={"constraints:failed": 1.0}))
            continue
        steps = ar1(rng, 24, truth(p))
        study.add_trial(optuna.trial.create_trial(params=p, distributions=dists, value=float(np.mean(steps)),
                                                  intermediate_values=dict(enumerate(steps.tolist())), user_attrs=attrs))
    return study


@pytest.fixture(scope="module")
def analysis():
    return analyze_study(synthetic_study(), n_boot=20)


def test_schema_of_interfaces(analysis):
    assert {"study", "n_trials", "n_ok", "budget", "baseline", "best", "importance", "top_knobs", "trials"} <= set(analysis)
    assert set(analysis["budget"]) == {"limit_gpu_hours", "used_gpu_hours", "startup_share"}
    assert {"trial", "params", "tokens_per_sec_per_gpu", "speedup_vs_baseline"} <= set(analysis["best"])
    assert set(analysis["best"]["tokens_per_sec_per_gpu"]) == {"mean", "ci95"}
    for d in analysis["importance"]:
        assert set(d) >= {"knob", "fanova", "ci95"}
    fanovas = [d["fanova"] for d in analysis["importance"]]
    assert fanovas == sorted(fanovas, reverse=True)


def test_top_knobs_and_no_effect_knob(analysis):
    assert analysis["top_knobs"][:2] == ["micro_batch", "padding"]
    imp = {d["knob"]: d for d in analysis["importance"]}
    assert set(imp) == {"micro_batch", "padding", "num_workers", "prefetch_factor", "nccl_proto"}   # conditional one too
    no_effect = imp["nccl_proto"]
    assert no_effect["fanova"] < 0.05 and no_effect["ci95"][0] < 0.01


def test_failures_excluded_but_counted(analysis):
    assert analysis["n_failed"]["oom"] > 0
    assert analysis["n_ok"] + analysis["n_failed"]["oom"] == analysis["n_trials"]
    mb4 = {r["level"]: r for r in analysis["marginal_effects"]["micro_batch"]}["4"]
    assert mb4["failures"]["oom"] > 0 and mb4["n_ok"] == mb4["n_trials"] - mb4["failures"]["oom"]
    assert mb4["mean"] > 1500       # OOM zeros never enter the mean
    oom_rows = [t for t in analysis["trials"] if t["status"] == "oom"]
    assert all(t["tokens_per_sec_per_gpu"] is None for t in oom_rows)


def test_speedup_vs_baseline_matches_truth(analysis):
    best = analysis["best"]
    true_ratio = truth(best["params"]) / truth(analysis["baseline"]["params"])
    lo, hi = best["speedup_vs_baseline"]["ci95"]
    assert lo * 0.97 <= true_ratio <= hi * 1.03          # winner's curse: search trial, not re-measured
    assert best["winners_curse_adjusted"] is False


def test_startup_share_of_gpu_time(analysis):
    assert analysis["budget"]["startup_share"] == pytest.approx(10.0 / 40.0)   # 2 ranks x 5 s of 40 GPU-s
    assert all(t["startup_share"] == pytest.approx(0.25) for t in analysis["trials"])
    assert "start-up (launch, model build, communicators) took 25%" in format_summary(analysis)


def test_write_and_summary(analysis, tmp_path):
    path = write_analysis(analysis, tmp_path / "out")
    assert path.read_text().startswith("{")
    text = format_summary(analysis)
    assert "micro_batch" in text and "speedup vs baseline" in text
