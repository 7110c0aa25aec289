"""Stalling studies: configs compared on their steady steps, the stalls' cost pooled, unless a knob causes them."""

import math

import numpy as np
import pytest

from tuner.stats import (
    SHARED_SE,
    StudyRecord,
    TrialRecord,
    analyze_record,
    config_estimate,
    ratio_estimate,
    stall_corrected,
    trial_cis,
)

EXTRA = 1.5        # a stall takes 1 + U(1, 2) times as long
PERIODS = (4, 5, 6)
OVERHEAD = 1 + EXTRA * np.mean([1 / p for p in PERIODS])   # expected step time over steady, over launches


def study(rng, *, runs=60, steps=8, stalls_for=lambda k: True, rates=(1000.0, 1200.0), launches=None):
    """Runs of two configs (k = 0, 1); a launch stalls every P-th step (P from PERIODS, random
    phase) where ``stalls_for(k)``; AR(1) step noise 2 %, launches 2 % (each launch's factor
    into ``launches``, by trial number)."""
    out = []
    for n in range(runs):
        k = n % 2
        e, times = 0.0, []
        period, phase = rng.choice(PERIODS), rng.integers(6)
        launch = math.exp(rng.normal(0, 0.02))
        if launches is not None:
            launches[n] = launch
        for t in range(steps):
            e = 0.5 * e + math.sqrt(0.75) * rng.normal(0, 0.02)
            stall = stalls_for(k) and (t + phase) % period == 0
            times.append(math.exp(e) * (1 + rng.uniform(1, 2) if stall else 1.0))
        steps_rate = tuple(rates[k] * launch / np.asarray(times))
        out.append(TrialRecord(number=n, state="COMPLETE", status="ok", params={"k": k, "placebo": n % 3},
                               steps=steps_rate, value=float(np.mean(steps_rate))))
    return out


def estimate(runs, cis, k):
    return config_estimate([cis[t.number] for t in runs if t.params["k"] == k], tau2=0.02**2, tau_df=2)


def test_stalls_that_cost_every_config_alike_are_pooled_and_configs_compared_on_steady_steps():
    rng = np.random.default_rng(1)
    runs = study(rng)
    plain, _ = trial_cis(runs)
    moved, fit = stall_corrected(runs, plain)
    assert fit is not None and not fit.guard["refused"]
    assert fit.overhead == pytest.approx(OVERHEAD, rel=0.03)
    # each config's long-run rate keeps its stalls: steady rate over the pooled overhead
    for k, rate in ((0, 1000.0), (1, 1200.0)):
        ci = estimate(runs, moved, k)["ci95"]
        assert ci[0] < rate / OVERHEAD < ci[1]
    # the shared overhead cancels in a ratio, which the steady steps read far more precisely
    speedup, before = (ratio_estimate(estimate(runs, c, 1), estimate(runs, c, 0)) for c in (moved, plain))
    assert speedup["ci95"][0] < 1.2 < speedup["ci95"][1]
    width = lambda r: math.log(r["ci95"][1] / r["ci95"][0])  # noqa: E731
    assert width(speedup) < width(before) / 2
    assert all(moved[t.number][SHARED_SE] == pytest.approx(fit.overhead_log_se) for t in runs)


def test_stalls_that_follow_a_knob_are_left_in_each_run():
    runs = study(np.random.default_rng(2), stalls_for=lambda k: k == 0)
    plain, _ = trial_cis(runs)
    moved, fit = stall_corrected(runs, plain)
    assert fit.guard["refused"] and fit.guard["knob"] == "k" and moved is plain
    # so the stalls show as k's effect: config 0 reads its stalls, config 1 none
    speedup = ratio_estimate(estimate(runs, moved, 1), estimate(runs, moved, 0))
    assert speedup["ci95"][0] < 1.2 * OVERHEAD < speedup["ci95"][1]


def test_a_study_without_stalls_is_left_alone():
    runs = study(np.random.default_rng(3), stalls_for=lambda k: False)
    plain, _ = trial_cis(runs)
    assert stall_corrected(runs, plain) == (plain, None)


def test_the_analysis_says_what_it_did_and_trials_keep_their_launch():
    runs = study(np.random.default_rng(4), runs=40)
    analysis = analyze_record(StudyRecord(name="stalling", trials=tuple(runs), attrs={}), n_boot=0)
    stalls = analysis["noise_diagnostics"]["stalls"]
    assert stalls["flagged"] and stalls["correction"]["overhead"] == pytest.approx(OVERHEAD, rel=0.05)
    assert "steady steps" in stalls["meaning"] and "steady steps" in analysis["method"]["estimand"]
    plain, _ = trial_cis(runs)
    first = analysis["trials"][0]["tokens_per_sec_per_gpu"]
    assert first["mean"] == pytest.approx(plain[0]["mean"]) and first["ci95"] == pytest.approx(plain[0]["ci95"])

    refused = study(np.random.default_rng(5), runs=40, stalls_for=lambda k: k == 0)
    stalls = analyze_record(StudyRecord(name="k stalls", trials=tuple(refused), attrs={}),
                            n_boot=0)["noise_diagnostics"]["stalls"]
    assert stalls["correction"]["guard"]["refused"] and "follow k" in stalls["meaning"]


def test_a_runs_own_se_is_its_steady_steps_autocorrelated_noise():
    # each moved run against its launch's steady rate: z-scores of sd 1 (phi 0.5 over 5-7
    # steady steps; an se without the AR(1) factor, or read with the short runs' bias, is off)
    z = []
    for seed in range(6):
        launches = {}
        runs = study(np.random.default_rng(10 + seed), runs=80, launches=launches)
        moved, fit = stall_corrected(runs, trial_cis(runs)[0])
        for t in runs:
            m = moved[t.number]
            own = math.sqrt((m["se"] / m["mean"]) ** 2 - m[SHARED_SE] ** 2)
            truth = (1000.0, 1200.0)[t.params["k"]] * launches[t.number]
            z.append(math.log(m["mean"] * fit.overhead / truth) / own)
    assert 0.85 < np.std(z) < 1.2 and abs(np.mean(z)) < 0.2


def test_the_steady_rate_is_tokens_over_time_and_the_overhead_a_mean_over_runs():
    # no noise: steady steps alternate 900 and 1100 tokens/s (tokens over time below their mean);
    # runs stall once, twice or three times at 400 tokens/s (mid-run: not read as warm-up)
    runs = []
    for n in range(12):
        stalls = (2, 4, 6)[: 1 + n % 3]
        steps = [400.0 if j in stalls else (900.0 if j % 2 else 1100.0) for j in range(8)]
        runs.append(TrialRecord(number=n, state="COMPLETE", status="ok", params={"k": n % 2}, steps=tuple(steps),
                                value=float(np.mean(steps))))
    moved, fit = stall_corrected(runs, trial_cis(runs)[0])
    overheads = []
    for t in runs:
        time = 1 / np.asarray(t.steps)
        overheads.append(time.mean() / time[np.asarray(t.steps) > 500].mean())
    assert fit.overhead == pytest.approx(np.mean(overheads))
    steady = [1 / np.mean(1 / np.asarray([s for s in t.steps if s > 500])) for t in runs]
    assert [moved[t.number]["mean"] for t in runs] == pytest.approx([r / np.mean(overheads) for r in steady])
    assert steady[0] < np.mean([s for s in runs[0].steps if s > 500]) - 5   # not the steps' plain mean


def test_the_guard_rarely_refuses_stalls_no_knob_causes_and_sees_a_level_run_once():
    refusals = 0
    for seed in range(10):
        runs = study(np.random.default_rng(30 + seed))
        refusals += stall_corrected(runs, trial_cis(runs)[0])[1].guard["refused"]
    assert refusals <= 1
    # one run at a level that stalls every third step, its steady steps a little faster
    rng = np.random.default_rng(40)
    runs = study(rng)
    steps = np.array([1100.0 / (3.0 if j % 3 == 0 else 1.0) for j in range(8)]) * np.exp(rng.normal(0, 0.02, 8))
    runs.append(TrialRecord(number=len(runs), state="COMPLETE", status="ok", params={"k": 2, "placebo": 0},
                            steps=tuple(steps), value=float(steps.mean())))
    moved, fit = stall_corrected(runs, trial_cis(runs)[0])
    assert fit.guard["refused"] and fit.guard["knob"] == "k"
