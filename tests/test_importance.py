"""Importance on synthetic studies with known truth: interactions, conditional knobs, placebo."""

import sys
from pathlib import Path

import pytest

from tuner.importance import knob_importance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from synthetic_studies import FAMILIES, build_study  # noqa: E402


@pytest.fixture(scope="module")
def crossover():
    record, _ = build_study("crossover", 11, "ar1-0.5")
    return {d["knob"]: d for d in knob_importance(record.trials, list(FAMILIES["crossover"]["space"]),
                                                   n_boot=60)["knobs"]}


def test_a_crossover_is_seen_through_total_order_indices(crossover):
    for knob in ("nccl_algo", "nccl_proto"):
        d = crossover[knob]
        assert d["matters"] and d["total"] > 0.1
        assert d["interaction"] > d["first_order"]          # the effect lives in the interaction
    assert not crossover["grad_accum"]["matters"]           # a 6-level placebo knob
    ranked = sorted(crossover, key=lambda k: -crossover[k]["total"])
    assert set(ranked[:3]) == {"nccl_algo", "nccl_proto", "micro_batch"}


def test_cis_hold_their_point_estimate_and_start_at_zero_or_above(crossover):
    for d in crossover.values():
        lo, hi = d["total_ci95"]
        assert 0.0 <= lo <= d["total"] <= hi


def test_a_conditional_knob_does_not_take_its_parents_credit():
    record, _ = build_study("conditional", 12, "ar1-0")
    res = knob_importance(record.trials, list(FAMILIES["conditional"]["space"]), n_boot=40)
    imp = {d["knob"]: d for d in res["knobs"]}
    assert imp["num_workers"]["matters"] and imp["num_workers"]["total"] > 5 * imp["prefetch_factor"]["total"]
    assert not imp["prefetch_factor"]["matters"] and not imp["nccl_proto"]["matters"]
    assert res["oob_r2"] > 0.5 and res["n_boot"] == 40 and res["placebo"]["total"] >= 0


def test_failed_and_ablation_runs_are_not_in_the_fit():
    record, _ = build_study("failures", 13, "ar1-0")
    res = knob_importance(record.trials, list(FAMILIES["failures"]["space"]), n_boot=0)
    assert res["n_trials"] == sum(t.status == "ok" and t.role != "ablation" for t in record.trials)
    few = knob_importance(record.trials[:4], ["micro_batch", "padding"], n_boot=0)   # too few trials: no numbers
    assert few["knobs"] == [] or all(d["total"] is None for d in few["knobs"])
