"""The sim launcher's model of the parallel layouts and of DCP checkpoints (helper's models).

The sim predicts a trial as FSDP over every GPU (``helper.predict_throughput``,
``helper.estimate_memory``). For an HSDP or tensor-parallel trial this module moves that
prediction by what :mod:`helper.layouts` says the layout changes:

- step time x ``layout_step_time(layout) / layout_step_time(fsdp)`` (same model, calibration
  and batch: TP splits the compute and adds exposed per-block all-reduces; HSDP shards in a
  node and all-reduces the shards across replicas);
- peak memory + ``layout_memory(layout) - layout_memory(fsdp)`` (TP splits stored activations
  and the gathered blocks; HSDP shards the states over fewer GPUs);
- tokens counted once per TP group (the ranks of a TP group read the same rows, as the
  workload counts them: objectives/fsdp_finetune.py).

Checkpoints ([trial] checkpoint_every) are saved outside the timed step in the workload, so
they do not change tokens/s; they add their blocking time to the trial's wall time and are
reported like the workload's summary: :func:`helper.checkpointing.checkpoint_plan`'s write
time (sync: the step waits for it) or host-copy stall (async: the write runs behind).

Example:
    >>> sim_layout({"sharding": "hybrid_shard", "shard_group_size": 4, "tp_degree": 2},
    ...            world_size=16, gpus_per_node=8)
    Layout(dp_shard=4, dp_replicate=2, tp=2, pp=1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helper.layouts import Layout
from tuner.layout_rules import hsdp_shard_size

__all__ = ["sim_layout", "layout_adjustment", "checkpoint_cost", "SIM_STORAGE_WRITE_GBS_PER_NODE"]

SIM_STORAGE_WRITE_GBS_PER_NODE = 2.0
"""Shared-storage write rate per node the sim assumes, GB/s: helper.checkpointing's default
(``checkpoint_plan``), an assumption for a parallel file system's share per node, not a
measurement."""


def sim_layout(params: Mapping[str, Any], *, world_size: int, gpus_per_node: int) -> Layout:
    """helper's :class:`~helper.layouts.Layout` for the workload's knobs (objectives/parallel.py's mesh)."""
    tp = int(params.get("tp_degree") or 1)
    dp = world_size // tp
    shard = dp
    if params.get("sharding") == "hybrid_shard":
        shard = hsdp_shard_size(int(params.get("shard_group_size") or 0), gpus_per_node=gpus_per_node, tp_degree=tp)
    return Layout(dp_shard=shard, dp_replicate=dp // shard, tp=tp)


def layout_adjustment(model: str, params: Mapping[str, Any], *, gpu: str, world_size: int, gpus_per_node: int,
                      micro_batch: int, seq_len: int, activation_checkpointing: bool, grad_accum: int,
                      reshard_after_forward: bool) -> dict[str, Any] | None:
    """How the layout moves the FSDP prediction, or None for FSDP over every GPU.

    Returns ``step_time_ratio``, ``memory_delta_gb``, ``tp`` (ranks sharing a batch) and
    ``layout`` (helper's name and mesh).
    """
    from helper.calibration import resolve_constants
    from helper.layouts import layout_step_time

    layout = sim_layout(params, world_size=world_size, gpus_per_node=gpus_per_node)
    fsdp = Layout(dp_shard=world_size)
    if layout == fsdp:
        return None
    constants, _ = resolve_constants(None, gpu)  # what predict_throughput uses by default
    common = dict(gpu=gpu, micro_batch=micro_batch, seq_len=seq_len,
                  activation_checkpointing=activation_checkpointing, grad_accum=grad_accum)
    times = [layout_step_time(model, lay, constants=constants, gpus_per_node=gpus_per_node,
                              reshard_after_forward=reshard_after_forward, **common)["step_time_s"]
             for lay in (layout, fsdp)]
    return {"step_time_ratio": times[0] / times[1],
            "memory_delta_gb": layout_memory_delta_gb(model, params, world_size=world_size,
                                                      gpus_per_node=gpus_per_node, **common),
            "tp": layout.tp,
            "layout": {"name": layout.name, "mesh": [layout.dp_replicate, layout.dp_shard, layout.tp]}}


def layout_memory_delta_gb(model: str, params: Mapping[str, Any], *, gpu: str, world_size: int, gpus_per_node: int,
                           micro_batch: int, seq_len: int, activation_checkpointing: bool, grad_accum: int) -> float:
    """Peak memory per GPU of the knobs' layout minus FSDP's over every GPU (helper.layouts; 0
    for FSDP): what the layout adds to an FSDP memory prediction (the sim, tuner.screening)."""
    from helper.layouts import layout_memory

    layout = sim_layout(params, world_size=world_size, gpus_per_node=gpus_per_node)
    fsdp = Layout(dp_shard=world_size)
    if layout == fsdp:
        return 0.0
    common = dict(gpu=gpu, micro_batch=micro_batch, seq_len=seq_len,
                  activation_checkpointing=activation_checkpointing, grad_accum=grad_accum)
    return layout_memory(model, layout, **common)["total"] - layout_memory(model, fsdp, **common)["total"]


def checkpoint_cost(n_params: float, *, mode: str, every: int, steps: int, world_size: int, nodes: int,
                    step_time_s: float) -> dict[str, Any]:
    """The trial's predicted DCP saves: count, blocking and background seconds each, size.

    Saves fall where the workload makes them: before steps ``every, 2 x every, ...`` below ``steps``.

    Example:
        >>> c = checkpoint_cost(1e9, mode="async", every=5, steps=12, world_size=8, nodes=1, step_time_s=1.0)
        >>> c["saves"], round(c["blocking_s"], 3), round(c["background_s"], 1)
        (2, 0.15, 6.0)
    """
    from helper.checkpointing import checkpoint_plan

    plan = checkpoint_plan(n_params, gpu_count=world_size, nodes=nodes, step_time_s=step_time_s,
                           storage_write_gbs_per_node=SIM_STORAGE_WRITE_GBS_PER_NODE)
    saves = len(range(every, steps, every)) if every > 0 else 0
    blocking = plan["write_s"] if mode == "sync" else plan["stall_s"]
    return {"mode": mode, "every": every, "saves": saves, "blocking_s": blocking,
            "background_s": 0.0 if mode == "sync" else plan["write_s"], "size_gb": plan["size_gb"],
            "total_blocking_s": saves * blocking, "storage_write_gbs_per_node": SIM_STORAGE_WRITE_GBS_PER_NODE}
