"""helper.gpus: one unit for what a reader sees about GPU memory, GiB."""

import pytest

from helper.gpus import GPUS, get_gpu, gib


@pytest.mark.parametrize("name, mib", [("A100-40GB", 40960), ("A100-80GB", 81920), ("H100-80GB", 81559),
                                       ("H200-141GB", 143771)])
def test_capacity_in_gib_is_nvidia_smis_mib(name, mib):
    spec = get_gpu(name)
    assert spec.memory_gib == pytest.approx(mib / 1024)        # an "80GB" H100 shows 79.6 GiB
    assert gib(spec.memory_gb) == pytest.approx(spec.memory_gib)


def test_gib_converts_the_models_gb():
    assert gib(2**30 / 1e9) == pytest.approx(1.0)
    assert all(g.memory_gib < g.memory_gb for g in GPUS.values())


def test_flash_attentions_ceiling_is_the_papers_and_a_power_cap_lowers_it_with_the_peak():
    from helper.gpus import power_capped

    a100, h100 = get_gpu("A100-80GB"), get_gpu("H100-80GB")
    # FlashAttention-2: A100 forward 73% and backward 63% of 312 TFLOP/s (backward 2.5x the FLOPs)
    assert a100.attention_ceiling_flops == pytest.approx(204.6e12, rel=1e-3)
    assert get_gpu("A100-40GB").attention_ceiling_flops == a100.attention_ceiling_flops
    assert h100.attention_ceiling_flops == 335e12 == get_gpu("H200-141GB").attention_ceiling_flops
    assert get_gpu("cpu").attention_ceiling_flops is None and get_gpu("cpu").peak_rel_sd == 0.0
    capped = power_capped(h100, watts=500, tdp_watts=700)
    assert capped.attention_ceiling_flops / h100.attention_ceiling_flops == pytest.approx(capped.peak_flops / h100.peak_flops)
