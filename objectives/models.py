"""Models for trials: a preset with random weights, or a local Hugging Face checkpoint.

Either way the model is built on the meta device (no memory), sharded by FSDP2, and only
then given storage, so a 7B model never sits whole on one rank:

    model = build_model(model_cfg)          # meta
    ... fully_shard(block) for each block, fully_shard(model) ...
    materialize(model, device)              # to_empty + random init of each rank's shard
    if model_cfg["path"]: load_pretrained(model, model_cfg["path"])   # rank 0 reads, broadcasts

Throughput does not depend on weight values, so presets (helper.presets) use random weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from helper.presets import INIT_STD, get_preset, llama_config
from objectives.trial_config import ATTENTIONS  # [model] attention: HF attn_implementation

__all__ = ["llama_config", "INIT_STD", "build_model", "transformer_blocks", "materialize", "load_pretrained",
           "count_params", "model_config", "ATTENTIONS"]


def model_config(model_cfg: Mapping[str, Any], *, vocab_size: int | None = None):
    """The `transformers` config of the spec's [model] section: a checkpoint's config.json
    (``path``, a local folder or a hub name) or a preset's LlamaConfig. Reads no weights, so
    the coordinator's preflight (tuner.study) calls it before any trial. ``attention``
    (:data:`ATTENTIONS`) chooses Hugging Face's attention implementation.

    Raises:
        ValueError: neither a path nor a known preset; a tokenizer larger than the
            checkpoint's vocabulary (token ids would fall outside the embedding).
        OSError: ``path`` is neither a local folder nor reachable on the hub.
    """
    from transformers import AutoConfig

    path, attention = model_cfg.get("path"), model_cfg.get("attention")
    if attention is not None and attention not in ATTENTIONS:
        raise ValueError(f"model.attention {attention!r}: one of {', '.join(ATTENTIONS)}")
    if path:
        config = AutoConfig.from_pretrained(path, **({"attn_implementation": attention} if attention else {}))
        config.use_cache = False
        if vocab_size and vocab_size > config.vocab_size:
            raise ValueError(f"model.path {path}: vocabulary {config.vocab_size} is smaller than the "
                             f"tokenizer's {vocab_size}; use the checkpoint's own tokenizer (data.tokenizer)")
        return config
    preset = model_cfg.get("preset")
    if not preset:
        raise ValueError("model: set `preset` or `path`")
    try:
        arch = get_preset(preset)
    except KeyError as exc:
        raise ValueError(f"model.preset: {exc.args[0]}") from None
    return llama_config(arch, seq_len=int(model_cfg["seq_len"]), vocab_size=vocab_size, attention=attention)


def build_model(model_cfg: Mapping[str, Any], *, vocab_size: int | None = None) -> nn.Module:
    """The model of the spec's [model] section, on the meta device (no storage yet).

    ``path`` (a local HF checkpoint directory) wins over ``preset``; its architecture comes
    from its config.json (:func:`model_config`) and its weights later from :func:`load_pretrained`.

    Raises:
        ValueError, OSError: as :func:`model_config`.
    """
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    config = model_config(model_cfg, vocab_size=vocab_size)
    with torch.device("meta"):
        if model_cfg.get("path"):
            return AutoModelForCausalLM.from_config(config)
        return LlamaForCausalLM(config)


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The decoder blocks (one FSDP2 unit and one checkpointing unit each)."""
    return list(model.get_decoder().layers)


def count_params(model: nn.Module) -> int:
    """Parameters of the whole model (global shapes, also when sharded or on meta)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device, *, seed: int = 0, std: float = INIT_STD) -> None:
    """Give a meta-built (usually already sharded) model storage on ``device``, randomly init.

    Llama-style init, as HF's ``LlamaPreTrainedModel._init_weights``: normal(0, std) for
    matrices and embeddings, ones for RMSNorm weights. Each rank fills only its own shard of
    a sharded (DTensor) parameter, from a generator seeded by (seed, rank): repeatable, and
    no DTensor random op (which gloo/CPU meshes only partly support). The rotary embedding
    is rebuilt because ``to_empty`` leaves its ``inv_freq`` buffer uninitialised.
    """
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + rank)
    for param in model.parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        if param.ndim >= 2:
            local.normal_(0.0, std, generator=gen)
        else:
            local.fill_(1.0)
    decoder = model.get_decoder()
    if hasattr(decoder, "rotary_emb"):
        decoder.rotary_emb = type(decoder.rotary_emb)(model.config).to(device)


def load_pretrained(model: nn.Module, path: str) -> None:
    """Load a local HF checkpoint into a materialised (sharded or plain) model.

    Under torch.distributed only rank 0 reads the checkpoint (on CPU); each rank receives
    just its shard by broadcast (``set_model_state_dict`` with ``broadcast_from_rank0``,
    the pattern of torchtitan and torchtune), so no other rank ever holds the whole model.
    """
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from transformers import AutoModelForCausalLM

    distributed = dist.is_available() and dist.is_initialized()
    full: dict[str, torch.Tensor] = {}
    if not distributed or dist.get_rank() == 0:
        full = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=distributed)
    set_model_state_dict(model, full, options=options)
