"""helper.noise: pooled noise of repeated configurations; the memory correction from peak_mem_gib."""

from __future__ import annotations

import math

import pytest

from helper import estimate_memory, get_gpu
from helper.measurements import config_key, fit_memory_scale
from helper.noise import estimate_noise_rel


def test_pooled_noise_of_repeats_only():
    ms = [{"preset": "tiny", "micro_batch": mb, "tokens_per_sec_per_gpu": v, "trial": i}
          for i, (mb, v) in enumerate([(1, 100.0), (1, 100.0 * math.exp(0.1)), (2, 50.0), (4, 10.0)])]
    out = estimate_noise_rel(ms)
    assert out["repeated_configs"] == 1 and out["degrees_of_freedom"] == 1
    assert out["noise_rel"] == pytest.approx(0.1 / math.sqrt(2))
    assert estimate_noise_rel(ms[2:])["noise_rel"] is None
    assert config_key(ms[0]) == config_key(ms[1]) != config_key(ms[2])


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


def test_docstring_examples_run():
    import doctest

    import helper.noise
    result = doctest.testmod(helper.noise)
    assert result.failed == 0 and result.attempted > 0
