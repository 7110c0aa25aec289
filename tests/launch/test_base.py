"""tuner.launch._base: the request a launcher takes, the result it returns, and the wall-clock limit it enforces."""

import dataclasses

import pytest

from tests.launch.test_local import request
from tests.spine_helpers import fast_spec
from tuner.launch import STATUSES, TrialResult, wall_limit_reason, wall_limit_s


def _result(status="ok", **kw):
    return TrialResult(status=status, launcher="x", world_size=2, gpu_seconds=8.0, wall_seconds=4.0, **kw)


def test_a_result_status_outside_the_four_is_refused():
    assert STATUSES == ("ok", "oom", "timeout", "error")
    with pytest.raises(ValueError, match="'crashed' is not one of"):
        _result("crashed")


def test_the_value_is_tokens_over_time_and_only_an_ok_trial_has_one():
    timed = _result(step_values=((1, 10.0), (2, 14.0)), step_seconds=(1.0, 3.0))
    assert timed.tokens_per_sec_per_gpu == pytest.approx((10.0 * 1 + 14.0 * 3) / 4)
    # without seconds, equal tokens per step: the harmonic mean of the rates
    assert _result(step_values=((1, 10.0), (2, 14.0))).tokens_per_sec_per_gpu == pytest.approx(2 / (1 / 10 + 1 / 14))
    assert _result("timeout", step_values=((1, 10.0),)).tokens_per_sec_per_gpu is None
    assert _result().tokens_per_sec_per_gpu is None


def test_the_wall_limit_is_the_timeout_or_sooner_when_the_gpu_second_cap_runs_out(tmp_path):
    spec = fast_spec(tmp_path, timeout_s=60)
    plain = request(spec, tmp_path, {"micro_batch": 2})
    assert wall_limit_s(plain, 2) == 60
    assert wall_limit_reason(plain, 2) == "killed at the 60s timeout (trial.timeout_s)"
    capped = dataclasses.replace(plain, max_gpu_seconds=40.0)
    assert wall_limit_s(capped, 2) == 20.0 and wall_limit_s(capped, 1) == 40.0
    assert wall_limit_reason(capped, 2).startswith("killed at 20s, when its budget cap of 40 GPU-s (2 ranks) ran out")
    generous = dataclasses.replace(plain, max_gpu_seconds=1000.0)
    assert wall_limit_s(generous, 2) == 60 and "timeout (trial.timeout_s)" in wall_limit_reason(generous, 2)
