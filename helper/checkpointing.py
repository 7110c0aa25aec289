"""Checkpoint cadence and the work a failure loses, built from what the launch sets.

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
- Worst case (a node dies just before a save completes), every part set by the launch:
  interval + write (that save is lost too) + detection + restart + reload, times
  ``1 + margin``. Detection is the later of the collective timeout the training script sets
  (survivors' collectives fail, the NCCL watchdog aborts them, torchrun tears down) and
  Slurm's ``SlurmdTimeout`` (the dead node is marked DOWN and leaves the allocation). Restart
  is a relaunch inside the allocation on a spare node when the job holds one, else a requeue
  that waits for a node, then the start-up to the first step.

:func:`checkpoint_plan` is the one cadence rule: ``plan_training`` and ``suggest_config`` both call it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["LLAMA3_FAILURES_PER_GPU_HOUR", "checkpoint_plan", "job_mtbf_hours", "young_daly_interval_s",
           "collective_timeouts_s", "default_spare_nodes", "CHECKPOINT_BYTES_PER_PARAM", "HOST_COPY_GBS",
           "INIT_TIMEOUT_S", "TRAIN_TIMEOUT_FLOOR_S", "TEARDOWN_S", "SLURMD_TIMEOUT_S", "REQUEUE_WAIT_S",
           "LOST_WORK_MARGIN"]

LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16384)
"""Llama 3 pre-training saw 419 unexpected interruptions in a 54-day snapshot on 16,384 H100
GPUs (Llama Team, "The Llama 3 Herd of Models", arXiv 2407.21783, Sec. 3.3.4, Table 5):
1.97e-5 per GPU-hour, i.e. one per ~6,300 hours for an 8-GPU node."""

CHECKPOINT_BYTES_PER_PARAM = 12.0
"""fp32 master weights + Adam m + v (ZeRO paper's K = 12); bf16 weights are derived."""

HOST_COPY_GBS = 10.0
"""GPU-to-host copy rate per GPU during async DCP staging, GB/s: an assumption well under
PCIe Gen5 x16's 64 GB/s per direction (PCI-SIG), because staging copies many small tensors."""

INIT_TIMEOUT_S = 300
"""Collective timeout through start-up and the first step (model build, checkpoint load): torchtitan's
``comm.init_timeout_seconds`` default (torchtitan/config/job_config.py, ``Comm``)."""

TRAIN_TIMEOUT_FLOOR_S = 100
"""Collective timeout after the first step, at least: torchtitan's ``comm.train_timeout_seconds``
default, set on every process group with ``_set_pg_timeout`` after a barrier
(torchtitan/distributed/utils.py, ``set_pg_timeouts``). PyTorch's own default is 10 minutes."""

TEARDOWN_S = 30.0
"""torchrun stops the surviving workers with SIGTERM and waits up to 30 s before SIGKILL
(torch.distributed.elastic's ``PContext.close(timeout=30)``)."""

SLURMD_TIMEOUT_S = 300.0
"""Slurm marks a silent node DOWN after ``SlurmdTimeout``, 300 s by default (slurm.conf(5)); only
then does it leave the allocation. Pass your cluster's value (``scontrol show config``)."""

REQUEUE_WAIT_S = 600.0
"""Without a spare node, a requeued job waits for a free node: site-specific, an allowance of 10
minutes, not a measurement. The go/no-go drill measures your cluster's; a spare node removes it."""

LOST_WORK_MARGIN = 0.20
"""Margin on the worst case: the parts after the interval are timeouts and allowances that the
first failures will measure; 20 % is an operating margin, not a measurement."""


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


def collective_timeouts_s(step_time_s: float) -> tuple[int, int]:
    """``(init, train)`` collective timeouts, seconds, for ``init_process_group(timeout=...)`` and after step 1.

    Train: torchtitan's 100 s, or three steps when a step is longer (a collective waits at most
    for the slowest rank's step), rounded up to 10 s.

    Example:
        >>> collective_timeouts_s(26.0), collective_timeouts_s(61.0)
        ((300, 100), (300, 190))
    """
    train = max(TRAIN_TIMEOUT_FLOOR_S, 10 * math.ceil(3 * step_time_s / 10))
    return max(INIT_TIMEOUT_S, train), train


def default_spare_nodes(nodes: int) -> int:
    """One spare node from 8 nodes up (it costs at most 1/8 of the job), none below.

    Example:
        >>> default_spare_nodes(4), default_spare_nodes(32)
        (0, 1)
    """
    return 1 if nodes >= 8 else 0


def checkpoint_plan(n_params: float, *, gpu_count: int, nodes: int, step_time_s: float,
                    storage_write_gbs_per_node: float = 2.0, storage_read_gbs_per_node: float | None = None,
                    failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR,
                    max_lost_work_minutes: float = 30.0, startup_s: float = 60.0,
                    spare_nodes: int | None = None, collective_timeout_s: float | None = None,
                    slurmd_timeout_s: float = SLURMD_TIMEOUT_S, requeue_wait_s: float = REQUEUE_WAIT_S,
                    margin: float = LOST_WORK_MARGIN, keep: int = 3) -> dict[str, Any]:
    """When to checkpoint, what it costs, and the worst-case work a failure loses, by part.

    Args:
        n_params: model parameters.
        gpu_count: GPUs of the job.
        nodes: nodes of the job (each writes its own shards), spares not included.
        step_time_s: seconds per optimizer step.
        storage_write_gbs_per_node: shared-storage write bandwidth per node, GB/s.
        storage_read_gbs_per_node: read bandwidth for the reload (default: the write bandwidth).
        failures_per_gpu_hour: failure rate (default: Llama 3's, see
            :data:`LLAMA3_FAILURES_PER_GPU_HOUR`).
        max_lost_work_minutes: the limit the worst case must stay under.
        startup_s: relaunch to the first step (rendezvous, model build), e.g.
            :func:`helper.throughput.estimate_startup_seconds`.
        spare_nodes: idle nodes the job holds for a relaunch (None: :func:`default_spare_nodes`).
        collective_timeout_s: the training script's collective timeout after the first step
            (None: :func:`collective_timeouts_s`).
        slurmd_timeout_s: the cluster's ``SlurmdTimeout``.
        requeue_wait_s: wait for a node after a requeue, when there is no spare.
        margin: share added to the worst case.
        keep: checkpoints kept on storage.

    Example:
        >>> p = checkpoint_plan(13e9, gpu_count=32, nodes=4, step_time_s=26.0)
        >>> p["meets_limit"], p["collective_timeout_s"], p["spare_nodes"], p["restart_policy"][:7]
        (True, 100, 0, 'requeue')
    """
    if step_time_s <= 0 or nodes < 1 or gpu_count < 1:
        raise ValueError("step_time_s, nodes and gpu_count must be positive")
    if storage_write_gbs_per_node <= 0:
        raise ValueError(f"storage bandwidth must be > 0 GB/s, got {storage_write_gbs_per_node}")
    spares = default_spare_nodes(nodes) if spare_nodes is None else int(spare_nodes)
    if spares < 0:
        raise ValueError(f"spare_nodes must be >= 0, got {spare_nodes}")
    init_timeout_s, train_timeout_s = collective_timeouts_s(step_time_s)
    if collective_timeout_s is not None:
        train_timeout_s = collective_timeout_s
    read_gbs = storage_read_gbs_per_node or storage_write_gbs_per_node
    size_gb = CHECKPOINT_BYTES_PER_PARAM * n_params / 1e9
    write_s = size_gb / nodes / storage_write_gbs_per_node
    reload_s = size_gb / nodes / read_gbs
    stall_s = size_gb / gpu_count / HOST_COPY_GBS
    mtbf_h = job_mtbf_hours(gpu_count, failures_per_gpu_hour)
    yd_s = young_daly_interval_s(stall_s, mtbf_h * 3600)
    detection_s = max(train_timeout_s + TEARDOWN_S, slurmd_timeout_s)
    restart_s = startup_s + (0.0 if spares else requeue_wait_s)
    fixed_s = write_s + detection_s + restart_s + reload_s
    budget_s = max_lost_work_minutes * 60 / (1 + margin) - fixed_s
    # the background write must finish before the next save begins: interval >= write time
    interval_s = max(min(yd_s, budget_s), write_s, step_time_s)
    steps = max(1, int(interval_s // step_time_s))
    interval_s = steps * step_time_s
    parts = {"interval_s": interval_s, "write_s": write_s, "detection_s": detection_s,
             "restart_s": restart_s, "reload_s": reload_s}
    parts["margin_s"] = margin * sum(parts.values())
    worst_s = sum(parts.values())
    expected_failures_per_day = 24.0 / mtbf_h if math.isfinite(mtbf_h) else 0.0
    overhead = stall_s / interval_s + (interval_s / 2 + detection_s + restart_s + reload_s) / (mtbf_h * 3600)
    policy = (f"relaunch on the {spares} spare node(s) inside the allocation" if spares else
              "requeue: the job goes back to the queue and waits for a node")
    return {
        "size_gb": size_gb, "size_gb_per_node": size_gb / nodes, "write_s": write_s, "stall_s": stall_s,
        "reload_s": reload_s, "job_mtbf_hours": mtbf_h, "failures_per_day": expected_failures_per_day,
        "young_daly_interval_s": yd_s, "interval_s": interval_s, "interval_steps": steps,
        "limit_bound": budget_s < yd_s, "worst_case_lost_s": worst_s, "worst_case_parts_s": parts,
        "max_lost_work_minutes": max_lost_work_minutes, "meets_limit": worst_s <= max_lost_work_minutes * 60,
        "expected_overhead_fraction": overhead, "keep": keep,
        "init_timeout_s": init_timeout_s, "collective_timeout_s": train_timeout_s, "teardown_s": TEARDOWN_S,
        "slurmd_timeout_s": slurmd_timeout_s, "startup_s": startup_s, "spare_nodes": spares,
        "requeue_wait_s": 0.0 if spares else requeue_wait_s, "restart_policy": policy, "margin": margin,
        "where": "shared storage (Lustre/GPFS/NFS or an object store), never a node-local disk: "
                 "a node that dies takes its local disk with it",
        "failures_per_gpu_hour": failures_per_gpu_hour,
    }
