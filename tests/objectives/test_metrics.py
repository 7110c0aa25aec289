"""objectives.metrics: the device's peak FLOP/s for MFU, the model's FLOPs per token, memory and the process's age."""

import time

import pytest

from objectives.metrics import model_flops_per_token, peak_flops_for, peak_memory_gib, peak_reserved_gib, process_age_s


def test_mfu_peak_only_for_known_devices():
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == ("H100-80GB", 989e12)
    assert peak_flops_for("NVIDIA A100-SXM4-40GB") == ("A100-80GB", 312e12)
    assert peak_flops_for("NVIDIA H200") == ("H200-141GB", 989e12)
    for other in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA L4", "Tesla V100-SXM2-16GB"):
        assert peak_flops_for(other) == (None, None), other


def test_model_flops_per_token_is_helpers_count_for_the_hf_config():
    from types import SimpleNamespace

    from helper.presets import get_preset
    from helper.sizes import parse_model_size
    from helper.throughput import flops_per_token

    a = get_preset("llama-2-7b")
    cfg = SimpleNamespace(num_hidden_layers=a.n_layers, hidden_size=a.hidden, num_attention_heads=a.n_heads,
                          num_key_value_heads=None, intermediate_size=a.intermediate, vocab_size=a.vocab)
    expected = flops_per_token(parse_model_size("llama-2-7b"), 2048)
    assert model_flops_per_token(cfg, a.n_params, 2048) == pytest.approx(expected)
    # 6 N_matmul + 12 L H T, whatever the checkpointing
    assert expected == pytest.approx(6 * (a.n_params - a.vocab * a.hidden) + 12 * 32 * 4096 * 2048)


def test_on_cpu_peak_memory_is_the_processs_peak_rss_and_reserved_is_none():
    import torch

    cpu = torch.device("cpu")
    peak, what = peak_memory_gib(cpu)
    assert what == "cpu_peak_rss" and 0.01 < peak < 1024
    assert peak_reserved_gib(cpu) is None


def test_the_process_age_grows_with_the_clock():
    first = process_age_s()
    time.sleep(0.05)
    second = process_age_s()
    assert 0 < first < second and second - first == pytest.approx(0.05, abs=0.04)
