"""The statistics benchmark (bench/stats_*.py): each family's signature, its truth, the scorer."""

import math

import numpy as np
import pytest

from bench.stats_families import _score, run_study
from bench.stats_noise import STALL_MEAN, TOKENS, Noise, launch, run_log_var
from bench.stats_score import half_width, oracle_half_width, score, summarize
from bench.stats_study import build, propose
from bench.stats_truth import FAMILIES, Family, active, configs, one_knob_effects, optimum
from bench.tuner_api import config_key

QUIET = {"rel_sd": 0.0, "phi": 0.0, "run_to_run_sd": 0.0}


def test_stalls_come_every_4th_to_6th_step_and_take_2_to_3_times_as_long():
    rng = np.random.default_rng(1)
    periods, per_run = set(), set()
    for _ in range(200):
        run = launch(rng, Noise(kind="stalls", **QUIET), 1000.0, steps=24)
        ratio = run.seconds / run.seconds.min()
        stalls = np.flatnonzero(ratio > 1.5)
        assert np.all((ratio[stalls] >= 2.0) & (ratio[stalls] <= 3.0))
        assert np.allclose(ratio[ratio <= 1.5], 1.0)
        gaps = set(np.diff(stalls).tolist())
        assert len(gaps) == 1 and gaps <= {4, 5, 6} and stalls[0] < min(gaps)
        periods |= gaps
        per_run.add(int(np.sum(launch(rng, Noise(kind="stalls", **QUIET), 1000.0).seconds
                               > 1.5 * TOKENS / 1000.0 / STALL_MEAN)))
    assert periods == {4, 5, 6} and per_run == {1, 2}   # 8 measured steps hold one or two stalls


def test_a_launch_with_stalls_runs_at_its_stated_long_run_rate():
    rng = np.random.default_rng(2)
    for _ in range(5):
        run = launch(rng, Noise(kind="stalls", rel_sd=0.02, phi=0.5, run_to_run_sd=0.0), 1000.0, steps=6000)
        assert run.value == pytest.approx(run.launch_rate, rel=0.01)
    # over launches, the config's rate: each launch's rate averages to it
    rates = [launch(rng, Noise(kind="stalls", **QUIET), 1000.0).launch_rate for _ in range(3000)]
    assert np.mean(rates) == pytest.approx(1000.0, rel=0.005) and min(rates) > 950 and max(rates) < 1050


def test_drift_falls_5_to_10_percent_over_the_measured_steps_toward_its_plateau():
    rng = np.random.default_rng(3)
    falls = []
    for _ in range(300):
        run = launch(rng, Noise(kind="drift", **QUIET), 1000.0)
        assert np.all(np.diff(run.rates) < 0) and run.launch_rate == 1000.0
        falls.append(run.rates[0] / run.rates[-1] - 1)
    assert 0.045 < min(falls) < 0.055 and 0.09 < max(falls) < 0.10
    long = launch(rng, Noise(kind="drift", **QUIET), 1000.0, steps=400)
    assert long.rates[-1] == pytest.approx(1000.0, rel=1e-6) and long.value == pytest.approx(1000.0, rel=0.003)


def test_launch_offsets_and_within_run_noise_have_the_stated_sd():
    noise = FAMILIES["launch-variance"].noise(0)
    rng = np.random.default_rng(4)
    runs = [launch(rng, noise, 1000.0) for _ in range(3000)]
    offsets = np.log([r.launch_rate / 1000.0 for r in runs])
    assert np.std(offsets) == pytest.approx(0.04, rel=0.06) and abs(np.mean(offsets)) < 0.003
    within = np.concatenate([r.seconds * r.launch_rate / TOKENS - 1 for r in runs])
    assert np.std(within) == pytest.approx(0.01, rel=0.06)
    # the oracle's per-run log variance: the launch's and the 8-step mean's, nothing more
    assert run_log_var(noise) == pytest.approx(0.04**2 + 0.01**2 * 3 / 8, rel=0.12)


def test_the_plain_families_have_no_warm_up_and_read_their_launch_without_bias():
    rng = np.random.default_rng(5)
    for noise in FAMILIES["no-warmup"].noises:
        runs = [launch(rng, noise, 1000.0) for _ in range(2000)]
        lead = np.mean([r.seconds[:2].mean() / r.seconds[2:].mean() for r in runs])
        assert lead == pytest.approx(1.0, abs=0.006)
        assert np.mean([math.log(r.value / r.launch_rate) for r in runs]) == pytest.approx(0.0, abs=0.004)


@pytest.mark.parametrize("family, big", [
    ("ar1", {"micro_batch", "num_workers"}), ("stalls", {"micro_batch", "num_workers"}),
    ("three-way", {"micro_batch", "activation_checkpointing", "num_workers"}),
    ("concentrated-failures", {"micro_batch", "num_workers"}),
    ("crossover", {"nccl_algo", "nccl_proto", "micro_batch"}), ("conditional", {"num_workers", "micro_batch"}),
    ("failures", {"micro_batch"})])
def test_each_family_s_knobs_with_a_10_percent_effect_at_the_optimum(family, big):
    effects = one_knob_effects(FAMILIES[family])
    assert {k for k, e in effects.items() if e >= 0.10} == big


@pytest.mark.parametrize("family", list(FAMILIES))
def test_placebo_knobs_change_no_config_s_truth(family):
    fam = FAMILIES[family]
    assert fam.placebo and all(one_knob_effects(fam)[k] == 0.0 for k in fam.placebo)
    for p in configs(fam):
        for knob in fam.placebo & set(p):
            assert {fam.truth(active({**p, knob: v}, fam.space)) for v in fam.space[knob]} == {fam.truth(p)}


def test_the_three_way_effect_is_one_corner_and_concentrated_failures_tempt():
    fam = FAMILIES["three-way"]
    corner = {"micro_batch": 4, "activation_checkpointing": True, "num_workers": 0, "padding": "max_length",
              "nccl_proto": "default", "grad_accum": 1}
    assert optimum(fam) == {**corner, "padding": "packed"}
    for knob, v in (("micro_batch", 2), ("activation_checkpointing", False), ("num_workers", 2)):
        assert fam.truth(corner) / fam.truth({**corner, knob: v}) > 1.3
    off = {**corner, "num_workers": 2}    # away from the corner each of them moves it < 10%
    for knob in ("micro_batch", "activation_checkpointing"):
        rates = [fam.truth({**off, knob: v}) for v in fam.space[knob]]
        assert max(rates) / min(rates) < 1.1
    fam = FAMILIES["concentrated-failures"]
    best = optimum(fam)
    assert (best["micro_batch"], best["activation_checkpointing"]) == (4, False)
    tempting = {**best, "micro_batch": 8, "activation_checkpointing": True}
    assert fam.truth(tempting) > 1.15 * fam.truth(best) and fam.p_fail(tempting) == 0.5
    assert fam.p_fail({**best, "micro_batch": 8}) == 1.0 and fam.p_fail(best) == 0.0


def test_the_search_never_repeats_a_config_and_ends_when_none_is_left():
    tiny = Family(name="tiny", space={"micro_batch": [1, 2], "padding": ["max_length", "packed"]},
                  baseline={"micro_batch": 1, "padding": "max_length"}, truth=lambda p: 1.0,
                  placebo=frozenset(), noises=(Noise(kind="ar1"),))
    rng = np.random.default_rng(0)
    history = []
    for _ in range(4):
        p = propose(rng, tiny, history)
        assert p is not None and config_key(p) not in {config_key(q) for q, _ in history}
        history.append((p, 1.0))
    assert propose(rng, tiny, history) is None


def test_a_study_is_built_as_the_coordinator_builds_one():
    built = build("failures", 3)
    trials = built.record.trials
    assert trials[0].role == "baseline" and trials[0].params == FAMILIES["failures"].baseline
    search = [t for t in trials if t.role is None]      # 48 configs: the search ends when each has run
    assert len(search) == 47 and len({config_key(t.params) for t in [trials[0], *search]}) == 48
    roles = {t.remeasure or ("revert" if t.ablation_knob else None) for t in trials if t.role == "ablation"}
    assert roles == {"best", "baseline", "candidate", "revert", "runoff"}
    ok = {t.number for t in trials if t.status == "ok"}
    assert set(built.launch_rate) == ok and any(t.status == "oom" for t in trials)
    assert all(t.step_seconds and len(t.steps) == 8 for t in trials if t.status == "ok")
    assert build("small", 1).launch_rate == build("small", 1).launch_rate      # reproducible


def _est(mean, lo, hi):
    return {"mean": mean, "ci95": [lo, hi]}


def test_the_scorer_on_a_hand_made_study():
    fam = FAMILIES["ar1"]
    best, base = optimum(fam), dict(fam.baseline)
    t_best, t_base = fam.truth(best), fam.truth(base)
    trials = [  # (trial, params, CI, launch rate, warm-up dropped)
        {"trial": 0, "params": base, "status": "ok", "ablation_knob": None, "warmup_steps_dropped": None,
         "tokens_per_sec_per_gpu": _est(t_base, 0.9 * t_base, 1.1 * t_base)},              # covers both
        {"trial": 1, "params": best, "status": "ok", "ablation_knob": None, "warmup_steps_dropped": 2,
         "tokens_per_sec_per_gpu": _est(1.2 * t_best, 1.15 * t_best, 1.25 * t_best)},       # launch only
        {"trial": 2, "params": best, "status": "ok", "ablation_knob": None, "warmup_steps_dropped": None,
         "tokens_per_sec_per_gpu": _est(0.5 * t_best, 0.4 * t_best, 0.6 * t_best)},         # neither
        {"trial": 3, "params": base, "status": "ok", "ablation_knob": "micro_batch", "warmup_steps_dropped": None,
         "tokens_per_sec_per_gpu": None},
        {"trial": 4, "params": base, "status": "oom", "ablation_knob": None, "warmup_steps_dropped": None,
         "tokens_per_sec_per_gpu": None}]
    launch_rate = {0: t_base, 1: 1.2 * t_best, 2: 0.9 * t_best, 3: t_base}
    ratio = t_best / t_base
    analysis = {
        "trials": trials, "top_knobs": ["num_workers", "micro_batch", "nccl_proto"],
        "what_matters": [{"knob": "micro_batch"}, {"knob": "nccl_proto"}], "noise_model": {"phi": 0.97},
        "best": {"params": best, "tokens_per_sec_per_gpu": _est(1.01 * t_best, 0.98 * t_best, 1.04 * t_best),
                 "n_runs": 4, "reliable": True, "failure": {"estimate": 0.1}, "winners_curse_adjusted": True,
                 "speedup_vs_baseline": _est(1.02 * ratio, 1.01 * ratio, 1.03 * ratio)},
        "baseline": {"params": base, "tokens_per_sec_per_gpu": _est(1.2 * t_base, 1.1 * t_base, 1.3 * t_base)}}
    noise = fam.noise(0)
    row = score(fam, noise, launch_rate, analysis)
    assert (row["trials"], row["trial_cover_launch"], row["trial_cover_config"]) == (3, 2, 1)
    assert (row["dropped"], row["dropped_cover"]) == (1, 1) and row["dropped_log_err"] == [pytest.approx(0.0)]
    assert row["rec_cover"] and not row["base_cover"] and not row["speed_cover"]
    assert row["rec_log_err"] == pytest.approx(math.log(1.01)) and row["rec_vs_optimum"] == 1.0
    assert row["speed_log_err"] == pytest.approx(math.log(1.02))
    assert row["rec_hw"] == pytest.approx(0.03 / 1.01) and row["base_hw"] == pytest.approx(0.1 / 1.2)
    assert row["rec_oracle_hw"] == pytest.approx(oracle_half_width(run_log_var(noise), 4))
    assert row["base_oracle_hw"] == pytest.approx(oracle_half_width(run_log_var(noise), 1))   # the revert is not its run
    assert row["big_listed"] == {"micro_batch": True, "num_workers": False}
    assert row["null_listed"] == {"grad_accum": False, "nccl_proto": True, "prefetch_factor": False}
    assert row["top_right"] and row["phi_at_bound"] and not row["rec_fail"]
    assert row["flags"] == dict.fromkeys(("phi_at_bound", "drift", "stalls", "replication_spread"))
    flagged = score(fam, noise, launch_rate, {**analysis, "noise_diagnostics": {"drift": {"flagged": True},
                                                                                "stalls": False}})["flags"]
    assert flagged == {"phi_at_bound": None, "drift": True, "stalls": False, "replication_spread": None}
    other = score(fam, noise, launch_rate, {**analysis, "what_matters": [], "top_knobs": ["padding"],
                                            "best": {**analysis["best"], "speedup_vs_baseline": None}})
    s = summarize([{**row, "cpu_s": 1.0}, {**other, "cpu_s": 3.0}])
    assert s["big_listed"] == {"micro_batch": (1, 2), "num_workers": (0, 2)} and s["null_listed"] == (1, 6)
    assert s["speed_cover"] == (0, 1) and s["speed_bias"] == pytest.approx(math.log(1.02))
    assert s["top_right"] == (1, 2) and s["cpu_s"] == 2.0 and s["flags"]["drift"] is None


def test_half_widths_and_the_oracle():
    assert half_width(_est(100.0, 90.0, 110.0)) == pytest.approx(0.1)
    assert oracle_half_width(0.01**2, 1) == pytest.approx(math.sinh(0.0196), rel=1e-4)


def test_one_study_end_to_end():
    row = _score(run_study(("failures", 0, 0, 0, 0.35)))
    assert row["trials"] > 40 and row["rec_cover"] is not None and row["cpu_s"] > 0
