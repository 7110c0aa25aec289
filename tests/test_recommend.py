"""The recommendation, speedup, ablation and "what matters" on studies with known truth
(bench/synthetic_studies.py holds the same checks with more replicates)."""

import dataclasses
import sys
from pathlib import Path

import pytest

from tuner.analysis import analyze_record
from tuner.record import StudyRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from synthetic_studies import FAMILIES, build_study, evaluate  # noqa: E402


@pytest.mark.parametrize("seed", [0, 1])
def test_a_config_that_fails_often_is_never_recommended(seed):
    record, truth = build_study("failures", seed, "ar1-0.5")
    analysis = analyze_record(record, n_boot=0)
    best = analysis["best"]
    assert best["params"]["micro_batch"] != 8 and best["reliable"]        # mb 8 fails 70% of its runs
    flaky = best["faster_but_flaky"]
    assert flaky is None or (flaky["params"]["micro_batch"] == 8 and flaky["failure"]["estimate"] >= 0.25)
    rates = analysis["failure_rates"]["micro_batch"]["8"]
    assert rates["rate"] > 0.4 and rates["ci95"][0] < rates["rate"] < rates["ci95"][1]
    assert not evaluate("failures", analysis, truth)["recommended_fails_half"]


@pytest.mark.parametrize("family,seed", [("crossover", 3), ("conditional", 4)])
def test_placebo_knobs_never_in_what_matters_and_speedup_covers(family, seed):
    record, truth = build_study(family, seed, "ar1-0.8")
    analysis = analyze_record(record, n_boot=60, seed=seed)
    result = evaluate(family, analysis, truth)
    assert not result["placebo_in_what_matters"], analysis["what_matters"]
    assert result["speedup_hit"] in (True, None)
    assert result["trial_hits"] >= 0.85 * result["trial_total"]
    assert analysis["best"]["winners_curse_adjusted"] and analysis["best"]["n_runs"] >= 2
    assert analysis["ablation"]["multiplicity"].startswith("Holm")
    assert {r["knob"] for r in analysis["what_matters"]} <= set(FAMILIES[family]["space"])


def test_a_failed_remeasurement_is_a_failure_and_demotes_its_config():
    record, _ = build_study("conditional", 5, "ar1-0")
    first = next(t for t in record.trials if t.role == "ablation" and t.ablation_knob is None)
    clean = analyze_record(record, n_boot=0)
    assert clean["best"]["params"] == first.params or clean["best"]["winners_curse_adjusted"]
    # every re-measurement of the planned best ran out of memory
    trials = tuple(dataclasses.replace(t, status="oom", steps=(), step_seconds=(), value=0.0)
                   if t.role == "ablation" and t.ablation_knob is None and t.params == first.params else t
                   for t in record.trials)
    analysis = analyze_record(StudyRecord(name="x", trials=trials, attrs=record.attrs), n_boot=0)
    assert analysis["best"]["params"] != first.params
    failed = analysis["ablation"]["failed"]
    assert failed and all(f["remeasure"] and f["status"] == "oom" for f in failed)
