"""helper.go_no_go: the launch checks' thresholds, each from a number the plan relies on."""

from __future__ import annotations

import pytest

from helper.collectives import PRIOR_FACTORS, bus_bandwidth_gbs
from helper.go_no_go import MEASURED_STEPS, MEMORY_MODEL_SLACK, NCCL_FLOOR_SHARE, WARMUP_STEPS, go_no_go_thresholds
from helper.gpus import get_gpu, gib

H100 = get_gpu("H100-80GB")
ROW = {"band": [4500.7, 5500.0], "step_time_s": 26.0, "band_pct": 10.0, "memory_gib": {"total": 60.0}}
CHECKPOINT = {"startup_s": 70.0, "reload_s": 20.0, "interval_steps": 20}


def _thresholds(**kw):
    args = dict(spec=H100, constants={}, nodes=4, gpus_per_node=8, chosen=ROW, checkpoint=CHECKPOINT, usable_gb=77.0)
    return go_no_go_thresholds(**{**args, **kw})


def test_the_nccl_floor_is_90_percent_of_the_bus_bandwidth_the_plan_assumes():
    t = _thresholds(constants={"bus_bw_efficiency": 0.5})
    assert t["nccl_busbw_assumed_gbs"] == pytest.approx(bus_bandwidth_gbs(H100, 4, 8) * 0.5)
    assert t["nccl_busbw_floor_gbs"] == int(NCCL_FLOOR_SHARE * t["nccl_busbw_assumed_gbs"])
    assert t["nccl_ranks"] == 32
    prior = _thresholds()
    assert prior["nccl_busbw_assumed_gbs"] == pytest.approx(bus_bandwidth_gbs(H100, 4, 8) * PRIOR_FACTORS["bus_bw_efficiency"])


def test_throughput_must_reach_the_bands_low_end_and_the_step_its_high_end():
    t = _thresholds()
    assert t["tokens_per_sec_per_gpu_floor"] == 4500
    assert t["step_time_ceiling_s"] == pytest.approx(26.0 * 1.10)
    assert (t["warmup_steps"], t["measured_steps"]) == (WARMUP_STEPS, MEASURED_STEPS) == (10, 50)


def test_memory_may_exceed_the_prediction_by_the_slack_but_never_the_usable_capacity():
    t = _thresholds()
    assert t["memory_reserved_ceiling_gib"] == pytest.approx(gib(77.0))
    assert t["memory_allocated_ceiling_gib"] == pytest.approx(60.0 * (1 + MEMORY_MODEL_SLACK))
    tight = _thresholds(chosen={**ROW, "memory_gib": {"total": 70.0}})
    assert tight["memory_allocated_ceiling_gib"] == pytest.approx(gib(77.0))  # 77 GB is 71.7 GiB < 77 GiB


def test_the_drill_may_take_half_again_the_planned_restart_and_lose_one_interval():
    t = _thresholds()
    assert t["drill_restart_ceiling_s"] == 135  # ceil(1.5 x (70 + 20))
    assert t["drill_lost_steps_ceiling"] == 20


def test_go_no_go_doctests_run():
    import doctest

    import helper.go_no_go
    result = doctest.testmod(helper.go_no_go)
    assert result.failed == 0 and result.attempted > 0
