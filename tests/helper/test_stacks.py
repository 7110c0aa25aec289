"""helper.stacks: named training stacks, and what each changes in the memory and throughput models."""

import dataclasses

import pytest

from helper import STACKS, estimate_memory, get_stack, predict_step_time
from helper.sizes import parse_model_size
from helper.stacks import Stack, default_stack


def test_every_preset_is_cited_and_valid():
    assert {"hf-sdpa", "hf-eager", "torchtitan", "llm-foundry", "fms-fsdp", "megatron-fused"} <= set(STACKS)
    for stack in STACKS.values():
        assert len(stack.source) > 40, stack.name


def test_unknown_stack_and_bad_field_are_named():
    with pytest.raises(ValueError, match="unknown stack 'deepspeed'"):
        get_stack("deepspeed")
    with pytest.raises(ValueError, match="accumulation"):
        Stack(name="x", accumulation="sometimes")


def test_default_stack_is_the_workloads_for_llama_and_llm_foundry_for_mpt():
    assert default_stack(parse_model_size("llama-2-7b")).name == "hf-sdpa"
    assert default_stack(parse_model_size("mpt-7b")).name == "llm-foundry"
    kw = dict(micro_batch=4, seq_len=2048, grad_accum=4, activation_checkpointing=True)
    assert estimate_memory("7b", 32, **kw) == estimate_memory("7b", 32, stack="hf-sdpa", **kw)


def test_accumulation_buffer_dtype_decides_feasibility():
    """The issue's case: 7B on 32 H100 at micro-batch 4 with accumulation. FSDP2's fp32 no-sync
    buffer holds 4 B x 7e9 = 28 GB; a stack accumulating bf16 holds half; one that reduce-scatters
    every micro-batch holds none."""
    kw = dict(micro_batch=4, seq_len=2048, grad_accum=4, activation_checkpointing=False)
    fp32 = estimate_memory("7b", 32, **kw)
    bf16 = estimate_memory("7b", 32, stack=dataclasses.replace(get_stack("hf-sdpa"), accum_dtype_bytes=2), **kw)
    shards = estimate_memory("7b", 32, stack="llm-foundry", **kw)
    assert fp32["grad_accum_buffer"] == pytest.approx(28.0)
    assert bf16["grad_accum_buffer"] == pytest.approx(14.0)
    assert shards["grad_accum_buffer"] == 0.0
    assert fp32["total"] > 80 > shards["total"]


def test_megatron_keeps_one_persistent_fp32_gradient_buffer():
    m = estimate_memory("7b", 8, sharding="zero1", stack="megatron-fused")
    assert m["gradients"] == 0.0 and m["grad_accum_buffer"] == pytest.approx(28.0)


def test_true_checkpoints_with_the_stacks_policy():
    kw = dict(micro_batch=2, seq_len=8192, activation_checkpointing=True)
    titan = estimate_memory("llama-3-8b", 8, stack="torchtitan", **kw)
    op = estimate_memory("llama-3-8b", 8, activation_checkpointing="selective_op", micro_batch=2, seq_len=8192)
    full = estimate_memory("llama-3-8b", 8, **kw)
    assert titan["activations"] == pytest.approx(op["activations"]) and titan["activations"] > full["activations"]
    assert predict_step_time("llama-3-8b", 8, stack="torchtitan", **kw)["compute_s"] < \
        predict_step_time("llama-3-8b", 8, **kw)["compute_s"]  # selective op recomputes less than full


def test_eager_stack_keeps_the_scores_and_fused_stacks_keep_less():
    kw = dict(micro_batch=2, seq_len=4096, activation_checkpointing=False)
    act = {name: estimate_memory("llama-2-7b", 8, stack=name, **kw)["activations"] for name in STACKS}
    assert act["hf-eager"] > act["hf-sdpa"] > act["torchtitan"] * 0.99
    assert act["megatron-fused"] < act["fms-fsdp"] < act["hf-sdpa"]


def test_reduce_dtype_halves_the_reduce_scatter_bytes():
    fp32 = dataclasses.replace(get_stack("fms-fsdp"), reduce_dtype_bytes=4, accum_dtype_bytes=4)
    kw = dict(micro_batch=1, grad_accum=4)
    bf16_s = predict_step_time("7b", 64, stack="fms-fsdp", **kw)["comm_s"]
    fp32_s = predict_step_time("7b", 64, stack=fp32, **kw)["comm_s"]
    assert bf16_s < fp32_s


def test_the_workload_states_a_stack_helper_knows_and_hf_sdpa_matches_its_code():
    from pathlib import Path

    from objectives.trial_config import ATTENTIONS
    from objectives.trial_config import STACKS as WORKLOAD

    assert set(WORKLOAD) == set(ATTENTIONS) and set(WORKLOAD.values()) <= set(STACKS)
    root = Path(__file__).resolve().parents[2] / "objectives"
    parallel, loop = (root / "parallel.py").read_text(), (root / "fsdp_finetune.py").read_text()
    hf = get_stack("hf-sdpa")
    assert hf.reduce_dtype_bytes == 4 and "reduce_dtype=torch.float32" in parallel
    assert hf.accumulation == "no_sync" and "set_requires_gradient_sync(micro == grad_accum - 1)" in loop
    assert hf.checkpointing == "full" and "checkpoint_wrapper(block)" in parallel
