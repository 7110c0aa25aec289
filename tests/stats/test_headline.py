"""The headline's arithmetic: MFU as torchtitan and PaLM define it, GPU-hours saved."""

import pytest

from tuner.stats import gpu_hours, headline, mfu, model_flops


def test_mfu_of_llama_7b_on_h100_matches_the_formula():
    flops, peak = model_flops({"model": {"preset": "llama-2-7b", "seq_len": 4096}, "cluster": {"gpu": "H100-80GB"}})
    assert flops == pytest.approx(46.1e9, rel=0.01) and peak == 989e12    # helper.compute's doctest, the datasheet
    assert mfu(3000.0, flops_per_token=flops, peak_flops=peak) == pytest.approx(3000 * 46.1e9 / 989e12, rel=0.01)


def test_no_mfu_rather_than_a_wrong_one():
    assert model_flops({"model": {"preset": "tiny", "seq_len": 64}, "cluster": {"gpu": "cpu"}}) is None
    assert model_flops({"model": {"preset": "llama-2-7b", "seq_len": 2048}, "cluster": {"gpu": "TPU-v9"}}) is None


def test_headline_prices_the_plan_it_is_given():
    ci = {"mean": 1000.0, "ci95": [900.0, 1100.0]}
    analysis = {"spec": {"model": {"preset": "llama-2-7b", "seq_len": 2048}, "cluster": {"gpu": "H100-80GB"}},
                "baseline": {"trial": 0, "params": {}, "tokens_per_sec_per_gpu": ci},
                "best": {"trial": 3, "params": {}, "tokens_per_sec_per_gpu": {"mean": 2000.0, "ci95": [1900.0, 2100.0]},
                         "speedup_vs_baseline": {"mean": 2.0, "ci95": [1.5, 2.5]}}}
    h = headline(analysis, planned_tokens=3.6e9)
    assert h["gpu_hours_today"] == pytest.approx(gpu_hours(3.6e9, tokens_per_sec_per_gpu=1000.0)) == pytest.approx(1000.0)
    assert h["gpu_hours_saved"] == {"mean": pytest.approx(500.0), "ci95": [pytest.approx(1000 / 3), pytest.approx(600.0)]}
    assert h["recommended"]["mfu"]["mean"] == pytest.approx(2 * h["baseline"]["mfu"]["mean"])
    assert headline({**analysis, "baseline": None}, planned_tokens=1e9)["gpu_hours_saved"] is None
