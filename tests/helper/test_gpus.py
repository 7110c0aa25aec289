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
