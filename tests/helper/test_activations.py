"""helper.activations: bytes saved for backward per token and layer, by architecture and stack."""

import dataclasses

import pytest

from helper.activations import activation_bytes_per_token_per_layer, activation_memory_gb, effective_attention
from helper.sizes import parse_model_size
from helper.stacks import get_stack

LLAMA = parse_model_size("llama-2-7b")  # h 4096, i 11008, 32 heads
GQA = parse_model_size("llama-3-8b")    # 8 kv heads


def test_hf_block_is_the_measured_49_5_h_and_mpt_is_korthikanti_34_h():
    h, i = 4096, 11008
    assert activation_bytes_per_token_per_layer(LLAMA) == 2 * (4 * h + 2 * h + 2 * h) + 12 * h + 4 * 32 + 8 * i
    assert activation_bytes_per_token_per_layer(parse_model_size("mpt-7b")) == pytest.approx(34 * 4096 + 4 * 32)


def test_each_fusion_removes_what_its_kernel_no_longer_saves():
    h, i, kv = 4096.0, 14336.0, 1024.0
    base = activation_bytes_per_token_per_layer(GQA, stack="hf-sdpa")
    fused_norm = activation_bytes_per_token_per_layer(GQA, stack=dataclasses.replace(get_stack("hf-sdpa"),
                                                                                     fused_norm=True))
    assert base - fused_norm == 8 * h  # two fp32 upcasts of 4 h bytes each
    flash = activation_bytes_per_token_per_layer(GQA, stack="fms-fsdp")
    assert base - flash == 2 * (2 * h - 2 * kv) + 2 * h  # k, v at kv width; no extra HF copy
    mega = activation_bytes_per_token_per_layer(GQA, stack="megatron-fused")
    assert flash - mega == 8 * h + 2 * i  # fused norms, and no silu(gate)


def test_eager_adds_the_scores_on_the_stacks_layout():
    s = 4096
    for name in ("hf-sdpa", "llm-foundry"):
        shape = LLAMA if name == "hf-sdpa" else parse_model_size("mpt-7b")
        eager = activation_bytes_per_token_per_layer(shape, stack=name, attention="eager", seq_len=s)
        assert eager - activation_bytes_per_token_per_layer(shape, stack=name, seq_len=s) == 6 * 32 * s
    assert effective_attention(get_stack("hf-eager"), None) == "eager"
    assert effective_attention(get_stack("llm-foundry"), "sdpa") == "flash"


def test_fused_loss_keeps_a_third_of_the_logit_bytes():
    kw = dict(micro_batch=1, seq_len=2048, activation_checkpointing=False)
    assert activation_memory_gb(LLAMA, stack="megatron-fused", **kw)["logits"] * 3 == pytest.approx(
        activation_memory_gb(LLAMA, **kw)["logits"])
