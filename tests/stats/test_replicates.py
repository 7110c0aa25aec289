"""tuner.stats' revert_replicates: the ablation's undecided slowdowns measured again, and the
admission's runoff stage that enqueues them (tuner.study)."""

import numpy as np
import pytest

from tuner.stats import MAX_REPLICATES, MIN_SLOWDOWN, TrialRecord, revert_replicates, undecided_slowdowns

BEST = {"a": 1, "b": 1, "c": 1, "d": 1}
BASE = {"a": 0, "b": 0, "c": 0, "d": 0}


def _run(number, params, rate, rng, sd=0.02, **attrs):
    """An ok run of 8 steps with ``sd`` white noise about ``rate``."""
    steps = tuple(float(rate * np.exp(rng.normal(0.0, sd))) for _ in range(8))
    return TrialRecord(number=number, state="COMPLETE", status="ok", params=params, steps=steps,
                       value=sum(steps) / len(steps), gpu_seconds=100.0, **attrs)


def _study(revert_rates, seed=1, sd=0.02, launch_sd=0.01):
    """A baseline, the round's best and baseline twice each (launch-to-launch ``launch_sd``), and
    one revert of each knob at ``revert_rates[knob]``."""
    rng = np.random.default_rng(seed)
    launch = lambda r: r * float(np.exp(rng.normal(0.0, launch_sd)))  # noqa: E731
    trials = [_run(0, BASE, launch(80.0), rng, sd, role="baseline")]
    for _ in range(2):
        trials.append(_run(len(trials), BEST, launch(100.0), rng, sd, role="ablation", remeasure="best", ablation_round=1))
        trials.append(_run(len(trials), BASE, launch(80.0), rng, sd, role="ablation", remeasure="baseline",
                           ablation_round=1))
    for knob, rate in revert_rates.items():
        trials.append(_run(len(trials), {**BEST, knob: 0}, launch(rate), rng, sd, role="ablation", ablation_knob=knob,
                           ablation_round=1, ablation_of=1))
    return trials


def test_only_slowdowns_holm_could_not_call_are_measured_again_most_nearly_decided_first():
    # a: 40% slower (decided); b and d: a few % slower (undecided); c: reads faster (the runoff's)
    trials = _study({"a": 60.0, "b": 96.0, "c": 106.0, "d": 98.0})
    undecided = undecided_slowdowns(trials)
    assert [e["knob"] for e in undecided] == ["b", "d"]
    assert undecided[0]["p_value"] < undecided[1]["p_value"]
    assert all(e["impact"] > 0 and not e["significant"] for e in undecided)
    runs = revert_replicates(trials, budget_gpu_seconds=250.0, full_run_gpu_seconds=100.0)
    assert [(r["knob"], r["params"], r["move"]) for r in runs] == [("b", {**BEST, "b": 0}, False),
                                                                   ("d", {**BEST, "d": 0}, False)]
    # what the budget affords, in that order, round by round, up to MAX_REPLICATES rounds; nothing below one run
    assert [r["knob"] for r in revert_replicates(trials, budget_gpu_seconds=150.0, full_run_gpu_seconds=100.0)] == ["b"]
    assert [r["knob"] for r in revert_replicates(trials, budget_gpu_seconds=500.0,
                                                 full_run_gpu_seconds=100.0)] == ["b", "d", "b", "d", "b"]
    assert len(revert_replicates(trials, budget_gpu_seconds=1e6, full_run_gpu_seconds=100.0)) == 2 * MAX_REPLICATES
    assert revert_replicates(trials, budget_gpu_seconds=99.0, full_run_gpu_seconds=100.0) == []


def test_a_slowdown_under_min_slowdown_is_not_measured_again():
    """Noise-free runs: every reading is its truth, and the launch variance is the stated prior
    alone, so neither slowdown is decided. The revert 0.5% slower is under MIN_SLOWDOWN; the
    one 3% slower is measured again."""
    trials = _study({"c": 99.5, "d": 97.0}, sd=0.0, launch_sd=0.0)
    effects = undecided_slowdowns(trials)
    assert [e["knob"] for e in effects] == ["d"] and MIN_SLOWDOWN > 0.005
    assert abs(effects[0]["impact"] - (100.0 / 97.0 - 1)) < 1e-9


def test_a_study_without_reverts_replicates_nothing():
    trials = _study({})
    assert undecided_slowdowns(trials) == [] and revert_replicates(trials, budget_gpu_seconds=1e6,
                                                                   full_run_gpu_seconds=100.0) == []


@pytest.mark.parametrize("share, expected", [(0.3, MAX_REPLICATES), (0.17, 2)])
def test_the_runoff_stage_measures_an_undecided_slowdown_again_after_the_runoff(share, expected):
    """tuner.study's two stages on an Optuna study: grad_accum's revert reads 2% slower, which
    one run cannot decide; micro_batch's reads 2x slower; num_workers' 0.1% slower, under
    MIN_SLOWDOWN (and a runoff finalist). The runoff's stage queues the runoff, then more runs
    of grad_accum's revert alone, as many as the ablation share still affords, and the analysis
    reads grad_accum's effect from all of its runs."""
    import itertools

    import optuna

    from tests.stats.test_runoff import _finish
    from tuner.spec import parse_spec
    from tuner.stats import analyze_record, study_record
    from tuner.study import plan_ablation_once

    space = {"micro_batch": [1, 2, 4], "grad_accum": [1, 2, 4], "num_workers": [0, 1]}
    spec_doc = {"study": {"name": "replicates", "ablation_share": share}, "model": {"preset": "tiny"},
                "space": space, "cluster": {"launcher": "sim"}}
    spec = parse_spec(spec_doc)                         # 3,000 or 1,700 of 10,000 GPU-s; a run costs 100

    def value(p):
        return (100.0 * {1: 0.5, 2: 0.8, 4: 1.0}[p["micro_batch"]] * {1: 1.0, 2: 0.98, 4: 0.9}[p["grad_accum"]]
                * {0: 0.999, 1: 1.0}[p["num_workers"]])

    def run_queue():
        ran = []
        while any(t.state == optuna.trial.TrialState.WAITING for t in study.get_trials(deepcopy=False)):
            trial = study.ask()
            params = {k: trial.suggest_categorical(k, v) for k, v in space.items()}
            _finish(study, trial, value(params), 100.0)
            ran.append((params, trial.user_attrs))
        return ran

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("spec", spec_doc)
    study.enqueue_trial({"micro_batch": 1, "grad_accum": 2, "num_workers": 0}, user_attrs={"role": "baseline"})
    for mb, ga, nw in itertools.product(*space.values()):
        if (mb, ga, nw) != (1, 2, 0):
            study.enqueue_trial({"micro_batch": mb, "grad_accum": ga, "num_workers": nw})
    run_queue()
    assert plan_ablation_once(study, spec, study.get_trials(), limit_gpu_seconds=10_000.0)
    stage1 = run_queue()
    assert {a.get("ablation_knob") for _, a in stage1} == {None, "micro_batch", "grad_accum", "num_workers"}
    assert plan_ablation_once(study, spec, study.get_trials(), limit_gpu_seconds=10_000.0)
    stage2 = run_queue()
    kinds = [a.get("remeasure") or a.get("ablation_knob") for _, a in stage2]
    replicates = kinds.count("grad_accum")
    assert kinds == ["runoff"] * (len(kinds) - replicates) + ["grad_accum"] * replicates
    # 0.3: every round affordable; 0.17: the round's 9 runs and the runoff's 6 leave 200 GPU-s, two runs
    assert replicates == expected
    revert = {"micro_batch": 4, "grad_accum": 2, "num_workers": 1}
    assert revert not in [p for p, a in stage2 if a.get("remeasure")]   # not a finalist: its runs are the revert's
    for params, attrs in stage2[-replicates:]:
        assert params == revert
        assert attrs["ablation_replicate"] is True and attrs["role"] == "ablation" and attrs["ablation_round"] == 1
    assert 100.0 * len(stage1 + stage2) <= share * 10_000.0   # within the ablation share
    effects = {e["knob"]: e for e in analyze_record(study_record(study), n_boot=0)["ablation"]["knobs"]}
    assert len(effects["grad_accum"]["trials"]) == 1 + replicates
    assert len(effects["micro_batch"]["trials"]) == len(effects["num_workers"]["trials"]) == 1


def test_replicate_runs_go_round_by_round_cold_and_back_to_back_on_a_resident_worker():
    from tuner.study import replicate_runs

    trials = _study({"a": 60.0, "b": 96.0, "c": 106.0, "d": 98.0})
    cold = replicate_runs(trials, budget_gpu_seconds=400.0, full_run_gpu_seconds=100.0)
    warm = replicate_runs(trials, budget_gpu_seconds=400.0, full_run_gpu_seconds=100.0, resident=True)
    assert [a["ablation_knob"] for _, a in cold] == ["b", "d", "b", "d"]
    assert [a["ablation_knob"] for _, a in warm] == ["b", "b", "d", "d"]   # a change of config rebuilds the worker
    for params, attrs in cold:
        knob = attrs["ablation_knob"]
        assert params == {**BEST, knob: 0}
        assert attrs == {"role": "ablation", "ablation_of": 1, "ablation_round": 1, "ablation_knob": knob,
                         "ablation_replicate": True}
