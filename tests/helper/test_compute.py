"""helper.compute: FLOPs per token, what checkpointing recomputes, and the matmul efficiency curve."""

from __future__ import annotations

import pytest

from helper import flops_per_token, parse_model_size
from helper.calibration import resolve_constants
from helper.compute import compute_seconds, matmul_and_attention_flops
from helper.throughput import plan_step


def test_flops_per_token_is_6n_plus_attention_and_checkpointing_adds_a_forward():
    shape = parse_model_size("llama-2-7b")
    n_matmul = shape.n_params - 32000 * 4096
    expected = 6 * n_matmul + 12 * 32 * 4096 * 2048
    assert flops_per_token(shape, 2048) == pytest.approx(expected)
    assert flops_per_token(shape, 2048, activation_checkpointing=True) == pytest.approx(expected * 8 / 6)


def test_wider_models_and_fuller_micro_batches_use_the_tensor_cores_better():
    consts, _ = resolve_constants(None, "H100-80GB")
    narrow, wide = plan_step("mpt-125m", 8, micro_batch=8), plan_step("mpt-3b", 8, micro_batch=8)
    # seconds per matmul FLOP: the narrow model's GEMMs are slower per FLOP
    per_flop = [compute_seconds(p, consts)[0] / p.matmul_flops_per_micro_step for p in (narrow, wide)]
    assert per_flop[0] > per_flop[1]
    small, big = plan_step("7b", 8, micro_batch=1, seq_len=512), plan_step("7b", 8, micro_batch=8, seq_len=512)
    per_flop = [compute_seconds(p, consts)[0] / p.matmul_flops_per_micro_step for p in (small, big)]
    assert per_flop[0] > per_flop[1]


def test_compute_module_doctests_run():
    import doctest

    import helper.compute
    result = doctest.testmod(helper.compute)
    assert result.failed == 0 and result.attempted > 0


def test_op_level_ac_recomputes_the_k_o_and_up_matmuls_not_attention():
    from helper.sizes import parse_model_size

    shape = parse_model_size("llama-3-8b")
    a = shape.arch
    mm0, att0 = matmul_and_attention_flops(shape, 8192)
    mm, att = matmul_and_attention_flops(shape, 8192, checkpointing="selective_op")
    kv = a.n_kv_heads * a.head_dim
    again = a.hidden * kv + a.hidden ** 2 + a.hidden * a.intermediate  # wk, wo, w3 per block
    assert att == att0  # SDPA's output is saved: no attention recompute
    assert mm - mm0 == pytest.approx(2 * a.n_layers * again, rel=1e-3)
    assert matmul_and_attention_flops(shape, 8192, checkpointing="selective")[1] > att0
