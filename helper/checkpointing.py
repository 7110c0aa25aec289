"""Checkpoint cadence and the work a failure loses: write time, async stall, Young/Daly, worst case.

- Size: a resumable checkpoint holds fp32 master weights and Adam's m and v, 12 B per
  parameter (bf16 weights are derived from the fp32 copy); every node writes its own shards
  (``torch.distributed.checkpoint`` saves one file per rank), so the write time is the bytes
  per node over the node's storage bandwidth.
- Async DCP (``torch.distributed.checkpoint.async_save``) stalls training only while each GPU
  copies its shards to host memory; the upload to storage runs in the background, and must
  end before the next save starts.
- Interval: Young (1974) / Daly (2006), ``sqrt(2 x C x M)`` for a checkpoint cost ``C`` (the
  stall) and the job's mean time between failures ``M``, capped so that the worst case stays
  under the lost-work limit.
- Worst case lost work = interval (the failure hits just before the next save completes)
  + write (that save is lost too) + detection (NCCL timeout or a heartbeat) + restart
  (re-queue and start-up) + reload (read the last checkpoint back).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["LLAMA3_FAILURES_PER_GPU_HOUR", "checkpoint_plan", "job_mtbf_hours", "young_daly_interval_s",
           "CHECKPOINT_BYTES_PER_PARAM", "DEFAULT_DETECTION_S", "DEFAULT_RESTART_S", "HOST_COPY_GBS"]

LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16384)
"""Llama 3 pre-training saw 419 unexpected interruptions in a 54-day snapshot on 16,384 H100
GPUs (Llama Team, "The Llama 3 Herd of Models", arXiv 2407.21783, Sec. 3.3.4, Table 5):
1.97e-5 per GPU-hour, i.e. one per ~6,300 hours for an 8-GPU node."""

CHECKPOINT_BYTES_PER_PARAM = 12.0
"""fp32 master weights + Adam m + v (ZeRO paper's K = 12); bf16 weights are derived."""

DEFAULT_DETECTION_S = 600.0
"""PyTorch's default NCCL process-group timeout, 10 minutes (torch.distributed's
``default_pg_nccl_timeout``): a hung collective is noticed by the watchdog after this."""

DEFAULT_RESTART_S = 300.0
"""Re-queue, new allocation and start-up to the first step: an allowance of 5 minutes (a Slurm
requeue plus torchrun rendezvous and model build), not a measurement; measure yours."""

HOST_COPY_GBS = 10.0
"""GPU-to-host copy rate per GPU during async DCP staging, GB/s: an assumption well under
PCIe Gen5 x16's 64 GB/s per direction (PCI-SIG), because staging copies many small tensors."""


def job_mtbf_hours(gpu_count: int, failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR) -> float:
    """Mean time between failures of a job on ``gpu_count`` GPUs, hours (failures add up).

    Example:
        >>> round(job_mtbf_hours(32))
        1584
    """
    if failures_per_gpu_hour <= 0:
        return math.inf
    return 1.0 / (failures_per_gpu_hour * gpu_count)


def young_daly_interval_s(stall_s: float, mtbf_s: float) -> float:
    """Young/Daly's optimal compute time between checkpoints, ``sqrt(2 C M)``, seconds.

    Example:
        >>> round(young_daly_interval_s(10.0, 3600 * 1000))
        8485
    """
    return math.sqrt(2.0 * max(stall_s, 1e-3) * mtbf_s)


def checkpoint_plan(n_params: float, *, gpu_count: int, nodes: int, step_time_s: float,
                    storage_write_gbs_per_node: float = 2.0, storage_read_gbs_per_node: float | None = None,
                    failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR,
                    max_lost_work_minutes: float = 30.0, detection_s: float = DEFAULT_DETECTION_S,
                    restart_s: float = DEFAULT_RESTART_S, keep: int = 3) -> dict[str, Any]:
    """When to checkpoint, what it costs, and the worst-case work a failure loses, by part.

    Args:
        n_params: model parameters.
        gpu_count: GPUs of the job.
        nodes: nodes of the job (each writes its own shards).
        step_time_s: seconds per optimizer step.
        storage_write_gbs_per_node: shared-storage write bandwidth per node, GB/s.
        storage_read_gbs_per_node: read bandwidth for the reload (default: the write bandwidth).
        failures_per_gpu_hour: failure rate (default: Llama 3's, see
            :data:`LLAMA3_FAILURES_PER_GPU_HOUR`).
        max_lost_work_minutes: the limit the worst case must stay under.
        detection_s: time to notice a failure (NCCL timeout or heartbeat).
        restart_s: re-queue and start-up to the first step.
        keep: checkpoints kept on storage.

    Example:
        >>> p = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=2.0)
        >>> p["meets_limit"], p["interval_steps"] > 0
        (True, True)
    """
    if step_time_s <= 0 or nodes < 1 or gpu_count < 1:
        raise ValueError("step_time_s, nodes and gpu_count must be positive")
    if storage_write_gbs_per_node <= 0:
        raise ValueError(f"storage bandwidth must be > 0 GB/s, got {storage_write_gbs_per_node}")
    read_gbs = storage_read_gbs_per_node or storage_write_gbs_per_node
    size_gb = CHECKPOINT_BYTES_PER_PARAM * n_params / 1e9
    write_s = size_gb / nodes / storage_write_gbs_per_node
    reload_s = size_gb / nodes / read_gbs
    stall_s = size_gb / gpu_count / HOST_COPY_GBS
    mtbf_h = job_mtbf_hours(gpu_count, failures_per_gpu_hour)
    yd_s = young_daly_interval_s(stall_s, mtbf_h * 3600)
    budget_s = max_lost_work_minutes * 60 - (write_s + detection_s + restart_s + reload_s)
    # the background write must finish before the next save begins: interval >= write time
    interval_s = max(min(yd_s, budget_s), write_s, step_time_s)
    steps = max(1, int(interval_s // step_time_s))
    interval_s = steps * step_time_s
    parts = {"interval_s": interval_s, "write_s": write_s, "detection_s": detection_s,
             "restart_s": restart_s, "reload_s": reload_s}
    worst_s = sum(parts.values())
    expected_failures_per_day = 24.0 / mtbf_h if math.isfinite(mtbf_h) else 0.0
    overhead = stall_s / interval_s + (interval_s / 2 + detection_s + restart_s + reload_s) / (mtbf_h * 3600)
    return {
        "size_gb": size_gb, "size_gb_per_node": size_gb / nodes, "write_s": write_s, "stall_s": stall_s,
        "reload_s": reload_s, "job_mtbf_hours": mtbf_h, "failures_per_day": expected_failures_per_day,
        "young_daly_interval_s": yd_s, "interval_s": interval_s, "interval_steps": steps,
        "limit_bound": budget_s < yd_s, "worst_case_lost_s": worst_s, "worst_case_parts_s": parts,
        "max_lost_work_minutes": max_lost_work_minutes, "meets_limit": worst_s <= max_lost_work_minutes * 60,
        "expected_overhead_fraction": overhead, "keep": keep,
        "where": "shared storage (Lustre/GPFS/NFS or an object store), never a node-local disk: "
                 "a node that dies takes its local disk with it",
        "failures_per_gpu_hour": failures_per_gpu_hour,
    }
