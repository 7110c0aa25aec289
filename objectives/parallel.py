"""The trial's parallel layout: the device mesh, tensor parallelism and FSDP2 (or HSDP).

A trial runs on ``world = replicate x shard x tp`` ranks:

- ``tp`` = the ``tp_degree`` knob: each Llama block's attention and MLP are split over
  ``tp`` ranks with ``torch.distributed.tensor.parallel`` (Megatron's column-then-row split:
  q/k/v and gate/up column-wise, o and down row-wise, one all-reduce per sub-layer in
  forward and one in backward; Shoeybi et al. 2019, arXiv:1909.08053). Ranks of one TP group
  are adjacent (inside a node) and read the same batch.
- the remaining ``world / tp`` ranks are data parallel. ``full_shard`` / ``shard_grad_op``:
  FSDP2 shards over all of them (``replicate = 1``). ``hybrid_shard`` (HSDP): FSDP2 on a 2-D
  mesh, sharded inside groups of ``shard_group_size`` ranks and replicated across groups
  (reduce-scatter/all-gather inside a group, all-reduce of the shards across groups;
  Zhao et al. 2023, PyTorch FSDP, arXiv:2304.11277 section 3.2.2).

The order is torchtitan's ``parallelize_llama``: TP, then activation checkpointing, then
``fully_shard`` on each block, then on the root; then storage and weights.

NCCL settings are never read here: the launcher sets NCCL_ALGO / NCCL_PROTO in the
environment and NCCL reads them when the mesh's communicators are created.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from helper.mesh import MESH_DIMS, Layout
from tuner import knobs as catalogue
from tuner.errors import TrialConfigError

__all__ = ["plan_layout", "describe_layout", "build_mesh", "apply_tensor_parallel", "build_parallel_model",
           "TP_PLAN"]

TP_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
           "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
           "mlp.down_proj": "rowwise"}
"""How each linear of a Hugging Face LlamaDecoderLayer is split (torchtitan's Llama plan,
without sequence parallelism: norms stay replicated)."""


def plan_layout(knobs: Mapping[str, Any], *, world_size: int, gpus_per_node: int) -> Layout:
    """The mesh for resolved knob values on ``world_size`` ranks (helper.mesh.Layout, the one
    layout type: the spec refuses what a cluster cannot hold at load; this is the workload's own
    guard).

    Raises:
        ValueError: a combination the world cannot hold, naming the factor.

    Example:
        >>> plan_layout({"sharding": "hybrid_shard", "tp_degree": 1, "shard_group_size": 2},
        ...             world_size=4, gpus_per_node=4).mesh_shape
        (2, 2, 1)
    """
    return Layout.from_knobs(knobs, world_size=world_size, gpus_per_node=gpus_per_node)


def describe_layout(layout: Layout, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's ``layout`` entry for a trial run with ``knobs`` on ``layout``."""
    return {"sharding": knobs.get("sharding", catalogue.KNOBS["sharding"].default),
            "reshard_after_forward": catalogue.fsdp_reshard_after_forward(knobs),
            "mesh": list(layout.mesh_shape), "mesh_dims": list(MESH_DIMS),
            "tp_degree": layout.tp, "dp_size": layout.dp, "shard_group_size": layout.dp_shard}


def build_mesh(layout: Layout, device_type: str, group=None):
    """The 3-D DeviceMesh (dp_replicate, dp_shard, tp); size-1 dimensions are kept so the
    same names work for every layout.

    ``group`` (a resident worker's own process group, made after it changed NCCL_ALGO /
    NCCL_PROTO): every dimension gets a new group over that group's ranks, so each of the
    mesh's communicators is created after the change. Without it the mesh is over the
    default group, whose communicator init_device_mesh reuses for a dimension spanning the
    whole world.
    """
    if group is None:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, layout.mesh_shape, mesh_dim_names=MESH_DIMS)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    ranks = torch.tensor(dist.get_process_group_ranks(group)).view(layout.mesh_shape)
    me, mine = dist.get_rank(), []
    for dim in range(ranks.ndim):
        # every rank creates every subgroup, in the same order (new_group's contract)
        rows = ranks.movedim(dim, -1).reshape(-1, ranks.shape[dim]).tolist()
        groups = [(row, dist.new_group(row)) for row in rows]
        mine.append(next(g for row, g in groups if me in row))
    return DeviceMesh.from_group(mine, device_type, mesh=ranks, mesh_dim_names=MESH_DIMS)


def apply_tensor_parallel(blocks, tp_mesh) -> None:
    """Split each block's linears over ``tp_mesh`` (:data:`TP_PLAN`); outputs stay local
    tensors, so the block's own reshapes (``view(..., -1, head_dim)``) see the local heads."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for block in blocks:
        parallelize_module(block, tp_mesh, {name: styles[kind]() for name, kind in TP_PLAN.items()})


def build_parallel_model(config, layout: Layout, mesh, *, vocab_size: int, device) -> tuple[Any, Any]:
    """Meta model -> TP -> activation checkpointing per block -> fully_shard each block, then
    the root -> storage and weights (torchtitan's order). Returns (model, compute dtype)."""
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from objectives.models import build_model, load_pretrained, materialize, transformer_blocks

    model = build_model(config.model, vocab_size=vocab_size)
    if layout.tp > 1:
        heads = (model.config.num_attention_heads, getattr(model.config, "num_key_value_heads", None) or 0)
        if any(h % layout.tp for h in heads):
            raise TrialConfigError(f"params.tp_degree {layout.tp} does not divide the model's heads {heads}")
        apply_tensor_parallel(transformer_blocks(model), mesh["tp"])
    if config.knobs.activation_checkpointing:
        layers = model.get_decoder().layers
        for i, block in enumerate(transformer_blocks(model)):
            layers[i] = checkpoint_wrapper(block)  # non-reentrant torch.utils.checkpoint
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.model.get("dtype", "auto")]
    # Compute in `dtype`, reduce gradients in fp32, keep fp32 master weights (torchtitan's default).
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    # HSDP: a 2-D mesh (replicate, shard) makes fully_shard shard on the inner dimension and
    # all-reduce across the outer one; otherwise a 1-D mesh over every data-parallel rank.
    hybrid = config.knobs.sharding == "hybrid_shard"
    dp_mesh = mesh["dp_replicate", "dp_shard"] if hybrid else mesh["dp_shard"]
    reshard = catalogue.fsdp_reshard_after_forward(config.knobs)
    for block in transformer_blocks(model):
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
    materialize(model, device, seed=config.seed)
    if layout.tp > 1:
        _same_across_tp(model, mesh["tp"])
    if config.model.get("path"):
        load_pretrained(model, config.model["path"])
    model.train()
    return model, dtype


def _same_across_tp(model, tp_mesh) -> None:
    """Give the parameters TP does not split (embedding, norms, output; sharded over the
    data-parallel mesh only) the same random values on every rank of a TP group: the TP'd
    linears assume their input is replicated across the group."""
    import torch
    import torch.distributed as dist

    group = tp_mesh.get_group()
    with torch.no_grad():
        for param in model.parameters():
            if "tp" not in (param.device_mesh.mesh_dim_names or ()):  # TP-split ones sit on a (dp..., tp) mesh
                dist.broadcast(param.to_local(), group=group, group_src=0)


def gpus_per_node_from_env(default: int) -> int:
    """torchrun's LOCAL_WORLD_SIZE (processes on this node), else ``default``."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", default))
