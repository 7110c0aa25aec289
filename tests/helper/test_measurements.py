"""helper.measurements: the measurement dict, the step it plans, and the memory scale fitted to peaks."""

from __future__ import annotations

import pytest

from helper import estimate_memory, get_gpu
from helper.measurements import config_key, fit_memory_scale, measurement_plan


def test_memory_scale_recovers_a_known_factor():
    ms = []
    for mb in (1, 2, 4):
        mem = estimate_memory("7b", 8, micro_batch=mb, seq_len=2048, gpu="A100-80GB")
        fw = get_gpu("A100-80GB").framework_overhead_gb
        measured = mem["static"] + fw + 0.8 * (mem["total"] - mem["static"] - fw)
        ms.append({"model_size": "7b", "gpu": "A100-80GB", "gpu_count": 8, "micro_batch": mb, "seq_len": 2048,
                   "tokens_per_sec_per_gpu": 1000.0, "peak_mem_gib": measured * 1e9 / 2**30})
    fit = fit_memory_scale(ms)["A100-80GB"]
    assert fit["n"] == 3 and fit["memory_scale"] == pytest.approx(0.8, rel=0.01)


def test_the_config_key_leaves_out_the_outcome_and_bookkeeping():
    a = {"model_size": "7b", "gpu": "H100-80GB", "gpu_count": 8, "micro_batch": 2,
         "tokens_per_sec_per_gpu": 4000.0, "trial": 3, "peak_mem_gib": 50.0}
    b = {**a, "tokens_per_sec_per_gpu": 4100.0, "trial": 9, "note": "re-run"}
    assert config_key(a) == config_key(b)
    assert config_key(a) != config_key({**a, "micro_batch": 4})
    assert dict(config_key(a)) == {"gpu": "'H100-80GB'", "gpu_count": "8", "micro_batch": "2", "model_size": "'7b'"}


def test_a_measurement_plans_its_step_with_the_documented_defaults():
    plan, pad_key = measurement_plan({"model_size": "7b", "gpu": "H100-80GB", "gpu_count": 4})
    assert pad_key is None
    assert (plan.gpus_per_node, plan.seq_len, plan.micro_batch, plan.grad_accum) == (4, 2048, 1, 1)
    assert (plan.sharding, plan.num_workers, plan.padding_efficiency) == ("zero3", 0, 1.0)
    plan, _ = measurement_plan({"preset": "llama-2-13b", "gpu": "H100-80GB", "gpu_count": 32})
    assert plan.gpus_per_node == 8 and plan.nodes == 4


def test_an_unknown_padding_share_is_a_nuisance_key_for_the_fit_and_a_given_one_is_used():
    m = {"model_size": "7b", "gpu": "H100-80GB", "gpu_count": 8}
    plan, pad_key = measurement_plan({**m, "padding": "max_length"})
    assert pad_key == "padding_efficiency_max_length" and plan.padding_efficiency == 1.0
    plan, pad_key = measurement_plan({**m, "padding": "max_length", "padding_efficiency": 0.4})
    assert pad_key is None and plan.padding_efficiency == 0.4


@pytest.mark.parametrize("missing", ["model_size", "gpu", "gpu_count"])
def test_a_measurement_without_model_gpu_or_count_is_refused_naming_it(missing):
    m = {"model_size": "7b", "gpu": "H100-80GB", "gpu_count": 8}
    del m[missing]
    with pytest.raises(ValueError, match="model_size" if missing == "model_size" else f"`{missing}`"):
        measurement_plan(m)


def test_the_memory_scale_skips_measurements_without_a_usable_peak():
    ms = [{"model_size": "7b", "gpu": "A100-80GB", "gpu_count": 8, "peak_mem_gib": p} for p in (None, 0, "50")]
    assert fit_memory_scale(ms) == {}
