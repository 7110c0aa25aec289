"""Model architecture presets, as plain numbers.

One table for the whole project: `objectives/` turns a preset into a `transformers`
LlamaConfig, `helper/` turns it into FLOPs and bytes. Kept free of torch and transformers so
`import helper` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelArch", "MODEL_PRESETS", "REFERENCE_ARCHS", "get_preset", "llama_config", "INIT_STD"]


@dataclass(frozen=True, kw_only=True)
class ModelArch:
    """A decoder-only Llama-style architecture."""

    name: str
    """Preset name, e.g. ``llama-2-7b``."""
    n_layers: int
    """Transformer blocks."""
    hidden: int
    """Model (residual stream) width."""
    n_heads: int
    """Attention (query) heads."""
    n_kv_heads: int
    """Key/value heads (fewer than ``n_heads`` means grouped-query attention)."""
    intermediate: int
    """SwiGLU MLP width."""
    vocab: int
    """Vocabulary size (embedding and output head are untied, as in Llama 2)."""
    max_seq_len: int
    """Context length the model was trained with."""
    family: str = "llama"
    """Block layout: ``llama`` (Hugging Face Llama: fp32-upcast RMSNorm, SwiGLU, untied head)
    or ``mpt`` (llm-foundry MPT: bf16 LayerNorm, fused Wqkv, GELU MLP, tied embeddings and a
    learned position embedding of ``max_seq_len`` rows)."""
    fused_norm: bool = False
    """RMSNorm as one fused kernel that saves only its bf16 input and the per-token rstd
    (torchtitan's ``norm_type = "fused_rmsnorm"``, ``TritonFusedRMSNorm.save_for_backward(x,
    weight, rstd)`` in torchtitan/models/norms.py at 0413364), instead of Hugging Face's
    fp32 upcast copy. Memory only: the FLOPs are the same."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def n_params(self) -> int:
        """Parameter count: embeddings + blocks + final norm + untied output head."""
        kv = self.n_kv_heads * self.head_dim
        attn = self.hidden * (2 * self.hidden + 2 * kv)  # q, o: h*h; k, v: h*kv
        if self.family == "mpt":  # up, down (no bias); LayerNorm weight only; tied wte + wpe
            block = attn + 2 * self.hidden * self.intermediate + 2 * self.hidden
            return (self.vocab + self.max_seq_len) * self.hidden + self.n_layers * block + self.hidden
        mlp = 3 * self.hidden * self.intermediate  # gate, up, down
        norms = 2 * self.hidden
        block = attn + mlp + norms
        return 2 * self.vocab * self.hidden + self.n_layers * block + self.hidden


# Sources: the config.json of each public checkpoint on the Hugging Face hub
# (meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-13b-hf, meta-llama/Llama-2-70b-hf,
# TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T for llama-1b, meta-llama/Meta-Llama-3-8B
# for llama-3-8b: the model of torchtitan's published FSDP benchmarks). `tiny` is ours: small
# enough that a 2-process FSDP2 step on CPU takes well under a second.
MODEL_PRESETS: dict[str, ModelArch] = {
    arch.name: arch
    for arch in (
        ModelArch(name="tiny", n_layers=2, hidden=128, n_heads=4, n_kv_heads=4,
                  intermediate=344, vocab=8000, max_seq_len=2048),
        ModelArch(name="llama-1b", n_layers=22, hidden=2048, n_heads=32, n_kv_heads=4,
                  intermediate=5632, vocab=32000, max_seq_len=2048),
        ModelArch(name="llama-2-7b", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32,
                  intermediate=11008, vocab=32000, max_seq_len=4096),
        ModelArch(name="llama-3-8b", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8,
                  intermediate=14336, vocab=128256, max_seq_len=8192),
        ModelArch(name="llama-2-13b", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40,
                  intermediate=13824, vocab=32000, max_seq_len=4096),
        ModelArch(name="llama-2-70b", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
                  intermediate=28672, vocab=32000, max_seq_len=4096),
    )
}


# MosaicML's MPT shapes, for the published llm-foundry benchmarks only (helper/published.py);
# objectives never builds them. Source: llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml
# (d_model, n_heads, n_layers, expansion_ratio 4, vocab_size 50368) at commit 8c8dd48f7216.
# With max_seq_len 2048, n_params matches the benchmark table's NumParams column within 0.1 %.
REFERENCE_ARCHS: dict[str, ModelArch] = {
    arch.name: arch
    for arch in (
        ModelArch(name=f"mpt-{size}", n_layers=layers, hidden=hidden, n_heads=heads, n_kv_heads=heads,
                  intermediate=4 * hidden, vocab=50368, max_seq_len=2048, family="mpt")
        for size, layers, hidden, heads in (("125m", 12, 768, 12), ("350m", 24, 1024, 16),
                                            ("760m", 24, 1536, 12), ("1b", 24, 2048, 16),
                                            ("3b", 32, 2560, 20), ("7b", 32, 4096, 32),
                                            ("13b", 40, 5120, 40), ("30b", 48, 7168, 56),
                                            ("70b", 80, 8192, 64))
    )
}


def get_preset(name: str) -> ModelArch:
    """The preset called ``name``; a ``KeyError`` that lists the known ones otherwise."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise KeyError(
            f"unknown model preset {name!r}; known: {', '.join(MODEL_PRESETS)}"
        ) from None


INIT_STD = 0.02
"""Std of the normal init of matrices and embeddings: HF LlamaConfig.initializer_range."""


def llama_config(arch: ModelArch, *, seq_len: int, vocab_size: int | None = None, attention: str | None = None):
    """A `transformers` LlamaConfig for ``arch``; the vocabulary grows to fit a tokenizer.
    ``attention`` (``sdpa`` or ``eager``) sets ``attn_implementation``; None keeps HF's default.

    ``transformers`` is imported here, on first use: ``import helper`` stays light. The trial
    workload (objectives.models) and the memory tracer (helper.memory_trace) build the same model.

    Example:
        >>> llama_config(get_preset("tiny"), seq_len=128).num_hidden_layers
        2
    """
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=max(arch.vocab, vocab_size or 0), hidden_size=arch.hidden,
        intermediate_size=arch.intermediate, num_hidden_layers=arch.n_layers,
        num_attention_heads=arch.n_heads, num_key_value_heads=arch.n_kv_heads,
        max_position_embeddings=max(arch.max_seq_len, seq_len),
        tie_word_embeddings=False,  # Llama 2/3 untie them; helper's n_params assumes so
        initializer_range=INIT_STD, use_cache=False,
        **({"attn_implementation": attention} if attention else {}))
