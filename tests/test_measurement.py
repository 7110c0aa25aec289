import numpy as np

from tuner.measurement import batch_means_ci, stop_reason


def test_never_before_the_floor():
    values = [100.0] * 3
    assert stop_reason(values, min_steps=4, target_rel_ci=0.5, stop_below=1e9) == ""
    assert stop_reason([100.0] * 5, min_steps=8, target_rel_ci=0.5, stop_below=1e9) == ""


def test_stops_when_precise_or_clearly_worse():
    rng = np.random.default_rng(0)
    tight = list(1000 + rng.normal(0, 1, 8))
    assert stop_reason(tight, min_steps=4, target_rel_ci=0.02, stop_below=None) == "precise"
    noisy = list(1000 + rng.normal(0, 200, 8))
    assert stop_reason(noisy, min_steps=4, target_rel_ci=0.02, stop_below=None) == ""
    bad = list(500 + rng.normal(0, 5, 6))
    assert stop_reason(bad, min_steps=4, target_rel_ci=0.0, stop_below=900.0) == "clearly_worse"
    assert stop_reason(bad, min_steps=4, target_rel_ci=0.0, stop_below=400.0) == ""


def test_batch_means_ci_covers_iid_means():
    rng = np.random.default_rng(1)
    hits = sum(ci.low <= 0 <= ci.high for ci in (batch_means_ci(list(rng.normal(0, 1, 30))) for _ in range(400)))
    assert 0.9 <= hits / 400 <= 0.99
    assert batch_means_ci([1.0, 2.0]) is None
