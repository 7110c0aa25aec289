"""Memory per GPU, in GB (1e9 bytes): model states by ZeRO stage, activations, and allowances.

Static state is mixed-precision Adam: 2 B bf16 weights + 2 B gradients + 12 B optimizer
state (fp32 master weights, Adam m and v) per parameter, i.e. K = 12 in Rajbhandari et al.
2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", Fig. 1 / Table 1
(7.5B params on 64 GPUs: 120 GB baseline, 31.4 GB P_os, 16.6 GB P_os+g, 1.88 GB P_os+g+p).
FSDP2 with bf16 compute keeps fp32 sharded params (4 B) + fp32 grads (4 B) + Adam (8 B): the
same 16 B per parameter, all sharded.

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv 2205.05198), Sec. 4.1: count the bytes every op saves for
backward, per token and layer. Their GPT block gives s*b*h*(34 + 5*a*s/h); the 5as/h term is
the materialised attention matrix, which SDPA/FlashAttention never stores. The count is per
training stack (:mod:`helper.activations`, :mod:`helper.stacks`): the Hugging Face Llama block
of tuner's workload keeps 49.5 h bytes per token and layer, a fused MPT block 34 h.
"""

from __future__ import annotations

from helper.activations import (
    CHECKPOINTING,
    activation_bytes_per_token_per_layer,
    activation_memory_gb,
    effective_attention,
    normalize_checkpointing,
)
from helper.gpus import GpuSpec, get_gpu
from helper.sizes import ModelShape, parse_model_size
from helper.stacks import Stack, resolve_stack

__all__ = ["SHARDINGS", "CHECKPOINTING", "normalize_sharding", "normalize_checkpointing",
           "estimate_memory", "static_memory_gb", "activation_bytes_per_token_per_layer",
           "activation_memory_gb",
           "BYTES_PER_PARAM", "FRAGMENTATION_ALLOWANCE"]

GB = 1e9
SHARDINGS = ("ddp", "zero1", "zero2", "zero3")
_ALIASES = {"fsdp": "zero3", "full_shard": "zero3", "shard_grad_op": "zero2", "no_shard": "ddp"}

BYTES_PER_PARAM = {"weights": 2.0, "gradients": 2.0, "optimizer": 12.0}
"""Mixed-precision Adam (ZeRO paper, K = 12): bf16 weights, bf16 grads, fp32 master + m + v."""

FRAGMENTATION_ALLOWANCE = 0.05
"""Share added to the memory that is allocated and freed every step (activations, gathered
blocks, accumulation buffers) for the caching allocator's fragmentation: an allowance, not a
measurement. 5 % (was 10 %): with 10 %, 16 MosaicML MPT configurations that ran in 40/80 GB
were predicted out of memory (issue 13, bench/validate_model.py memory table)."""

def normalize_sharding(sharding: str) -> str:
    """``fsdp`` -> ``zero3`` (and FSDP1's names); ValueError for anything unknown.

    Example:
        >>> normalize_sharding("FSDP")
        'zero3'
    """
    key = str(sharding).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SHARDINGS:
        raise ValueError(f"unknown sharding {sharding!r}; one of {', '.join(SHARDINGS)} (fsdp = zero3)")
    return key


def static_memory_gb(n_params: float, gpu_count: int, sharding: str) -> dict[str, float]:
    """Weights, gradients and optimizer state per GPU, GB, as each ZeRO stage shards them.

    ddp replicates all three; zero1 shards the optimizer; zero2 also the gradients; zero3
    (FSDP) also the weights (ZeRO paper, Sec. 5).

    Example:
        >>> m = static_memory_gb(13e9, 8, "zero2")
        >>> round(m["weights"] + m["gradients"] + m["optimizer"], 2)
        48.75
    """
    stage = normalize_sharding(sharding)
    if gpu_count < 1:
        raise ValueError(f"gpu_count must be >= 1, got {gpu_count}")
    sharded = {"ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "gradients"),
               "zero3": ("optimizer", "gradients", "weights")}[stage]
    return {k: n_params * b / (gpu_count if k in sharded else 1) / GB
            for k, b in BYTES_PER_PARAM.items()}


def estimate_memory(model_size: float | int | str | ModelShape, gpu_count: int = 1, *,
                    sharding: str = "zero3", micro_batch: int | None = None,
                    seq_len: int | None = None, activation_checkpointing: bool | str = False,
                    grad_accum: int = 1, reshard_after_forward: bool = True,
                    reduce_scatter_every_micro_step: bool | None = None, reduce_dtype_bytes: int | None = None,
                    gpu: str | GpuSpec = "H100-80GB", attention: str | None = None,
                    method: str = "analytic", memory_scale: float = 1.0,
                    stack: str | Stack | None = None) -> dict[str, float]:
    """Peak memory per GPU, GB (1e9 bytes), by part.

    Args:
        model_size: ``7e9``, ``"7b"``, ``"13B"``, a preset name (see ``parse_model_size``).
        gpu_count: GPUs the states are sharded over (all of them: FSDP/ZeRO over the world).
        sharding: ``ddp``, ``zero1``, ``zero2``, ``zero3`` (``fsdp`` = ``zero3``).
        micro_batch: sequences per GPU per forward; activations are 0 unless it and
            ``seq_len`` are given.
        seq_len: tokens per sequence.
        activation_checkpointing: ``False``/``"none"``, ``True`` (the stack's policy),
            ``"full"`` (per-block recomputation), ``"selective"`` (keep matmul outputs,
            recompute the rest) or ``"selective_op"`` (torchtitan's op-level policy; see
            ``CHECKPOINTING``).
        grad_accum: micro-batches per optimizer step.
        reshard_after_forward: FSDP2's option (zero3 only): False keeps every block's
            gathered weights from forward to backward (no backward all-gather).
        reduce_scatter_every_micro_step: None: the stack's accumulation. False models
            gradient accumulation with ``set_requires_gradient_sync(False)`` on all but the
            last micro-batch: FSDP2 then keeps unsharded gradients in the reduce dtype until
            the last one (PyTorch PR #126166). True reduce-scatters every micro-batch and keeps
            only shards.
        reduce_dtype_bytes: bytes of the gradient reduction dtype (None: the stack's; fp32 =
            4 for hf-sdpa and torchtitan; FSDP2's accumulation buffer uses it).
        gpu: GPU name (sets the fixed framework overhead and the compute dtype).
        attention: None (the stack's kernel), ``sdpa``/``flash`` (the stack's fused kernel:
            no s x s scores kept) or ``eager`` (materialised scores).
        method: ``analytic`` (the formulas here) or ``trace``: run PyTorch's FSDP2 memory
            tracker on fake tensors over the trial's real model (needs torch and
            transformers; zero2/zero3 only; see :mod:`helper.memory_trace`). Both add the same
            framework and fragmentation allowances.
        memory_scale: calibrated correction on the per-step memory (activations, gathered
            blocks, buffers), ``memory_scale`` of a calibration (``tuner distill`` fits it
            from trials' ``peak_mem_gib``); 1.0 = uncorrected.
        stack: a :mod:`helper.stacks` preset name or ``Stack`` (None: ``hf-sdpa`` for
            Llama shapes, ``llm-foundry`` for MPT): attention kernel, fused norm / MLP /
            loss, what ``True`` checkpoints, reduce dtype and accumulation semantics.

    Returns:
        ``weights``, ``gradients``, ``optimizer``, ``static`` (their sum), ``activations``,
        ``gathered_params`` (FSDP's transient unsharded blocks and gradients),
        ``grad_accum_buffer``, ``overhead`` (framework allowance + fragmentation) and
        ``total`` (everything), all GB per GPU.

    Example:
        >>> estimate_memory("7b", 1, sharding="ddp")["static"]
        112.0
        >>> round(estimate_memory("13b", 8, sharding="zero2")["static"], 2)
        48.75
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    stage = normalize_sharding(sharding)
    if grad_accum < 1:
        raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
    st = resolve_stack(stack, shape)
    mode = normalize_checkpointing(activation_checkpointing, st)
    kernel = effective_attention(st, attention)
    if reduce_scatter_every_micro_step is None:
        reduce_scatter_every_micro_step = st.accumulation == "reduce_scatter"
    accum_bytes = reduce_dtype_bytes or st.accum_dtype_bytes  # FSDP2 accumulates in the reduce dtype
    reduce_dtype_bytes = reduce_dtype_bytes or st.reduce_dtype_bytes
    persistent = st.accumulation == "persistent"
    if method == "trace":
        return _traced(shape, gpu_count, stage=stage, micro_batch=micro_batch, seq_len=seq_len,
                       mode=mode, grad_accum=grad_accum, reshard_after_forward=reshard_after_forward,
                       attention="eager" if kernel == "eager" else "sdpa", spec=spec)
    if method != "analytic":
        raise ValueError(f"method must be analytic or trace, got {method!r}")
    static = static_memory_gb(shape.n_params, gpu_count, stage)
    p = spec.compute_dtype_bytes

    activations = activations_bwd = 0.0
    if micro_batch is not None and seq_len is not None:
        if micro_batch < 1 or seq_len < 1:
            raise ValueError(f"micro_batch and seq_len must be >= 1, got {micro_batch}, {seq_len}")
        act = activation_memory_gb(shape, micro_batch=micro_batch, seq_len=seq_len,
                                   activation_checkpointing=mode, dtype_bytes=p, attention=kernel, stack=st)
        activations, activations_bwd = act["total"], act["backward"]

    # Transient unsharded parameters/gradients (FSDP2 all-gathers per block).
    gathered = 0.0
    if gpu_count > 1 and stage in ("zero2", "zero3"):
        block_grad = shape.block_params * reduce_dtype_bytes  # one block's grad before reduce-scatter
        if stage == "zero3" and reshard_after_forward:
            # The root (embeddings + head) stays gathered through forward and backward; the
            # current block and the prefetched next one are gathered at any time.
            gathered = shape.root_params * p + 2 * shape.block_params * p + block_grad
        elif stage == "zero3":
            gathered = shape.n_params * p + block_grad  # every block kept gathered after forward
        else:
            gathered = block_grad  # zero2 weights are already counted whole in "weights"
        gathered /= GB

    accum = 0.0
    if persistent:  # Megatron's main_grad: the one, unsharded home of the gradients, always there
        accum = shape.n_params * accum_bytes / GB
        static = {**static, "gradients": 0.0}
    elif grad_accum > 1 and not reduce_scatter_every_micro_step and stage in ("zero2", "zero3") \
            and gpu_count > 1:
        accum = shape.n_params * accum_bytes / GB

    # Under accumulation the gradients of the earlier micro-batches are live at every later
    # micro-batch's loss: sharded ones when FSDP2 reduce-scatters every micro-batch, the full
    # ones under DDP / zero1. Only FSDP2's no-sync accumulation keeps no sharded gradient until
    # the last micro-batch (its unsharded buffer is ``accum`` above).
    grads_live = persistent or (grad_accum > 1 and (reduce_scatter_every_micro_step or stage in ("ddp", "zero1")))
    if activations > 0 and grads_live:
        activations = max(activations, activations_bwd)
    elif activations > 0:
        # Two moments compete for the peak. At the loss every kept activation is live but the
        # sharded gradients are not: the trial's zero_grad() frees them (set_to_none) and the
        # first reduce-scatter of backward allocates them again. Late in backward the
        # gradients exist and the activations are mostly freed. The FSDP2 tracker sees both.
        # FSDP2 (zero2/zero3) keeps fp32 sharded gradients: 4 of the 16 B per parameter
        # (the ZeRO split reports 2 B as gradients and 2 B of fp32 master in optimizer).
        freed = static["gradients"] * (2.0 if stage in ("zero2", "zero3") else 1.0)
        if activations_bwd > activations - freed:
            activations = activations_bwd
        else:
            static = {**static, "gradients": 0.0,
                      "optimizer": static["optimizer"] - (freed - static["gradients"])}
    return _assemble(static, activations * memory_scale, gathered * memory_scale,
                     accum * memory_scale, spec)


def _assemble(static: dict[str, float], activations: float, gathered: float, accum: float,
              spec: GpuSpec) -> dict[str, float]:
    dynamic = activations + gathered + accum
    overhead = spec.framework_overhead_gb + FRAGMENTATION_ALLOWANCE * dynamic
    static_total = sum(static.values())
    return {
        "weights": static["weights"], "gradients": static["gradients"],
        "optimizer": static["optimizer"], "static": static_total,
        "activations": activations, "gathered_params": gathered, "grad_accum_buffer": accum,
        "overhead": overhead, "total": static_total + dynamic + overhead,
    }


def _traced(shape: ModelShape, gpu_count: int, *, stage: str, micro_batch: int | None,
            seq_len: int | None, mode: str, grad_accum: int, reshard_after_forward: bool,
            attention: str, spec: GpuSpec) -> dict[str, float]:
    """``estimate_memory(method="trace")``: the tracker's peak, in estimate_memory's parts."""
    from helper.memory_trace import trace_memory

    if stage not in ("zero2", "zero3"):
        raise ValueError(f"method='trace' models FSDP2 (zero2, zero3), not {stage}")
    if shape.arch.family != "llama":
        raise ValueError(f"method='trace' builds the trial's Hugging Face Llama; {shape.label} is {shape.arch.family}")
    if mode in ("selective", "selective_op"):
        raise ValueError(f"method='trace' applies the trial's checkpointing: none or full, not {mode}")
    if micro_batch is None or seq_len is None:
        raise ValueError("method='trace' runs a step: give micro_batch and seq_len")
    peak = trace_memory(shape, gpu_count, micro_batch=micro_batch, seq_len=seq_len,
                        activation_checkpointing=mode == "full",
                        reshard_after_forward=reshard_after_forward and stage == "zero3",
                        attention=attention, grad_accum=grad_accum)
    part = {k: v / GB for k, v in peak.items()}
    # The trace holds fp32 sharded params and grads (4 B each) and Adam m, v (8 B): the same
    # 16 B per parameter as static_memory_gb, split differently; report the traced split.
    static = {"weights": part.get("Sharded Param", 0.0), "gradients": part.get("Sharded Grad", 0.0),
              "optimizer": part.get("OptState", 0.0)}
    gathered = sum(part.get(k, 0.0) for k in ("Unsharded Param", "Unsharded Grad", "All Gather",
                                                "Reduce Scatter", "Temp", "Buffer", "Inputs"))
    return _assemble(static, part.get("Activation", 0.0), gathered, 0.0, spec)
