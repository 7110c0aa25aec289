"""helper.checkpointing: Llama 3's failure rate, Young/Daly, and a worst case built from what the launch sets."""

import math

import pytest

from helper.checkpointing import (
    INIT_TIMEOUT_S,
    LLAMA3_FAILURES_PER_GPU_HOUR,
    TEARDOWN_S,
    checkpoint_plan,
    collective_timeouts_s,
    job_mtbf_hours,
    young_daly_interval_s,
)


def test_failure_rate_is_llama3s_published_count():
    # 419 unexpected interruptions in 54 days on 16,384 GPUs (arXiv 2407.21783)
    assert LLAMA3_FAILURES_PER_GPU_HOUR * 54 * 24 * 16384 == pytest.approx(419)
    assert job_mtbf_hours(16384) * 24 == pytest.approx(54 * 24 / 419 * 24)   # ~3 h between failures
    assert math.isinf(job_mtbf_hours(32, 0.0))


def test_young_daly_is_sqrt_2cm():
    assert young_daly_interval_s(8.0, 10_000.0) == pytest.approx(400.0)


def test_worst_case_is_the_sum_of_its_parts_with_a_margin_and_meets_the_limit():
    p = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=26.5)
    parts = p["worst_case_parts_s"]
    assert p["worst_case_lost_s"] == pytest.approx(sum(parts.values()))
    assert parts["margin_s"] == pytest.approx(0.2 * sum(v for k, v in parts.items() if k != "margin_s"))
    assert p["meets_limit"] and p["worst_case_lost_s"] <= 30 * 60
    assert p["size_gb"] == pytest.approx(12 * 13e9 / 1e9) and p["write_s"] == pytest.approx(156 / 4 / 2.0)
    assert p["interval_s"] == pytest.approx(p["interval_steps"] * 26.5)
    assert "never a node-local disk" in p["where"]


def test_parts_come_from_what_the_launch_sets():
    # issue 31 item 3: detection and restart were fixed 10- and 5-minute allowances
    p = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=26.0, startup_s=70.0, slurmd_timeout_s=60.0)
    init, train = collective_timeouts_s(26.0)
    assert (init, train) == (INIT_TIMEOUT_S, 100) == (p["init_timeout_s"], p["collective_timeout_s"])
    assert p["worst_case_parts_s"]["detection_s"] == train + TEARDOWN_S          # the timeout the script sets
    assert p["spare_nodes"] == 0 and p["worst_case_parts_s"]["restart_s"] == 70.0 + p["requeue_wait_s"] > 70.0
    spare = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=26.0, startup_s=70.0, spare_nodes=1)
    assert spare["worst_case_parts_s"]["restart_s"] == 70.0 and "spare" in spare["restart_policy"]
    assert spare["worst_case_parts_s"]["detection_s"] == 300.0                   # Slurm's SlurmdTimeout default
    assert spare["interval_s"] > p["interval_s"]          # a spare node buys a longer interval at the same limit
    long_steps = checkpoint_plan(175e9, gpu_count=256, nodes=32, step_time_s=140.0)
    assert long_steps["collective_timeout_s"] == 420 and long_steps["spare_nodes"] == 1


def test_the_limit_caps_young_daly_and_a_slow_storage_fails_it():
    rare = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=1.0, failures_per_gpu_hour=1e-9)
    assert rare["limit_bound"] and rare["interval_s"] < rare["young_daly_interval_s"]
    often = checkpoint_plan(13e9, gpu_count=4096, nodes=512, step_time_s=1.0, failures_per_gpu_hour=1e-3)
    assert not often["limit_bound"]          # failures every 15 min: Young/Daly's shorter interval wins
    slow = checkpoint_plan(70e9, gpu_count=8, nodes=1, step_time_s=5.0, storage_write_gbs_per_node=0.2)
    assert not slow["meets_limit"]           # 840 GB at 0.2 GB/s: the write alone takes 70 min
    with pytest.raises(ValueError, match="storage bandwidth"):
        checkpoint_plan(13e9, gpu_count=8, nodes=1, step_time_s=1.0, storage_write_gbs_per_node=0)
    with pytest.raises(ValueError, match="spare_nodes"):
        checkpoint_plan(13e9, gpu_count=8, nodes=1, step_time_s=1.0, spare_nodes=-1)
