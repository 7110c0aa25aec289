"""The training stack: what a framework does to the same model that changes memory or time.

The same Llama or MPT block keeps different bytes for backward, and accumulates its gradients
differently, depending on the code that runs it. A :class:`Stack` names those choices; the
presets in :data:`STACKS` are the stacks users run, each with the source it is read from.
``stack=None`` everywhere means :func:`default_stack`: ``hf-sdpa`` (tuner's own workload,
``objectives/fsdp_finetune.py``) for Llama-family shapes, ``llm-foundry`` for MPT shapes.

Example:
    >>> get_stack("torchtitan").checkpointing, get_stack("llm-foundry").reduce_dtype_bytes
    ('selective_op', 2)
    >>> from helper.sizes import parse_model_size
    >>> default_stack(parse_model_size("llama-2-7b")).name
    'hf-sdpa'
"""

from __future__ import annotations

from dataclasses import dataclass

from helper.sizes import ModelShape

__all__ = ["Stack", "STACKS", "ACCUMULATIONS", "ATTENTIONS", "get_stack", "default_stack", "resolve_stack",
           "DEFAULT_STACK"]

ATTENTIONS = ("sdpa", "flash", "eager")
"""``sdpa``: PyTorch SDPA after ``repeat_kv`` (Hugging Face, torchtitan): q, k, v saved at all
heads; ``flash``: flash-attn's kernel with native grouped-query heads (k, v saved at kv width);
``eager``: Hugging Face's eager path, the s x s scores materialised."""

ACCUMULATIONS = ("no_sync", "reduce_scatter", "persistent")
"""How gradients accumulate over micro-batches:

- ``no_sync``: FSDP2's ``set_requires_gradient_sync(False)`` on all but the last micro-batch:
  unsharded gradients live in an ``accum_dtype_bytes`` buffer until it (PyTorch PR #126166);
- ``reduce_scatter``: reduce-scatter every micro-batch and accumulate the shards (Composer's
  FSDP1 in llm-foundry; FSDP2 with ``reduce_scatter_every_micro_step``): no unsharded buffer;
- ``persistent``: Megatron-LM's contiguous ``main_grad`` buffer, unsharded, always allocated
  (``megatron/core/distributed/param_and_grad_buffer.py``): the gradients live only there.
"""


@dataclass(frozen=True, kw_only=True)
class Stack:
    """One training stack, as the memory and throughput models read it."""

    name: str
    """Preset name (``hf-sdpa``...)."""
    attention: str = "sdpa"
    """Attention kernel, one of :data:`ATTENTIONS`."""
    fused_norm: bool = False
    """A fused RMSNorm/LayerNorm kernel that keeps its bf16 input (not an fp32 upcast copy and
    the normalised value, as Hugging Face's ``LlamaRMSNorm`` does)."""
    fused_mlp: bool = False
    """SwiGLU in one kernel: keeps gate and up (and the product for the down projection), not
    silu(gate) as well (Megatron-LM's ``bias_swiglu_impl``)."""
    fused_loss: bool = False
    """A fused cross-entropy on bf16 logits (flash-attn's ``CrossEntropyLoss``): 4 bytes per
    logit live at the loss, not 12 (bf16 logits + fp32 log-softmax + their gradients)."""
    checkpointing: str = "full"
    """What ``activation_checkpointing=True`` means in this stack: ``full`` (every block
    recomputed), ``selective`` (Korthikanti's) or ``selective_op`` (torchtitan's op policy)."""
    reduce_dtype_bytes: int = 4
    """Bytes per element of the gradient reduce-scatter / all-reduce (fp32 = 4, bf16 = 2)."""
    accumulation: str = "no_sync"
    """Gradient accumulation semantics, one of :data:`ACCUMULATIONS`."""
    accum_dtype_bytes: int = 4
    """Bytes per element of the unsharded accumulation buffer (``no_sync``, ``persistent``)."""
    dispatch_s_per_layer: float = 0.0
    """Host seconds to dispatch one block's forward and backward kernels (helper.dispatch: a
    micro-batch takes max(host, device)); 0: not modelled, the calibration's additive
    per-micro-batch overhead stands for it."""
    dispatch_recompute_share: float = 0.0
    """Extra host dispatch under full activation checkpointing, as a share of the forward and
    backward's (the forward dispatched again)."""
    source: str = ""
    """Where each field is read from."""

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"stack {self.name}: attention must be one of {', '.join(ATTENTIONS)}, "
                             f"got {self.attention!r}")
        if self.accumulation not in ACCUMULATIONS:
            raise ValueError(f"stack {self.name}: accumulation must be one of {', '.join(ACCUMULATIONS)}, "
                             f"got {self.accumulation!r}")
        if self.checkpointing not in ("full", "selective", "selective_op"):
            raise ValueError(f"stack {self.name}: checkpointing must be full, selective or selective_op, "
                             f"got {self.checkpointing!r}")
        if self.dispatch_s_per_layer < 0 or self.dispatch_recompute_share < 0:
            raise ValueError(f"stack {self.name}: dispatch_s_per_layer and dispatch_recompute_share must be >= 0")
        for field in ("reduce_dtype_bytes", "accum_dtype_bytes"):
            if getattr(self, field) not in (2, 4):
                raise ValueError(f"stack {self.name}: {field} must be 2 (bf16) or 4 (fp32)")


_HF_DISPATCH_S_PER_LAYER = 0.1416 / 22
"""tuner's workload on one H100 (docs/validation.md, "GPU check on one H100", 2026-11-27): a
micro-batch of llama-1b (22 blocks) took 0.169 s at micro-batch 1 and 0.162 s at 2, sdpa, and
0.173 s at 1, eager, where its GPU work is 0.045-0.080 s: the step less the optimizer and the
calibrated per-micro-step overhead (0.026 s) leaves 0.1426, 0.1356 and 0.1466 s of host
dispatch, mean 0.1416 s over 22 blocks. The host was that machine's CPU; a faster one
dispatches sooner (the H200 machine's: 0.122 s at micro-batch 1)."""
_HF_RECOMPUTE_SHARE = 0.2106 / 0.1416 - 1.0
"""Same machine, activation checkpointing on: 0.243 s at micro-batch 1, 0.231 s at 2 (0.2166 and
0.2046 s of dispatch, mean 0.2106 s): 1.49 times the dispatch without."""

STACKS: dict[str, Stack] = {s.name: s for s in (
    Stack(name="hf-sdpa", attention="sdpa", checkpointing="full", reduce_dtype_bytes=4,
          accumulation="no_sync", accum_dtype_bytes=4,
          dispatch_s_per_layer=_HF_DISPATCH_S_PER_LAYER, dispatch_recompute_share=_HF_RECOMPUTE_SHARE,
          source="tuner's workload (objectives/fsdp_finetune.py, objectives/parallel.py): Hugging Face "
                 "LlamaForCausalLM with attn_implementation 'sdpa' (repeat_kv, unfused LlamaRMSNorm, "
                 "the loss's fp32 upcast), checkpoint_wrapper per block, FSDP2 MixedPrecisionPolicy("
                 "param bf16, reduce fp32), set_requires_gradient_sync(False) but on the last micro-batch; "
                 "its FSDP2 accumulation buffer is in the reduce dtype (PyTorch PR #126166)"),
    Stack(name="hf-eager", attention="eager", checkpointing="full", reduce_dtype_bytes=4,
          accumulation="no_sync", accum_dtype_bytes=4,
          dispatch_s_per_layer=_HF_DISPATCH_S_PER_LAYER, dispatch_recompute_share=_HF_RECOMPUTE_SHARE,
          source="as hf-sdpa with attn_implementation 'eager' (transformers' eager_attention_forward: "
                 "fp32 softmax of the materialised s x s scores)"),
    Stack(name="torchtitan", attention="sdpa", fused_norm=False, checkpointing="selective_op",
          reduce_dtype_bytes=4, accumulation="no_sync", accum_dtype_bytes=4,
          source="pytorch/torchtitan: models/llama3/model.py (repeat_kv then F.scaled_dot_product_attention), "
                 "train_configs/llama3_8b.toml at 9dec370 (norm_type 'rmsnorm', activation_checkpoint "
                 "mode 'selective', selective_ac_option 'op'), config_manager.py mixed_precision_param "
                 "bfloat16 / mixed_precision_reduce float32, FSDP2 (torchtitan/parallelisms/parallelize_llama.py); "
                 "its April 2024 configs used norm_type 'fused_rmsnorm' (replace fused_norm=True)"),
    Stack(name="llm-foundry", attention="flash", fused_norm=True, fused_loss=True, checkpointing="full",
          reduce_dtype_bytes=2, accumulation="reduce_scatter", accum_dtype_bytes=2,
          source="mosaicml/llm-foundry: scripts/train/yamls/pretrain/mpt-*.yaml (attn_impl flash / triton, "
                 "low_precision_layernorm, loss_fn fused_crossentropy, fsdp_config mixed_precision PURE: "
                 "Composer's param/reduce/buffer bf16), Composer's FSDP1 reducing every micro-batch"),
    Stack(name="fms-fsdp", attention="flash", fused_norm=False, checkpointing="full",
          reduce_dtype_bytes=2, accumulation="reduce_scatter", accum_dtype_bytes=2,
          source="foundation-model-stack/fms-fsdp: fms_fsdp/policies/mixed_precision.py bfSixteen "
                 "(param and reduce bf16), ibm-fms LLaMA blocks on F.scaled_dot_product_attention with "
                 "the flash backend and native kv heads, FSDP1 HYBRID_SHARD in the README's table"),
    Stack(name="megatron-fused", attention="flash", fused_norm=True, fused_mlp=True, fused_loss=True,
          checkpointing="selective", reduce_dtype_bytes=4, accumulation="persistent", accum_dtype_bytes=4,
          source="NVIDIA/Megatron-LM: TransformerEngine fused LayerNorm/RMSNorm and flash attention, "
                 "bias_swiglu_fusion, cross_entropy_loss_fusion, recompute_granularity 'selective' "
                 "(Korthikanti et al. 2022), accumulate_allreduce_grads_in_fp32 into the contiguous "
                 "main_grad buffer (core/distributed/param_and_grad_buffer.py)"),
)}
"""Named stacks. ``dataclasses.replace(get_stack(name), ...)`` makes a variant (a Stack is
accepted wherever a name is)."""

DEFAULT_STACK = "hf-sdpa"
"""The stack of tuner's own trial workload."""


def get_stack(name: str | Stack) -> Stack:
    """The :class:`Stack` called ``name`` (case-insensitive); a Stack is returned as is.

    Raises:
        ValueError: unknown name; the message lists the presets.

    Example:
        >>> get_stack("HF-SDPA").attention
        'sdpa'
    """
    if isinstance(name, Stack):
        return name
    key = str(name).strip().lower()
    if key not in STACKS:
        raise ValueError(f"unknown stack {name!r}; one of {', '.join(STACKS)}")
    return STACKS[key]


def default_stack(shape: ModelShape) -> Stack:
    """The stack a model shape is run with when none is named: ``llm-foundry`` for MPT, else hf-sdpa."""
    return STACKS["llm-foundry" if shape.arch.family == "mpt" else DEFAULT_STACK]


def resolve_stack(stack: str | Stack | None, shape: ModelShape) -> Stack:
    """``stack`` as a :class:`Stack`, or the shape's :func:`default_stack` when None."""
    return default_stack(shape) if stack is None else get_stack(stack)
