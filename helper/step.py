"""One configuration's step, planned: what the throughput model needs that no calibration changes."""

from __future__ import annotations

from dataclasses import dataclass

from helper.collectives import CollectiveChoice
from helper.gpus import GpuSpec
from helper.sizes import ModelShape
from helper.stacks import Stack

__all__ = ["StepPlan"]


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """Everything about one configuration that does not depend on the calibration."""

    shape: ModelShape
    """Model size and architecture."""
    gpu: GpuSpec
    """Accelerator."""
    gpu_count: int
    """World size."""
    nodes: int
    """Nodes = ceil(gpu_count / gpus_per_node)."""
    gpus_per_node: int
    """GPUs per node actually used (at most gpu_count)."""
    seq_len: int
    """Tokens per row."""
    micro_batch: int
    """Rows per GPU per micro-step."""
    grad_accum: int
    """Micro-steps per optimizer step."""
    sharding: str
    """ddp, zero1, zero2, zero3."""
    activation_checkpointing: bool
    """Any recomputation (``checkpointing`` says which)."""
    checkpointing: str = "none"
    """``none``, ``selective`` or ``full``."""
    attention: str = "sdpa"
    """``sdpa``/``flash`` (fused kernels) or ``eager`` (materialised scores)."""
    stack: Stack | None = None
    """The training stack (helper.stacks); None: the shape's default."""
    reduce_scatter_every_micro_step: bool = False
    """Gradients reduce-scattered every micro-batch (the stack's accumulation, or the caller's)."""
    matmul_flops_per_micro_step: float = 0.0
    """FLOPs of the weight matmuls of one micro-batch on one GPU (recompute included)."""
    attention_flops_per_micro_step: float = 0.0
    """FLOPs of the attention scores of one micro-batch (causal half; recompute included)."""
    padding_efficiency: float
    """Non-padding share of the computed tokens."""
    examples_per_sequence: float
    """Examples tokenised per row (1 when padded; seq_len / mean length when packed)."""
    num_workers: int
    """DataLoader workers per GPU."""
    prefetch_factor: int | None
    """Batches each worker keeps ready (no steady-state effect in this model)."""
    flops_per_micro_step: float
    """Training FLOPs of one micro-batch on one GPU."""
    optimizer_bytes: float
    """HBM bytes the optimizer step touches on one GPU."""
    collectives: tuple[tuple[str, float, float, CollectiveChoice], ...]
    """(collective, buffer bytes, count per optimizer step, algorithm/protocol)."""
