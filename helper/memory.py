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
the materialised attention matrix, which SDPA/FlashAttention never stores. We apply the same
bookkeeping to the Hugging Face Llama block (see :func:`activation_bytes_per_token_per_layer`).
"""

from __future__ import annotations

from helper.gpus import GpuSpec, get_gpu
from helper.sizes import ModelShape, parse_model_size

__all__ = ["SHARDINGS", "normalize_sharding", "estimate_memory", "static_memory_gb",
           "activation_bytes_per_token_per_layer", "activation_memory_gb",
           "BYTES_PER_PARAM", "FRAGMENTATION_ALLOWANCE"]

GB = 1e9
SHARDINGS = ("ddp", "zero1", "zero2", "zero3")
_ALIASES = {"fsdp": "zero3", "full_shard": "zero3", "shard_grad_op": "zero2", "no_shard": "ddp"}

BYTES_PER_PARAM = {"weights": 2.0, "gradients": 2.0, "optimizer": 12.0}
"""Mixed-precision Adam (ZeRO paper, K = 12): bf16 weights, bf16 grads, fp32 master + m + v."""

FRAGMENTATION_ALLOWANCE = 0.10
"""Share added to the memory that is allocated and freed every step (activations, gathered
blocks, accumulation buffers) for the caching allocator's fragmentation: an allowance (PyTorch
users commonly see 5-15 % reserved-but-unallocated), not a measurement."""

# Bytes per logit kept at the loss, bf16 compute: the bf16 logits (2), the fp32 upcast the
# HF loss makes (4), the fp32 log-softmax saved by cross_entropy (4) and its fp32 gradient in
# backward (4). In fp32 compute there is no upcast copy.
_LOGIT_BYTES_BF16 = 14.0
_LOGIT_BYTES_FP32 = 12.0


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


def activation_bytes_per_token_per_layer(shape: ModelShape, *, dtype_bytes: int = 2) -> float:
    """Bytes one Llama block saves for backward, per token (Korthikanti et al. 2022, Sec. 4.1).

    What the Hugging Face Llama block keeps (p = dtype bytes, h hidden, kv = kv heads x
    head_dim, i = MLP width, a = heads):

    - two RMSNorms: the fp32 upcast input (4h each) and the normalised output (p h each, the
      input of q/k/v and of gate/up);
    - attention: q and k before RoPE (p h + p kv), q, k, v after RoPE (p (h + 2 kv)), the SDPA
      output (p h) and its contiguous copy into o_proj (p h), the fp32 log-sum-exp (4 a);
      no s x s matrix (SDPA / FlashAttention);
    - SwiGLU MLP: gate, up, silu(gate) and their product (4 p i).

    For GPT's block the same count gives Korthikanti's 34 s b h (minus the 5 a s^2 b term).

    Example:
        >>> from helper.sizes import parse_model_size
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("llama-2-7b")) / 4096, 1)
        47.5
    """
    a = shape.arch
    p = float(dtype_bytes)
    h, i = float(a.hidden), float(a.intermediate)
    kv = float(a.n_kv_heads * a.head_dim)
    norms = 2 * 4 * h + 2 * p * h
    attention = (p * h + p * kv) + p * (h + 2 * kv) + 2 * p * h + 4 * a.n_heads
    mlp = 4 * p * i
    return norms + attention + mlp


def activation_memory_gb(shape: ModelShape, *, micro_batch: int, seq_len: int,
                         activation_checkpointing: bool, dtype_bytes: int = 2) -> dict[str, float]:
    """Activation memory of one micro-batch, GB: ``blocks``, ``logits``, ``total``.

    Without checkpointing every block keeps its activations. With full (per-block)
    checkpointing each block keeps only its bf16 input and one block's activations are live
    again while it is recomputed in backward (Korthikanti et al. 2022, Sec. 4.2: 2 s b h L).
    The loss keeps ``micro_batch x seq_len x vocab`` logits in several copies.
    """
    tokens = float(micro_batch) * float(seq_len)
    per_layer = activation_bytes_per_token_per_layer(shape, dtype_bytes=dtype_bytes)
    layers = shape.arch.n_layers
    if activation_checkpointing:
        blocks = tokens * (layers * dtype_bytes * shape.arch.hidden + per_layer)
    else:
        blocks = tokens * layers * per_layer
    logit_bytes = _LOGIT_BYTES_BF16 if dtype_bytes == 2 else _LOGIT_BYTES_FP32
    logits = tokens * shape.arch.vocab * logit_bytes
    return {"blocks": blocks / GB, "logits": logits / GB, "total": (blocks + logits) / GB}


def estimate_memory(model_size: float | int | str | ModelShape, gpu_count: int = 1, *,
                    sharding: str = "zero3", micro_batch: int | None = None,
                    seq_len: int | None = None, activation_checkpointing: bool = False,
                    grad_accum: int = 1, reshard_after_forward: bool = True,
                    reduce_scatter_every_micro_step: bool = False, reduce_dtype_bytes: int = 4,
                    gpu: str | GpuSpec = "H100-80GB") -> dict[str, float]:
    """Peak memory per GPU, GB (1e9 bytes), by part.

    Args:
        model_size: ``7e9``, ``"7b"``, ``"13B"``, a preset name (see ``parse_model_size``).
        gpu_count: GPUs the states are sharded over (all of them: FSDP/ZeRO over the world).
        sharding: ``ddp``, ``zero1``, ``zero2``, ``zero3`` (``fsdp`` = ``zero3``).
        micro_batch: sequences per GPU per forward; activations are 0 unless it and
            ``seq_len`` are given.
        seq_len: tokens per sequence.
        activation_checkpointing: full per-block recomputation.
        grad_accum: micro-batches per optimizer step.
        reshard_after_forward: FSDP2's option (zero3 only): False keeps every block's
            gathered weights from forward to backward (no backward all-gather).
        reduce_scatter_every_micro_step: False (the default) models gradient accumulation
            with ``set_requires_gradient_sync(False)`` on all but the last micro-batch: FSDP2
            then keeps unsharded gradients in the reduce dtype until the last one (PyTorch
            PR #126166). True reduce-scatters every micro-batch and keeps only shards.
        reduce_dtype_bytes: bytes of the gradient reduction dtype (fp32 = 4, torchtitan's
            default; the accumulation buffer uses it).
        gpu: GPU name (sets the fixed framework overhead and the compute dtype).

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
    static = static_memory_gb(shape.n_params, gpu_count, stage)
    p = spec.compute_dtype_bytes

    activations = 0.0
    if micro_batch is not None and seq_len is not None:
        if micro_batch < 1 or seq_len < 1:
            raise ValueError(f"micro_batch and seq_len must be >= 1, got {micro_batch}, {seq_len}")
        activations = activation_memory_gb(shape, micro_batch=micro_batch, seq_len=seq_len,
                                           activation_checkpointing=activation_checkpointing,
                                           dtype_bytes=p)["total"]

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
    if grad_accum > 1 and not reduce_scatter_every_micro_step and stage in ("zero2", "zero3") \
            and gpu_count > 1:
        accum = shape.n_params * reduce_dtype_bytes / GB

    dynamic = activations + gathered + accum
    overhead = spec.framework_overhead_gb + FRAGMENTATION_ALLOWANCE * dynamic
    static_total = sum(static.values())
    return {
        "weights": static["weights"], "gradients": static["gradients"],
        "optimizer": static["optimizer"], "static": static_total,
        "activations": activations, "gathered_params": gathered, "grad_accum_buffer": accum,
        "overhead": overhead, "total": static_total + dynamic + overhead,
    }
