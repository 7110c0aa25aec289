"""The host's share of a step: eager PyTorch dispatches every kernel from one CPU thread.

A GPU runs kernels asynchronously: while one runs, the host queues the next. When each
micro-batch's kernels take less GPU time than the host needs to launch them (small
micro-batches, short sequences, small hidden sizes), the GPU waits on the host and the
micro-batch takes the host's time instead of the device's: the "overhead-bound" regime
(H. He, "Making Deep Learning Go Brrrr From First Principles", 2022,
horace.io/brrr_intro.html, section "Overhead"). The model takes the larger of the two::

    micro-batch seconds = max(host dispatch, device work)
    host dispatch       = blocks x dispatch_s_per_layer x (1 + dispatch_recompute_share if full AC)

The dispatch cost depends on the stack's kernel count per block (not on hidden size or
sequence length) and on the host CPU; a stack states it as measured (helper.stacks), and a
stack that states 0 is not modelled this way (its per-micro-batch cost is the calibration's
additive ``micro_step_overhead_s``). A CPU runs its kernels in the dispatching thread, so there
is nothing to overlap: the rule applies to GPUs only.

Example:
    >>> from helper.gpus import get_gpu
    >>> from helper.stacks import get_stack
    >>> s = host_bound_seconds(0.05, stack=get_stack("hf-sdpa"), blocks=22, checkpointing="none",
    ...                        gpu=get_gpu("H100-80GB"), micro_steps=1)
    >>> round(s, 3)   # 22 blocks' dispatch outlasts 50 ms of GPU work
    0.142
    >>> host_bound_seconds(0.05, stack=get_stack("llm-foundry"), blocks=22, checkpointing="none",
    ...                    gpu=get_gpu("H100-80GB"), micro_steps=1)
    0.05
"""

from __future__ import annotations

from helper.gpus import GpuSpec
from helper.stacks import Stack

__all__ = ["host_dispatch_seconds", "host_bound_seconds"]


def host_dispatch_seconds(*, stack: Stack | None, blocks: float, checkpointing: str, gpu: GpuSpec,
                          scale: float = 1.0) -> float:
    """Host seconds to dispatch one micro-batch's forward and backward (0: not modelled);
    ``scale``: the calibration's ``host_dispatch_scale`` (this cluster's host against the
    stack's measured one)."""
    if stack is None or stack.dispatch_s_per_layer <= 0.0 or gpu.nccl_arch == "none":
        return 0.0  # nccl_arch "none": a CPU, which runs what it dispatches
    share = stack.dispatch_recompute_share if checkpointing == "full" else 0.0
    return scale * blocks * stack.dispatch_s_per_layer * (1.0 + share)


def host_bound_seconds(device_s: float, *, stack: Stack | None, blocks: float, checkpointing: str,
                       gpu: GpuSpec, micro_steps: int, scale: float = 1.0) -> float:
    """``micro_steps`` micro-batches whose device work totals ``device_s``: each takes the larger
    of its share of the device work and the host's dispatch. The share is the mean: work that
    runs once per step (the last micro-batch's gradient reduce-scatter) is spread over the
    micro-batches, so a host-bound step with accumulation reads slightly short."""
    host = host_dispatch_seconds(stack=stack, blocks=blocks, checkpointing=checkpointing, gpu=gpu, scale=scale)
    return micro_steps * max(host, device_s / micro_steps)
