"""Activation memory per token and layer, for a model shape run by a training stack.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198), Sec. 4.1: count the bytes every op saves for backward, per token and
layer. Their GPT block gives s*b*h*(34 + 5*a*s/h); the 5as/h term is the materialised
attention matrix, which SDPA/FlashAttention never stores. What a block keeps depends on the
code that runs it as much as on the architecture: fused norms keep their bf16 input, not an
fp32 copy; flash-attn keeps k and v at kv width; a fused SwiGLU keeps no silu(gate); a fused
cross-entropy keeps bf16 logits. :class:`helper.stacks.Stack` names those choices.
"""

from __future__ import annotations

from helper.sizes import ModelShape
from helper.stacks import Stack, resolve_stack

__all__ = ["CHECKPOINTING", "normalize_checkpointing", "activation_bytes_per_token_per_layer",
           "activation_memory_gb", "logit_bytes", "effective_attention"]

GB = 1e9

# Bytes per logit live at the loss's peak, bf16 compute: the bf16 logits (2), the fp32
# log-softmax cross_entropy saves (4), and in backward its fp32 gradient (4) and the bf16
# gradient of the logits (2); the HF loss's fp32 upcast copy (4) is freed once the forward
# returns. 12 B: the FSDP2 tracker on the trial's model shows 12.6 (docs/validation.md).
_LOGIT_BYTES_UNFUSED = 12.0
# A fused cross-entropy (flash-attn's, llm-foundry's loss_fn 'fused_crossentropy'; Megatron's
# cross_entropy_loss_fusion) keeps the bf16 logits and writes a bf16 gradient (2 + 2).
_LOGIT_BYTES_FUSED = 4.0

CHECKPOINTING = ("none", "selective", "selective_op", "full")
"""``selective`` is Korthikanti et al.'s (keep the matmul outputs, recompute the attention core);
``selective_op`` is torchtitan's op-level policy (``mode = "selective"``, ``selective_ac_option =
"op"``): inside each block it saves the outputs of SDPA and of every other matmul and recomputes
the rest, so the 2nd, 4th and 6th matmuls (k, o and the MLP's up projection) run again in
backward (torchtitan parallelize_llama.py ``_custom_policy``: "Saves output of all compute ops,
except every second mm", at 0413364 and 9dec370)."""


def normalize_checkpointing(activation_checkpointing: bool | str | None, stack: Stack | None = None) -> str:
    """``False``/``"none"`` -> ``none``; ``True`` -> the stack's policy (``full`` without one).

    Example:
        >>> from helper.stacks import get_stack
        >>> normalize_checkpointing(True), normalize_checkpointing("Selective")
        ('full', 'selective')
        >>> normalize_checkpointing(True, get_stack("torchtitan"))
        'selective_op'
    """
    on = "full" if stack is None else stack.checkpointing
    if activation_checkpointing is None or isinstance(activation_checkpointing, bool):
        return on if activation_checkpointing else "none"
    key = str(activation_checkpointing).strip().lower()
    key = {"true": on, "on": on, "false": "none", "off": "none"}.get(key, key)
    if key not in CHECKPOINTING:
        raise ValueError(f"unknown activation_checkpointing {activation_checkpointing!r}; "
                         f"one of {', '.join(CHECKPOINTING)} (or a bool)")
    return key


def effective_attention(stack: Stack, attention: str | None) -> str:
    """The attention kernel that runs: the stack's, unless ``attention="eager"`` forces eager.

    ``sdpa`` or ``flash`` as an argument mean "not eager": the stack's own fused kernel runs.

    Example:
        >>> from helper.stacks import get_stack
        >>> effective_attention(get_stack("llm-foundry"), "sdpa"), effective_attention(get_stack("hf-sdpa"), "eager")
        ('flash', 'eager')
    """
    if attention is None:
        return stack.attention
    if attention not in ("sdpa", "flash", "eager"):
        raise ValueError(f"attention must be sdpa, flash or eager, got {attention!r}")
    if attention == "eager":
        return "eager"
    return stack.attention if stack.attention != "eager" else attention


def logit_bytes(stack: Stack) -> float:
    """Bytes per logit live at the loss's peak (bf16 compute)."""
    return _LOGIT_BYTES_FUSED if stack.fused_loss else _LOGIT_BYTES_UNFUSED


def activation_bytes_per_token_per_layer(shape: ModelShape, *, dtype_bytes: int = 2,
                                         checkpointing: str = "none", attention: str | None = None,
                                         seq_len: int = 2048, stack: str | Stack | None = None) -> float:
    """Bytes one block saves for backward, per token (Korthikanti et al. 2022, Sec. 4.1).

    What a block keeps (p = dtype bytes, h hidden, kv = kv heads x head_dim, i = MLP width,
    a = heads), by the stack's choices:

    - each of the two norms: its output (p h, the input of q/k/v and of gate/up) and, unfused
      (Hugging Face's ``LlamaRMSNorm``), the fp32 upcast input (4h) and the normalised bf16
      value the weight multiplies (p h); fused (``stack.fused_norm``, torchtitan's
      ``fused_rmsnorm``: ``arch.fused_norm``, MPT's ``low_precision_layernorm``), its bf16
      input (p h);
    - attention, ``sdpa`` (PyTorch SDPA after ``repeat_kv``): q, k, v at all heads (3 p h), the
      output and its contiguous copy into o_proj (2 p h), one more p h the FSDP2 tracker counts
      per HF block that we do not attribute, and the fp32 log-sum-exp (4 a); ``flash``
      (flash-attn with native kv heads, MPT's fused Wqkv): q, k, v at kv width (p (h + 2 kv)),
      output and o_proj input (2 p h) and 4 a; ``eager`` adds the fp32 softmax output and its
      bf16 copy of the s x s scores, (4 + p) a s (Korthikanti's 5 a s / h term in bf16);
      RoPE multiplies by constant cos/sin and saves nothing large;
    - MLP: SwiGLU keeps gate, up, silu(gate) and their product (4 p i), fused (``fused_mlp``)
      gate, up and the product (3 p i); MPT's GELU its input and output (2 p i).

    That is 49.5 h bytes for Llama-2-7B under ``hf-sdpa``: PyTorch's FSDP2 memory tracker on
    the real HF model measures 50.0 h per layer for a multi-head h = 1024 block and the same
    bytes with 4x fewer kv heads (docs/validation.md). MPT under ``llm-foundry``: 17 p h = 34 h
    bytes, Korthikanti's 34 s b h (their dropout masks out, no s x s term).
    ``checkpointing="selective"`` keeps only the matmul outputs and the block input
    (Korthikanti Sec. 4.3); ``selective_op`` torchtitan's op policy; ``full`` is handled by
    :func:`activation_memory_gb`.

    Example:
        >>> from helper.sizes import parse_model_size
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("llama-2-7b")) / 4096, 1)
        49.5
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("mpt-7b")) / 4096, 1)
        34.0
        >>> round(activation_bytes_per_token_per_layer(parse_model_size("llama-2-7b"), stack="megatron-fused") / 4096, 1)
        34.2
    """
    st = resolve_stack(stack, shape)
    a = shape.arch
    p = float(dtype_bytes)
    h, i = float(a.hidden), float(a.intermediate)
    kv = float(a.n_kv_heads * a.head_dim)
    kernel = effective_attention(st, attention)
    if checkpointing == "selective_op":  # block input, q, v, SDPA out (+ lse), MLP gate, down out
        if a.family == "mpt":
            raise ValueError("selective_op is torchtitan's Llama policy; MPT has no such mode")
        return p * (h + h + kv + h + i + h) + 4 * a.n_heads
    if checkpointing == "selective":  # block input, q/k/v, o_proj out, MLP up (and gate), down out
        mlp_outs = 2 * i if a.family == "llama" else i
        return p * (h + (h + 2 * kv) + h + mlp_outs + h)
    fused_norm = st.fused_norm or a.fused_norm or a.family == "mpt"  # MPT: low_precision_layernorm
    norms = 2 * ((p * h if fused_norm else 4 * h + p * h) + p * h)
    layout = "flash" if kernel == "flash" or (kernel == "eager" and st.attention == "flash") else "sdpa"
    if layout == "flash":
        attention_b = p * (h + 2 * kv) + 2 * p * h + 4 * a.n_heads
    else:
        attention_b = 3 * p * h + 2 * p * h + p * h + 4 * a.n_heads
    scores = (4.0 + p) * a.n_heads * float(seq_len) if kernel == "eager" else 0.0
    if a.family == "mpt":
        mlp = 2 * p * i
    else:
        mlp = (3 if st.fused_mlp else 4) * p * i
    return norms + attention_b + mlp + scores


def activation_memory_gb(shape: ModelShape, *, micro_batch: int, seq_len: int,
                         activation_checkpointing: bool | str, dtype_bytes: int = 2,
                         attention: str | None = None, stack: str | Stack | None = None) -> dict[str, float]:
    """Activation memory of one micro-batch, GB: ``blocks``, ``logits``, ``total``, ``backward``.

    Without checkpointing every block keeps its activations and the loss's logits come on
    top (the peak is at the loss). With full (per-block) checkpointing each block keeps only
    its bf16 input (Korthikanti et al. 2022, Sec. 4.2: 2 s b h L) and the peak is the larger
    of the loss's logits and one block recomputed in backward, not their sum: PyTorch's
    FSDP2 memory tracker on the trial's model puts the peak at the loss, with the logits but
    no recomputed block (docs/validation.md). Selective checkpointing keeps the matmul outputs
    of every block (see :func:`activation_bytes_per_token_per_layer`). ``True`` means the
    stack's own policy (:attr:`helper.stacks.Stack.checkpointing`).
    """
    st = resolve_stack(stack, shape)
    mode = normalize_checkpointing(activation_checkpointing, st)
    tokens = float(micro_batch) * float(seq_len)
    per_layer = activation_bytes_per_token_per_layer(shape, dtype_bytes=dtype_bytes, attention=attention,
                                                     seq_len=seq_len, stack=st)
    layers = shape.arch.n_layers
    logits = tokens * shape.arch.vocab * logit_bytes(st)
    if mode == "full":
        kept = tokens * layers * dtype_bytes * shape.arch.hidden
        transient = max(logits, tokens * per_layer)
    elif mode in ("selective", "selective_op"):
        kept_per_layer = activation_bytes_per_token_per_layer(shape, dtype_bytes=dtype_bytes,
                                                              checkpointing=mode, stack=st)
        kept = tokens * layers * kept_per_layer
        transient = max(logits, tokens * (per_layer - kept_per_layer))
    else:
        kept, transient = tokens * layers * per_layer, logits
    backward = (kept if mode != "none" else 0.0) + tokens * per_layer  # one block's backward live
    return {"blocks": kept / GB, "logits": logits / GB, "total": (kept + transient) / GB,
            "backward": backward / GB}
