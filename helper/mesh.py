"""The one parallel layout type: how a job's GPUs split the work, every factor named.

Ranks are laid out as torchtitan's device mesh orders them (``ParallelDims``:
``[pp, dp_replicate, dp_shard, tp]``, tensor parallelism innermost), so a TP group is
consecutive GPUs of one node and a pipeline stage is a block of whole nodes:

- ``dp_shard``: GPUs that shard weights, gradients and optimizer state (FSDP2's shard group);
- ``dp_replicate``: replicas of those shards (HSDP across groups; 1 = plain FSDP);
- ``tp``: tensor-parallel degree (inside a node);
- ``pp``: pipeline stages.

``world_size = pp x dp_replicate x dp_shard x tp``. The trial workload builds its DeviceMesh
from a :class:`Layout` (objectives.parallel), the spec checks the layouts its space can reach
against the cluster with it (tuner.spec), and helper's layout model prices it (helper.layouts).
Pure Python: the training rank imports it.

Example:
    >>> lay = Layout.from_knobs({"sharding": "hybrid_shard", "shard_group_size": 4, "tp_degree": 2},
    ...                         world_size=16, gpus_per_node=8)
    >>> lay, lay.name, lay.world_size
    (Layout(dp_shard=4, dp_replicate=2, tp=2, pp=1), 'hsdp+tp2', 16)
    >>> Layout.from_knobs({"tp_degree": 3}, world_size=8, gpus_per_node=8)
    Traceback (most recent call last):
    ...
    ValueError: tp_degree 3 does not divide the world size 8
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Layout", "hsdp_shard_size", "MESH_DIMS"]

MESH_DIMS = ("dp_replicate", "dp_shard", "tp")
"""The workload's mesh dimensions, outermost first (it runs no pipeline)."""


def hsdp_shard_size(shard_group_size: int, *, gpus_per_node: int, tp_degree: int) -> int:
    """The HSDP shard group: ``shard_group_size``, or for 0 the node's GPUs TP leaves over.

    Example:
        >>> hsdp_shard_size(0, gpus_per_node=8, tp_degree=2), hsdp_shard_size(16, gpus_per_node=8, tp_degree=1)
        (4, 16)
    """
    return shard_group_size if shard_group_size else max(1, gpus_per_node // max(1, tp_degree))


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How ``world_size`` GPUs split the work: data (sharded, replicated), tensor, pipeline."""

    dp_shard: int
    """GPUs that shard weights, gradients and optimizer state (FSDP)."""
    dp_replicate: int = 1
    """Replicas of those shards (HSDP); 1 = plain FSDP."""
    tp: int = 1
    """Tensor-parallel degree (inside a node)."""
    pp: int = 1
    """Pipeline stages (1F1B)."""

    def __post_init__(self) -> None:
        for name in ("dp_shard", "dp_replicate", "tp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Layout.{name} must be an integer >= 1, got {value!r}")

    @property
    def world_size(self) -> int:
        """GPUs the layout spans: pp x dp_replicate x dp_shard x tp."""
        return self.pp * self.dp_replicate * self.dp_shard * self.tp

    gpu_count = world_size

    @property
    def dp(self) -> int:
        """Data-parallel degree: model replicas that each read their own micro-batches."""
        return self.dp_shard * self.dp_replicate

    @property
    def name(self) -> str:
        """``fsdp``, ``hsdp``, ``fsdp+tp4``, ``pp2+fsdp``, ``pp2+fsdp+tp8`` (3-D)."""
        base = "hsdp" if self.dp_replicate > 1 else "fsdp"
        parts = ([f"pp{self.pp}"] if self.pp > 1 else []) + [base] + ([f"tp{self.tp}"] if self.tp > 1 else [])
        return "+".join(parts)

    @property
    def mesh_shape(self) -> tuple[int, int, int]:
        """The workload's DeviceMesh shape over :data:`MESH_DIMS`."""
        return (self.dp_replicate, self.dp_shard, self.tp)

    def dp_rank(self, rank: int) -> int:
        """The data-parallel index of global ``rank`` (TP ranks are the innermost dimension)."""
        return rank // self.tp

    def check(self, world_size: int) -> None:
        """Raise ValueError naming every factor when the layout does not span ``world_size``."""
        if self.world_size != world_size:
            raise ValueError(f"pp {self.pp} x dp_replicate {self.dp_replicate} x dp_shard {self.dp_shard} x "
                             f"tp {self.tp} = {self.world_size}, not the world size {world_size}")

    @classmethod
    def from_knobs(cls, values: Mapping[str, Any], *, world_size: int, gpus_per_node: int) -> Layout:
        """The layout the workload's knobs ask for (tuner.knobs: ``sharding``, ``shard_group_size``,
        ``tp_degree``; missing ones take their defaults) on ``world_size`` GPUs.

        Raises:
            ValueError: a combination the world cannot hold, naming the factor.
        """
        tp = int(values.get("tp_degree") or 1)
        if tp < 1 or world_size % tp:
            raise ValueError(f"tp_degree {tp} does not divide the world size {world_size}")
        dp = world_size // tp
        shard = dp
        if values.get("sharding") == "hybrid_shard":
            shard = hsdp_shard_size(int(values.get("shard_group_size") or 0), gpus_per_node=gpus_per_node,
                                    tp_degree=tp)
            if shard < 1 or dp % shard:
                raise ValueError(f"HSDP shard_group_size {shard} does not divide the {dp} data-parallel ranks "
                                 f"(world {world_size} / tp_degree {tp})")
        layout = cls(dp_shard=shard, dp_replicate=dp // shard, tp=tp)
        layout.check(world_size)
        return layout

    def workload_knobs(self) -> dict[str, Any]:
        """The trial workload's knobs for this layout (``sharding``, ``shard_group_size``,
        ``tp_degree``); ``pp_degree`` names the pipeline stages, which the workload does not run
        (yet): a tuner proxy measures without it and says so.

        Example:
            >>> Layout(dp_shard=4, dp_replicate=4, tp=2).workload_knobs()
            {'sharding': 'hybrid_shard', 'shard_group_size': 4, 'tp_degree': 2}
        """
        knobs: dict[str, Any] = {"sharding": "hybrid_shard" if self.dp_replicate > 1 else "full_shard"}
        if self.dp_replicate > 1:
            knobs["shard_group_size"] = self.dp_shard
        if self.tp > 1:
            knobs["tp_degree"] = self.tp
        if self.pp > 1:
            knobs["pp_degree"] = self.pp
        return knobs
