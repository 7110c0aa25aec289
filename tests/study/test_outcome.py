"""tuner.study._outcome: what a launcher's result becomes in the study (state, value, attributes)."""

import pytest

from tuner.launch import TrialResult
from tuner.study import best_lower_bound, outcome


def test_best_lower_bound_ignores_series_without_a_ci():
    assert best_lower_bound([[1.0, 2.0]]) is None
    assert best_lower_bound([]) is None
    assert 90 < best_lower_bound([[100.0, 101.0, 99.0, 100.0], [50.0] * 8]) < 100


def common(**kw):
    return dict(launcher="x", world_size=2, gpu_seconds=8.0, wall_seconds=4.0, **kw)


def test_outcomes():
    ok = outcome(TrialResult(status="ok", step_values=((1, 10.0), (2, 14.0)), message="", peak_mem_gib=None,
                             extra={"mfu": 0.4, "odd": {1, 2}}, **common()))
    # the value is tokens over time: equal tokens per step without seconds -> harmonic mean
    assert (ok.state, ok.value, ok.failed, ok.retry) == ("COMPLETE", pytest.approx(2 / (1 / 10 + 1 / 14)), 0.0, False)
    timed = outcome(TrialResult(status="ok", step_values=((1, 10.0), (2, 14.0)), step_seconds=(1.0, 3.0), **common()))
    assert timed.value == pytest.approx((10.0 * 1 + 14.0 * 3) / 4) and timed.attrs["step_seconds"] == [1.0, 3.0]
    assert ok.attrs["gpu_seconds"] == 8.0 and "peak_mem_gib" not in ok.attrs and "message" not in ok.attrs
    assert ok.attrs["mfu"] == 0.4 and ok.attrs["odd"] == "{1, 2}"           # JSON-ready
    oom = outcome(TrialResult(status="oom", message="out of memory", **common()))
    assert (oom.state, oom.value, oom.failed) == ("COMPLETE", 0.0, 1.0) and oom.attrs["status"] == "oom"
    node = outcome(TrialResult(status="error", message="node died", extra={"slurm_failure": "NODE_FAIL"}, **common()))
    assert (node.state, node.value, node.failed, node.retry) == ("FAIL", None, None, True)


def test_a_trial_cut_by_the_budget_is_not_its_configs_timeout():
    from tuner.study import label_budget_stop
    cut = TrialResult(status="timeout", launcher="sim", world_size=4, gpu_seconds=20.0, wall_seconds=5.0,
                      step_values=((0, 50.0),))
    labelled = label_budget_stop(cut, reserved_gpu_seconds=20.0, cap_basis_gpu_seconds=10.0, timeout_s=900)
    out = outcome(labelled)
    assert out.state == "FAIL" and out.failed is None and not out.retry   # no constraint: does not steer
    assert out.attrs["status"] == "stopped_by_budget" and out.attrs["gpu_seconds"] == 20.0
    # at 3x its estimate with budget left, or at the spec's own timeout, it is the config's timeout
    assert outcome(label_budget_stop(cut, reserved_gpu_seconds=30.0, cap_basis_gpu_seconds=10.0,
                                     timeout_s=900)).attrs["status"] == "timeout"
    assert outcome(label_budget_stop(cut, reserved_gpu_seconds=20.0, cap_basis_gpu_seconds=10.0,
                                     timeout_s=5)).attrs["status"] == "timeout"
