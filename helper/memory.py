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

# Bytes per logit live at the loss's peak, bf16 compute: the bf16 logits (2), the fp32
# log-softmax cross_entropy saves (4), and in backward its fp32 gradient (4) and the bf16
# gradient of the logits (2); the HF loss's fp32 upcast copy (4) is freed once the forward
# returns. 12 B: the FSDP2 tracker on the trial's model shows 12.6 (docs/validation.md).
_LOGIT_BYTES_BF16 = 12.0
_LOGIT_BYTES_FP32 = 12.0
# MPT (llm-foundry) uses flash-attn's fused cross-entropy (modeling_mpt.py, loss_fn
# 'fused_crossentropy'): it keeps the bf16 logits and writes a bf16 gradient (2 + 2).
_LOGIT_BYTES_FUSED = 4.0


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


CHECKPOINTING = ("none", "selective", "selective_op", "full")
"""``selective`` is Korthikanti et al.'s (keep the matmul outputs, recompute the attention core);
``selective_op`` is torchtitan's op-level policy (``mode = "selective"``, ``selective_ac_option =
"op"``): inside each block it saves the outputs of SDPA and of every other matmul and recomputes
the rest, so the 2nd, 4th and 6th matmuls (k, o and the MLP's up projection) run again in
backward (torchtitan parallelize_llama.py ``_custom_policy``: "Saves output of all compute ops,
except every second mm", at 0413364 and 9dec370)."""


def normalize_checkpointing(activation_checkpointing: bool | str | None) -> str:
    """``False``/``"none"`` -> ``none``, ``True``/``"full"`` -> ``full``, ``"selective"``.

    Example:
        >>> normalize_checkpointing(True), normalize_checkpointing("Selective")
        ('full', 'selective')
    """
    if activation_checkpointing is None or isinstance(activation_checkpointing, bool):
        return "full" if activation_checkpointing else "none"
    key = str(activation_checkpointing).strip().lower()
    key = {"true": "full", "false": "none", "off": "none", "on": "full"}.get(key, key)
    if key not in CHECKPOINTING:
        raise ValueError(f"unknown activation_checkpointing {activation_checkpointing!r}; "
                         f"one of {', '.join(CHECKPOINTING)} (or a bool)")
    return key


def activation_bytes_per_token_per_layer(shape: ModelShape, *, dtype_bytes: int = 2,
                                         checkpointing: str = "none", attention: str = "sdpa",
                                         seq_len: int = 2048) -> float:
    """Bytes one block saves for backward, per token (Korthikanti et al. 2022, Sec. 4.1).

    What the Hugging Face Llama block keeps (p = dtype bytes, h hidden, kv = kv heads x
    head_dim, i = MLP width, a = heads):

    - two RMSNorms: the fp32 upcast input (4h each), the normalised bf16 value the weight
      multiplies (p h) and the output (p h, the input of q/k/v and of gate/up);
    - attention: q, k, v as SDPA saves them, at all heads (``repeat_kv`` expands k and v, so
      grouped-query attention saves as much as multi-head: 3 p h), the SDPA output and its
      contiguous copy into o_proj (2 p h), one more p h the tracker counts per block that we
      do not attribute, and the fp32 log-sum-exp (4 a); RoPE multiplies by constant cos/sin
      and saves nothing large; no s x s matrix with SDPA / FlashAttention;
    - SwiGLU MLP: gate, up, silu(gate) and their product (4 p i).

    With a fused RMSNorm (torchtitan's ``fused_rmsnorm``: ``arch.fused_norm``) each norm keeps
    its bf16 input instead of the fp32 upcast and the normalised copy: 4 h bytes less per
    norm.

    That is 49.5 h bytes for Llama-2-7B (41.5 h with the fused norm). PyTorch's FSDP2 memory tracker on the real HF model
    measures 50.0 h per layer for a multi-head h = 1024 block and the same bytes with 4x
    fewer kv heads (docs/validation.md, memory section), which this count follows. MPT (llm-foundry) keeps less:
    bf16 LayerNorms (input, output: 2 p h each), fused Wqkv output (3 p h), the flash output
    and its o_proj input (2 p h), GELU input and output (2 p 4h): 17 p h = 34 h bytes, which is
    Korthikanti's 34 s b h (their dropout masks out, no s x s term).

    ``attention="eager"`` adds the materialised scores HF's eager path keeps: the fp32
    softmax output and its bf16 copy, (4 + p) a s bytes per token (Korthikanti's 5 a s / h
    term in bf16). ``checkpointing="selective"`` keeps only the matmul outputs and the block
    input (Korthikanti Sec. 4.3: recompute the attention core and pointwise ops); ``full``
    is handled by :func:`activation_memory_gb`.

    Example:
        >>> from helper.sizes import parse_model_size
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("llama-2-7b")) / 4096, 1)
        49.5
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("mpt-7b")) / 4096, 1)
        34.0
    """
    a = shape.arch
    p = float(dtype_bytes)
    h, i = float(a.hidden), float(a.intermediate)
    kv = float(a.n_kv_heads * a.head_dim)
    scores = (4.0 + p) * a.n_heads * float(seq_len) if attention == "eager" else 0.0
    if checkpointing == "selective_op":  # block input, q, v, SDPA out (+ lse), MLP gate, down out
        if a.family == "mpt":
            raise ValueError("selective_op is torchtitan's Llama policy; MPT has no such mode")
        return p * (h + h + kv + h + i + h) + 4 * a.n_heads
    if checkpointing == "selective":  # block input, q/k/v, o_proj out, MLP up (and gate), down out
        mlp_outs = 2 * i if a.family == "llama" else i
        return p * (h + (h + 2 * kv) + h + mlp_outs + h)
    if a.family == "mpt":
        return p * (2 * h + 2 * h + (h + 2 * kv) + 2 * h + 2 * i) + 4 * a.n_heads + scores
    # Per RMSNorm: HF keeps the fp32 upcast input (4h) and the normalised bf16 value the weight
    # multiplies (p h); a fused kernel (``arch.fused_norm``) keeps only its bf16 input (p h).
    # Both keep the output the next matmuls save (p h).
    norms = 2 * ((p * h if a.fused_norm else 4 * h + p * h) + p * h)
    attention_b = 3 * p * h + 2 * p * h + p * h + 4 * a.n_heads
    mlp = 4 * p * i
    return norms + attention_b + mlp + scores


def activation_memory_gb(shape: ModelShape, *, micro_batch: int, seq_len: int,
                         activation_checkpointing: bool | str, dtype_bytes: int = 2,
                         attention: str = "sdpa") -> dict[str, float]:
    """Activation memory of one micro-batch, GB: ``blocks``, ``logits``, ``total``.

    Without checkpointing every block keeps its activations and the loss's logits come on
    top (the peak is at the loss). With full (per-block) checkpointing each block keeps only
    its bf16 input (Korthikanti et al. 2022, Sec. 4.2: 2 s b h L) and the peak is the larger
    of the loss's logits and one block recomputed in backward, not their sum: PyTorch's
    FSDP2 memory tracker on the trial's model puts the peak at the loss, with the logits but
    no recomputed block (docs/validation.md). Selective checkpointing keeps the matmul outputs
    of every block (see :func:`activation_bytes_per_token_per_layer`).
    """
    mode = normalize_checkpointing(activation_checkpointing)
    tokens = float(micro_batch) * float(seq_len)
    per_layer = activation_bytes_per_token_per_layer(shape, dtype_bytes=dtype_bytes, attention=attention,
                                                     seq_len=seq_len)
    layers = shape.arch.n_layers
    logit_bytes = _LOGIT_BYTES_BF16 if dtype_bytes == 2 else _LOGIT_BYTES_FP32
    if shape.arch.family == "mpt":
        logit_bytes = _LOGIT_BYTES_FUSED
    logits = tokens * shape.arch.vocab * logit_bytes
    if mode == "full":
        kept = tokens * layers * dtype_bytes * shape.arch.hidden
        transient = max(logits, tokens * per_layer)
    elif mode in ("selective", "selective_op"):
        kept_per_layer = activation_bytes_per_token_per_layer(shape, dtype_bytes=dtype_bytes,
                                                              checkpointing=mode)
        kept = tokens * layers * kept_per_layer
        transient = max(logits, tokens * (per_layer - kept_per_layer))
    else:
        kept, transient = tokens * layers * per_layer, logits
    backward = (kept if mode != "none" else 0.0) + tokens * per_layer  # one block's backward live
    return {"blocks": kept / GB, "logits": logits / GB, "total": (kept + transient) / GB,
            "backward": backward / GB}


def estimate_memory(model_size: float | int | str | ModelShape, gpu_count: int = 1, *,
                    sharding: str = "zero3", micro_batch: int | None = None,
                    seq_len: int | None = None, activation_checkpointing: bool | str = False,
                    grad_accum: int = 1, reshard_after_forward: bool = True,
                    reduce_scatter_every_micro_step: bool = False, reduce_dtype_bytes: int = 4,
                    gpu: str | GpuSpec = "H100-80GB", attention: str = "sdpa",
                    method: str = "analytic", memory_scale: float = 1.0) -> dict[str, float]:
    """Peak memory per GPU, GB (1e9 bytes), by part.

    Args:
        model_size: ``7e9``, ``"7b"``, ``"13B"``, a preset name (see ``parse_model_size``).
        gpu_count: GPUs the states are sharded over (all of them: FSDP/ZeRO over the world).
        sharding: ``ddp``, ``zero1``, ``zero2``, ``zero3`` (``fsdp`` = ``zero3``).
        micro_batch: sequences per GPU per forward; activations are 0 unless it and
            ``seq_len`` are given.
        seq_len: tokens per sequence.
        activation_checkpointing: ``False``/``"none"``, ``True``/``"full"`` (per-block
            recomputation), ``"selective"`` (keep matmul outputs, recompute the rest) or
            ``"selective_op"`` (torchtitan's op-level policy; see ``CHECKPOINTING``).
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
        attention: ``sdpa`` (flash / memory-efficient: no s x s scores kept) or ``eager``.
        method: ``analytic`` (the formulas here) or ``trace``: run PyTorch's FSDP2 memory
            tracker on fake tensors over the trial's real model (needs torch and
            transformers; zero2/zero3 only; see :mod:`helper.memory_trace`). Both add the same
            framework and fragmentation allowances.
        memory_scale: calibrated correction on the per-step memory (activations, gathered
            blocks, buffers), ``memory_scale`` of a calibration (``tuner distill`` fits it
            from trials' ``peak_mem_gib``); 1.0 = uncorrected.

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
    mode = normalize_checkpointing(activation_checkpointing)
    if attention not in ("sdpa", "eager"):
        raise ValueError(f"attention must be sdpa or eager, got {attention!r}")
    if method == "trace":
        return _traced(shape, gpu_count, stage=stage, micro_batch=micro_batch, seq_len=seq_len,
                       mode=mode, grad_accum=grad_accum, reshard_after_forward=reshard_after_forward,
                       attention=attention, spec=spec)
    if method != "analytic":
        raise ValueError(f"method must be analytic or trace, got {method!r}")
    static = static_memory_gb(shape.n_params, gpu_count, stage)
    p = spec.compute_dtype_bytes

    activations = activations_bwd = 0.0
    if micro_batch is not None and seq_len is not None:
        if micro_batch < 1 or seq_len < 1:
            raise ValueError(f"micro_batch and seq_len must be >= 1, got {micro_batch}, {seq_len}")
        act = activation_memory_gb(shape, micro_batch=micro_batch, seq_len=seq_len,
                                   activation_checkpointing=mode, dtype_bytes=p, attention=attention)
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
    if grad_accum > 1 and not reduce_scatter_every_micro_step and stage in ("zero2", "zero3") \
            and gpu_count > 1:
        accum = shape.n_params * reduce_dtype_bytes / GB

    # Under accumulation the gradients of the earlier micro-batches are live at every later
    # micro-batch's loss: sharded ones when FSDP2 reduce-scatters every micro-batch, the full
    # ones under DDP / zero1. Only FSDP2's no-sync accumulation keeps no sharded gradient until
    # the last micro-batch (its unsharded buffer is ``accum`` above).
    grads_live = grad_accum > 1 and (reduce_scatter_every_micro_step or stage in ("ddp", "zero1"))
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
