"""Go/no-go thresholds for the launch, each derived from a number the plan itself relies on.

Before the long run, four measurements must clear these (``tuner.runbook_pages`` prints the
commands): the network's all-reduce bus bandwidth (nccl-tests ``all_reduce_perf``) against what
the plan's communication times assume; the first steps' tokens/s/GPU against the plan's band;
peak memory against the usable capacity and the plan's prediction; and a save-and-restore drill
against the lost-work bound's restart and reload parts. A measurement under its floor means a
number of the plan does not hold on this cluster: fix the cluster or re-plan with the measured
value, do not launch.
"""

from __future__ import annotations

import math
from typing import Any

from helper.collectives import PRIOR_FACTORS, bus_bandwidth_gbs
from helper.gpus import GpuSpec, gib

__all__ = ["go_no_go_thresholds", "NCCL_FLOOR_SHARE", "MEMORY_MODEL_SLACK", "WARMUP_STEPS", "MEASURED_STEPS"]

NCCL_FLOOR_SHARE = 0.90
"""A bus bandwidth under 90 % of what the plan assumes makes its communication times optimistic
beyond the band: an operating threshold."""
MEMORY_MODEL_SLACK = 0.10
"""Measured peak more than 10 % above the model's prediction: the memory model is wrong for this
stack, and the headroom the plan relies on is not there."""
WARMUP_STEPS = 10
"""Steps left out of the throughput check (compilation, allocator warm-up, first checkpoint load)."""
MEASURED_STEPS = 50
"""Steps averaged in the throughput check."""


def go_no_go_thresholds(*, spec: GpuSpec, constants: dict[str, float], nodes: int, gpus_per_node: int,
                        chosen: dict[str, Any], checkpoint: dict[str, Any], usable_gb: float) -> dict[str, Any]:
    """The four launch checks' thresholds, as plain numbers.

    ``chosen`` is the plan's chosen row (``band``, ``step_time_s``, ``memory_gib``);
    ``checkpoint`` is :func:`helper.checkpointing.checkpoint_plan`'s result.

    Example:
        >>> from helper.gpus import get_gpu
        >>> row = {"band": [4500.0, 5500.0], "step_time_s": 26.0, "band_pct": 10.0, "memory_gib": {"total": 60.0}}
        >>> ck = {"startup_s": 70.0, "reload_s": 20.0, "interval_steps": 20}
        >>> t = go_no_go_thresholds(spec=get_gpu("H100-80GB"), constants={}, nodes=4, gpus_per_node=8,
        ...                         chosen=row, checkpoint=ck, usable_gb=77.0)
        >>> t["nccl_busbw_floor_gbs"], t["tokens_per_sec_per_gpu_floor"], t["drill_restart_ceiling_s"]
        (288, 4500, 135)
    """
    efficiency = constants.get("bus_bw_efficiency", PRIOR_FACTORS["bus_bw_efficiency"])
    assumed = bus_bandwidth_gbs(spec, nodes, gpus_per_node) * efficiency
    return {
        "nccl_busbw_assumed_gbs": assumed,
        "nccl_busbw_floor_gbs": int(math.floor(NCCL_FLOOR_SHARE * assumed)),
        "nccl_ranks": nodes * gpus_per_node,
        "tokens_per_sec_per_gpu_floor": int(math.floor(chosen["band"][0])),
        "step_time_ceiling_s": chosen["step_time_s"] * (1 + chosen["band_pct"] / 100),
        "warmup_steps": WARMUP_STEPS, "measured_steps": MEASURED_STEPS,
        "memory_reserved_ceiling_gib": gib(usable_gb),
        "memory_allocated_ceiling_gib": min(gib(usable_gb), chosen["memory_gib"]["total"] * (1 + MEMORY_MODEL_SLACK)),
        "drill_restart_ceiling_s": int(math.ceil(1.5 * (checkpoint["startup_s"] + checkpoint["reload_s"]))),
        "drill_lost_steps_ceiling": checkpoint["interval_steps"],
    }
