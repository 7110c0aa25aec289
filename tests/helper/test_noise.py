"""helper.noise: pooled noise of repeated configurations."""

from __future__ import annotations

import math

import pytest

from helper.measurements import config_key
from helper.noise import estimate_noise_rel


def test_pooled_noise_of_repeats_only():
    ms = [{"preset": "tiny", "micro_batch": mb, "tokens_per_sec_per_gpu": v, "trial": i}
          for i, (mb, v) in enumerate([(1, 100.0), (1, 100.0 * math.exp(0.1)), (2, 50.0), (4, 10.0)])]
    out = estimate_noise_rel(ms)
    assert out["repeated_configs"] == 1 and out["degrees_of_freedom"] == 1
    assert out["noise_rel"] == pytest.approx(0.1 / math.sqrt(2))
    assert estimate_noise_rel(ms[2:])["noise_rel"] is None
    assert config_key(ms[0]) == config_key(ms[1]) != config_key(ms[2])


def test_docstring_examples_run():
    import doctest

    import helper.noise
    result = doctest.testmod(helper.noise)
    assert result.failed == 0 and result.attempted > 0
