"""RECIPE.md is safe to apply: it states the plan it prices, warns wherever it forces NCCL,
and offers the per-collective choice as NCCL's tuner-plugin configuration (issue 33, item 2)."""

import copy

import pytest

from tests.stats.test_analysis import synthetic_study
from tuner.report import render_nccl_tuner_conf, render_recipe
from tuner.stats import analyze_study


@pytest.fixture(scope="module")
def analysis():
    a = analyze_study(synthetic_study(n=24, seed=5), n_boot=0)
    a["spec"]["cluster"].update(nodes=4, gpus_per_node=8, gpu="H100-80GB", backend="nccl")
    a["spec"]["model"] = {"preset": "llama-2-7b", "seq_len": 2048}
    return a


def _forcing(analysis, **params):
    a = copy.deepcopy(analysis)
    a["best"]["params"].update(params)
    return a


def test_the_headline_states_the_plan_it_prices_and_the_mfu(analysis):
    recipe = render_recipe(analysis, planned_tokens=3e9)
    head = recipe.split("## Apply")[0]
    assert f"Recommended: trial {analysis['best']['trial']}" in head and "MFU " in head
    assert "on a planned run of 3e+09 tokens (`--planned-tokens`) on 32 GPU(s)" in head and "GPU-h" in head


def test_a_forced_protocol_carries_a_warning_and_a_tuner_plugin_config(analysis):
    a = _forcing(analysis, nccl_proto="LL128", nccl_algo="Ring")
    recipe = render_recipe(a)
    apply = recipe.split("## What it buys")[0]
    assert "export NCCL_PROTO=LL128   # forced: see the warning below" in apply
    assert "**Warning: `NCCL_ALGO=Ring` and `NCCL_PROTO=LL128` force NCCL's choice" in apply
    assert "discourages setting `NCCL_PROTO`" in apply and "corrupt data" in apply
    conf = render_nccl_tuner_conf(a)
    rows = [ln for ln in conf.splitlines() if not ln.startswith("#")]
    assert rows == [f"{c},0,4294967295,ring,ll128,-1,4,32,-1,-1" for c in ("allgather", "reducescatter", "allreduce")]
    assert "NCCL_TUNER_CONFIG_FILE" in conf and "NCCL_TUNER_PLUGIN" in conf
    assert all(row in apply for row in rows)                    # the recipe shows the same lines


def test_one_forced_choice_gives_a_commented_template_and_none_gives_no_config(analysis):
    a = _forcing(analysis, nccl_proto="LL128", nccl_algo="default")
    conf = render_nccl_tuner_conf(a)
    assert not [ln for ln in conf.splitlines() if not ln.startswith("#")]     # nothing active to apply blindly
    assert "# allgather,0,4294967295,ALGORITHM,ll128,-1,4,32,-1,-1" in conf
    assert "unset NCCL_ALGO" in render_recipe(a) and "Warning: `NCCL_PROTO=LL128` forces" in render_recipe(a)
    quiet = _forcing(analysis, nccl_proto="default", nccl_algo="default")
    assert render_nccl_tuner_conf(quiet) is None and "Warning" not in render_recipe(quiet).split("## What it buys")[0]
    gloo = copy.deepcopy(a)
    gloo["spec"]["cluster"]["backend"] = "gloo"
    assert render_nccl_tuner_conf(gloo) is None and "export NCCL_" not in render_recipe(gloo)


def test_a_knob_listed_from_a_move_says_which_level_it_was_measured_against(analysis):
    a = copy.deepcopy(analysis)
    a["best"]["params"]["nccl_proto"] = "default"
    channel = {"impact": 0.09, "ci95": [0.04, 0.14], "p_value": 0.001, "significant": True, "move": True,
               "best_value": "default", "tested_value": "LL"}
    a["what_matters"] = [{"knob": "nccl_proto", "source": "ablation", "impact": 0.09, "ci95": [0.04, 0.14],
                          "evidence": ["ablation"], "ablation": channel, "importance": None}]
    assert "**nccl_proto = default**" in render_recipe(a) and "worth +9.0% against LL (95% CI" in render_recipe(a)
    a["best"]["params"]["nccl_proto"] = "LL"        # the move won: the recommendation has its level
    a["what_matters"][0].update(impact=-0.09, ci95=[-0.14, -0.04])
    a["what_matters"][0]["ablation"] = {**channel, "impact": -0.09, "ci95": [-0.14, -0.04]}
    line = next(ln for ln in render_recipe(a).splitlines() if ln.startswith("1. **nccl_proto = LL**"))
    assert "worth +9.9% over default (a one-knob move from it) (95% CI +4.2% to +16.3%" in line


def test_a_listed_knob_whose_revert_read_faster_says_so_not_just_not_significant(analysis):
    """The ablation tests one side (the recommended level faster than its revert): a knob the
    importance lists whose revert read clearly faster is not 'not significant' but evidence
    against the recommended level, and RECIPE says so."""
    a = copy.deepcopy(analysis)
    a["best"]["params"]["num_workers"] = 4
    channel = {"impact": -0.2, "ci95": [-0.3, -0.1], "p_value": 0.001, "significant": False, "move": False,
               "best_value": 4, "tested_value": 0}
    a["what_matters"] = [{"knob": "num_workers", "source": "importance", "total": 0.4, "ci95": [0.2, 0.6],
                          "evidence": ["importance"], "ablation": channel,
                          "importance": {"total": 0.4, "ci95": [0.2, 0.6], "matters": True}}]
    line = next(ln for ln in render_recipe(a).splitlines() if ln.startswith("1. **num_workers = 4**"))
    assert "its revert read faster than this level" in line and "not significant" not in line
    a["what_matters"][0]["ablation"] = {**channel, "impact": 0.05, "ci95": [-0.02, 0.12], "p_value": 0.2}
    line = next(ln for ln in render_recipe(a).splitlines() if ln.startswith("1. **num_workers = 4**"))
    assert "not significant after Holm" in line


def test_a_knob_listed_on_both_channels_together_gives_each_channels_p(analysis):
    """Issue 29 item 3: a knob neither channel lists alone, but both point to (tuner.stats'
    combined_evidence), is listed with the re-measured effect, each channel's p and the combined
    test, and not called Holm-significant or a placebo-like knob."""
    a = copy.deepcopy(analysis)
    a["best"]["params"]["num_workers"] = 4
    a["what_matters"] = [{"knob": "num_workers", "source": "both", "impact": 0.083, "ci95": [-0.005, 0.178],
                          "evidence": ["ablation", "importance"],
                          "ablation": {"impact": 0.083, "ci95": [-0.005, 0.178], "p_value": 0.062, "p_slower": 0.031,
                                       "significant": False, "move": False, "best_value": 4, "tested_value": 0},
                          "importance": {"total": 0.13, "ci95": [0.02, 0.28], "vs_placebo_ci95": [0.03, 0.25],
                                         "matters": False, "p_vs_placebo": 0.012},
                          "combined": {"p_value": 0.031**2, "significant": True, "method": "Wilkinson"}}]
    a["importance"] = [*a["importance"], {"knob": "num_workers", "total": 0.13, "ci95": [0.02, 0.28],
                                           "matters": False}]
    text = render_recipe(a)
    line = next(ln for ln in text.splitlines() if ln.startswith("1. **num_workers = 4**"))
    assert "worth +8.3% (95% CI -0.5% to +17.8%, re-measured)" in line and "Holm-corrected)" not in line.split(";")[0]
    assert "one-sided p 0.031" in line and "placebo knob's (p 0.012)" in line and "0.00096, Holm-corrected" in line
    assert not any("num_workers" in ln for ln in text.splitlines() if ln.startswith(("Not distinguishable", "Undecided")))


def test_a_knob_the_ablation_cannot_rule_out_is_undecided_not_quiet(analysis):
    """Issue 29 item 3: where both channels lack the power, RECIPE says so per knob instead of
    listing it with the knobs that showed no effect."""
    a = copy.deepcopy(analysis)
    a["undecided"] = [{"knob": "prefetch_factor", "impact": 0.04, "ci95": [-0.06, 0.15]}]
    a["importance"] = [*a["importance"], {"knob": "prefetch_factor", "total": 0.01, "ci95": [0.0, 0.02],
                                           "matters": False}]
    text = render_recipe(a)
    line = next(ln for ln in text.splitlines() if ln.startswith("Undecided:"))
    assert "prefetch_factor (+4.0%, 95% CI -6.0% to +15.0%)" in line and "10% or more" in line
    quiet = [ln for ln in text.splitlines() if ln.startswith("Not distinguishable")]
    assert all("prefetch_factor" not in ln for ln in quiet)


def test_a_recommendation_on_another_global_batch_says_so_at_the_top(analysis):
    a = copy.deepcopy(analysis)
    a["best"]["params"].update(micro_batch=4, grad_accum=1, padding="packed")
    a["baseline"]["params"].update(micro_batch=2, grad_accum=4, padding="max_length")
    text = render_recipe(a)
    line = next(ln for ln in text.splitlines() if ln.startswith("> **The global batch changes**"))
    assert "128 rows per optimizer step (micro_batch 4 x grad_accum 1 x 32 GPUs) against today's 256" in line
    assert "padding max_length -> packed" in line and "grad_accum 2, measure it before switching" in line
    assert text.index("The global batch changes") < text.index("## Apply")
    a["best"]["params"].update(micro_batch=2, grad_accum=4)                    # the same batch: nothing to say
    assert "The global batch changes" not in render_recipe(a)


def test_a_knob_whose_revert_failed_is_said_so_not_called_placebo_like(analysis):
    a = copy.deepcopy(analysis)
    a["ablation"] = {**(a.get("ablation") or {}), "knobs": [], "not_measured": [],
                     "failed": [{"knob": "grad_accum", "status": "oom", "trial": 204, "remeasure": False},
                                {"knob": None, "status": "error", "trial": 205, "remeasure": True}]}
    a["what_matters"], a["undecided"] = [], []
    a["importance"] = [*a["importance"], {"knob": "grad_accum", "total": 0.01, "ci95": [0.0, 0.02], "matters": False}]
    text = render_recipe(a)
    assert "could not measure them (the recommended level is the one that runs here): grad_accum (trial 204, " \
           "out of memory)." in text
    assert all("grad_accum" not in ln for ln in text.splitlines() if ln.startswith("Not distinguishable"))


def test_a_forced_nccl_setting_without_evidence_says_unsetting_it_is_the_choice(analysis):
    a = _forcing(analysis, nccl_proto="Simple", nccl_algo="Ring")
    a["what_matters"] = [{"knob": "nccl_algo", "source": "ablation", "impact": 0.2, "ci95": [0.1, 0.3],
                          "evidence": ["ablation"], "ablation": None, "importance": None}]
    text = render_recipe(a)
    proto = next(ln for ln in text.splitlines() if ln.startswith("export NCCL_PROTO="))
    algo = next(ln for ln in text.splitlines() if ln.startswith("export NCCL_ALGO="))
    assert "no evidence here that forcing it helps" in proto and "no evidence" not in algo
