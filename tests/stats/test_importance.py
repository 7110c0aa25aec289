"""Importance on synthetic studies with known truth: interactions, conditional knobs, placebo."""

import pytest

from bench.synthetic_studies import FAMILIES, build_study
from tuner.stats import knob_importance


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


def test_each_knobs_p_against_the_placebo_agrees_with_its_intervals(crossover):
    """p_vs_placebo is the one-sided BCa p of the knob's index not beating the placebo's, from
    the same resamples: under 2.5% exactly where the 95% interval of the difference clears 0,
    under 2.5% / (knobs) where the knob "matters" (Bonferroni)."""
    knobs = len(crossover)
    for d in crossover.values():
        assert 0 < d["p_vs_placebo"] < 1
        assert (d["p_vs_placebo"] < 0.025) == (d["vs_placebo_ci95"][0] > 0), d
        assert d["matters"] == (d["p_vs_placebo"] < 0.025 / knobs), d
    assert crossover["nccl_algo"]["p_vs_placebo"] < 0.01 < crossover["grad_accum"]["p_vs_placebo"]


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


def test_the_true_indices_the_bench_judges_against():
    from bench.importance_truth import true_indices

    cross = true_indices("crossover")
    for knob in ("nccl_algo", "nccl_proto"):            # a pure crossover: all total, no first order
        assert cross[knob][0] > 0.4 and cross[knob][1] == pytest.approx(0.0, abs=1e-9)
    assert cross["micro_batch"][0] == pytest.approx(cross["micro_batch"][1])   # additive: total = first
    assert cross["grad_accum"] == (0.0, 0.0)
    cond = true_indices("conditional")
    assert cond["prefetch_factor"] == (0.0, 0.0) and cond["num_workers"][0] > cond["padding"][0] > 0


def test_twelve_trial_studies_rank_the_true_top_3_first_in_most_studies():
    """Done-when "the top 3 are right in at least 80% of studies" for 12-trial studies, with 7
    studies (one per noise family) instead of the bench's 40: at least 5 of 7. Before issue 12
    (prefetch_factor's n/a level took num_workers' credit) this held in few studies."""
    from bench.noise_families import FAMILIES as NOISE

    space = list(FAMILIES["small"]["space"])
    right = 0
    for seed, noise in enumerate(NOISE):
        record, _ = build_study("small", seed, noise)
        res = knob_importance(record.trials, space, n_boot=0)
        right += {d["knob"] for d in res["knobs"][:3]} == FAMILIES["small"]["top3"]
    assert right >= 5

