"""helper.plan: every point of the team lead's question, for 13B on 32 H100s and on other shapes,
and the fixes of issue 31 (world size, one recipe, honest band, reasons from the numbers, warnings)."""

import re

import pytest

from helper import plan_training
from helper.band import band_pct
from helper.calibration import load_calibration
from helper.plan import MIN_STEPS, critical_batch_tokens, dataset_global_batch, node_split
from helper.plan_reasons import PART_WORDS, compared_parts


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, gpu="H100-80GB", tokens=100e9, cost_per_gpu_hour=2.0)


def test_13b_on_32_h100_answers_every_point(plan13):
    c = plan13["chosen"]
    assert {r["layout"] for r in plan13["layouts"]} >= {"fsdp", "hsdp", "fsdp+tp8", "pp2+fsdp"}
    for r in plan13["layouts"]:
        assert set(r["memory_gib"]) >= {"static", "activations", "total"} and "headroom_gib" in r
        assert r["steps"] >= 1 and r["global_batch"] == r["micro_batch"] * r["grad_accum"] * r["dp_shard"] * r["dp_replicate"]
        assert (r["why_not"] is None) == (r is c)
    assert c["fits"] and c["headroom_gib"] > 0
    lo, hi = c["band"]
    assert lo < c["tokens_per_sec_per_gpu"] < hi and 0 < c["mfu"] < 1
    assert c["gpu_hours"] == pytest.approx(c["wall_hours"] * 32) and c["cost"] == pytest.approx(2 * c["gpu_hours"])
    assert c["gpu_hours"] == pytest.approx(100e9 / c["tokens_per_sec_per_gpu"] / 3600, rel=1e-9)
    # within the published MPT-13B figure's neighbourhood (4,811 tok/s/GPU, llm-foundry; see docs/validation.md)
    assert 4811 * 0.8 < c["tokens_per_sec_per_gpu"] < 4811 * 1.2
    assert len(plan13["reasons"]) == len(plan13["layouts"])
    assert all(any(w in r["why_not"] for w in ("slower", "does not fit", "simpler")) for r in plan13["layouts"] if r["why_not"])
    assert plan13["checkpoint"]["meets_limit"]


@pytest.mark.parametrize("gpu_count", range(1, 65))
def test_processes_launched_are_the_gpus_planned_or_a_one_line_refusal(gpu_count):
    # issue 31 item 2: --gpus 12 planned 12 GPUs and launched 2 x 8 = 16 processes
    try:
        nodes, per_node = node_split(gpu_count, 8)
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and f"gpu_count {gpu_count}" in msg
        suggested = [int(n) for n in re.findall(r"use (\d+) or (\d+)", msg)[0]]
        assert all(node_split(n, 8)[0] * node_split(n, 8)[1] == n for n in suggested)
        return
    assert nodes * per_node == gpu_count and per_node <= 8 and (nodes == 1 or per_node >= 4)


def test_12_gpus_plan_two_nodes_of_six():
    p = plan_training("13b", 12, tokens=10e9)
    i = p["inputs"]
    assert (i["nodes"], i["gpus_per_node"]) == (2, 6) and i["nodes"] * i["gpus_per_node"] == 12
    assert any("2 nodes x 6" in w for w in p["chosen"]["warnings"])
    with pytest.raises(ValueError, match="gpu_count 13 cannot be spread evenly"):
        plan_training("13b", 13, tokens=10e9)


@pytest.mark.parametrize("size, gpus", [("13b", 32), ("175b", 256), ("70b", 64), ("13b", 12)])
def test_every_layout_runs_the_same_global_batch(size, gpus):
    # issue 31 item 10: 175B had 10.5M tokens for FSDP and 8.4M for TP2
    p = plan_training(size, gpus, tokens=300e9)
    batches = {r["global_batch_tokens"] for r in p["layouts"] if r["fits"]}
    assert len(batches) == 1
    assert abs(batches.pop() / p["batch_guidance"]["target_tokens"] - 1) <= 0.05


def test_reasons_quote_the_tables_numbers(plan13):
    # issue 31 item 7: "HSDP saves cross-node traffic" where the model gave it more communication
    c = plan13["chosen"]
    for r in plan13["layouts"]:
        if r is c or not r["fits"]:
            continue
        text = r["why_not"]
        assert f"{r['step_time_s']:.2f} s vs {c['step_time_s']:.2f} s per step" in text
        for part, mine, theirs in compared_parts(r, c):
            quoted = f"{PART_WORDS[part]} {mine:.2f} s vs {theirs:.2f} s"
            head, _, tail = text.partition("it saves on")
            if quoted in head:
                assert mine > theirs, text            # "spends more" only where it does
            if quoted in tail:
                assert mine < theirs, text
        assert "saves cross-node traffic" not in text
    hsdp = next(r for r in plan13["layouts"] if r["layout"] == "hsdp")
    fsdp = next(r for r in plan13["layouts"] if r["layout"] == "fsdp")
    assert hsdp["time"]["fsdp_comm_s"] < fsdp["time"]["fsdp_comm_s"]     # deferred all-reduce: less traffic
    loser = fsdp if c is hsdp else hsdp
    other = hsdp if c is hsdp else fsdp
    assert f"{loser['time']['exposed_comm_s']:.2f} s vs {other['time']['exposed_comm_s']:.2f} s" in loser["why_not"]


def test_tp_is_not_predicted_faster_than_fsdp_for_13b_or_175b():
    # issue 31 item 4: fsdp+tp2 was "1 % faster" for 13B and chosen for 175B (+6 %)
    for size, gpus in (("13b", 32), ("175b", 256)):
        p = plan_training(size, gpus, tokens=300e9)
        rows = {r["layout"]: r for r in p["layouts"]}
        assert rows["fsdp+tp2"]["tokens_per_sec_per_gpu"] < rows["fsdp"]["tokens_per_sec_per_gpu"]
        assert p["chosen"]["tp"] == 1


def test_the_band_is_held_out_error_per_gpu_and_scale(plan13):
    # issue 31 item 9: the +/-6 % band was the in-sample 90th percentile
    cal = load_calibration()
    held = cal["quality"]["held_out"]["H100-80GB"]
    pct, source = band_pct(cal, "H100-80GB", 32)
    assert plan13["band_pct"] == pct and "held-out" in plan13["band_source"]
    assert pct >= held["9-64"]["p90_abs_pct_error"] and pct >= held["all"]["p90_abs_pct_error"]
    assert pct > cal["quality"]["p90_abs_pct_error"] or held["all"]["p90_abs_pct_error"] >= cal["quality"]["p90_abs_pct_error"]
    one_node = plan_training("7b", 8, tokens=20e9)
    assert one_node["band_pct"] == max(held["1-8"]["p90_abs_pct_error"], held["all"]["p90_abs_pct_error"])
    tp = next(r for r in plan13["layouts"] if r["layout"] == "fsdp+tp2")
    assert tp["band_pct"] == 2 * pct                     # no held-out TP figure: widened
    h200 = plan_training("13b", 32, tokens=100e9, gpu="H200-141GB")
    assert "no held-out figure on H200-141GB" in h200["band_source"]


def test_the_team_target_sets_the_batch_and_warnings_fire():
    p = plan_training("13b", 32, tokens=1.7e8, global_batch_tokens=16e6)
    c = p["chosen"]
    assert abs(c["global_batch_tokens"] - 16e6) / 16e6 <= 0.05 and p["batch_guidance"]["target_source"] == "team target"
    assert c["steps"] < MIN_STEPS and any("optimizer steps" in w for w in c["warnings"])
    assert any("more than the 1.7e+08 tokens" in w for w in c["warnings"])    # 11 whole steps overshoot by 9 %
    assert not plan_training("13b", 32, tokens=1e9, global_batch_tokens=16e6)["chosen"]["warnings"][1:]  # 0.7 %: quiet
    exact = plan_training("13b", 32, tokens=c["global_batch_tokens"] * 150, global_batch_tokens=c["global_batch_tokens"])
    assert exact["chosen"]["steps"] == 150 and not exact["chosen"]["warnings"]


def test_no_rounding_warning_on_a_long_run_and_a_low_mfu_warning_where_gpus_idle(plan13):
    # issue 31 item 11: "last step x% filled" on every plan; 125M on 256 GPUs (MFU 2 %) said nothing
    assert not plan13["chosen"]["warnings"]
    tiny = plan_training("125m", 256, tokens=10e9)
    assert tiny["chosen"]["mfu"] < 0.2 and any("MFU" in w and "low" in w for w in tiny["chosen"]["warnings"])


def test_a_bare_size_is_labelled_by_its_count_not_a_presets_name():
    # issue 31 item 11: "7b" is 7e9 parameters; llama-2-7b is 6.74e9
    p = plan_training("7b", 8, tokens=20e9)
    assert p["inputs"]["model"] == "7b (llama-2-7b shape)" and p["inputs"]["n_params"] == 7e9
    assert plan_training("llama-2-7b", 8, tokens=20e9)["inputs"]["model"] == "llama-2-7b"


def test_memory_is_shown_in_gib_of_the_cards_capacity(plan13):
    # issue 31 item 11: "86 GB capacity" on an 80 GB card
    assert plan13["inputs"]["memory_capacity_gib"] == pytest.approx(81559 / 1024)
    c = plan13["chosen"]
    assert c["usable_gib"] == pytest.approx(0.9 * 81559 / 1024)
    assert c["headroom_gib"] == pytest.approx(c["usable_gib"] - c["memory_gib"]["total"])


def test_a_70b_on_8_a100_40gb_does_not_fit_anywhere():
    with pytest.raises(ValueError, match="does not fit"):
        plan_training("70b", 8, gpu="A100-40GB", tokens=1e9)


def test_a_slower_network_never_speeds_fsdp_up():
    fast = plan_training("13b", 32, tokens=100e9)["layouts"][0]
    slow = plan_training("13b", 32, tokens=100e9, inter_node_gbps=25)["layouts"][0]
    assert fast["layout"] == slow["layout"] == "fsdp"
    assert slow["tokens_per_sec_per_gpu"] <= fast["tokens_per_sec_per_gpu"]


def test_batch_guidance_from_scaling_law_and_dataset():
    assert critical_batch_tokens(13e9, 100e9) == pytest.approx(0.292 * (6 * 13e9 * 100e9) ** 0.3271)
    gb, why, warn = dataset_global_batch(7e9, 52_000, mean_tokens_per_example=256, seq_len=2048,
                                         padding="packed", gpu_count=32)
    assert gb % 32 == 0 and 52_000 * 256 / 2048 / gb >= MIN_STEPS and not warn
    gb, why, warn = dataset_global_batch(7e9, 500, mean_tokens_per_example=256, seq_len=2048,
                                         padding="packed", gpu_count=8)
    assert gb == 8 and warn and "tiny epoch" in warn[0]


@pytest.mark.parametrize("bad", [{"gpu_count": 0}, {"tokens": -1.0}, {"seq_len": 1.5}, {"inter_node_gbps": 0},
                                 {"spare_nodes": -1}])
def test_bad_arguments_name_themselves(bad):
    args = {"model_size": "7b", "gpu_count": 8, "tokens": 1e9, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        plan_training(**args)


def test_a_loser_never_reads_as_slower_when_it_is_predicted_faster(plan13):
    win = plan13["chosen"]["tokens_per_sec_per_gpu"]
    for r in plan13["layouts"]:
        if r["why_not"] and r["fits"]:
            faster = r["tokens_per_sec_per_gpu"] > win
            assert ("faster" in r["why_not"]) == faster and ("-" not in r["why_not"].split(":")[0]), r["why_not"]
