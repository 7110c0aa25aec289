"""helper.memory_trace: PyTorch's FSDP2 memory tracker on fake tensors, and method='trace'."""

from __future__ import annotations

import pytest

from helper import estimate_memory

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_trace_mode_rejects_what_it_cannot_trace():
    with pytest.raises(ValueError, match="FSDP2"):
        estimate_memory("tiny", 2, sharding="ddp", micro_batch=1, seq_len=64, method="trace")
    with pytest.raises(ValueError, match="micro_batch and seq_len"):
        estimate_memory("tiny", 2, method="trace")
    with pytest.raises(ValueError, match="selective"):
        estimate_memory("tiny", 2, micro_batch=1, seq_len=64, activation_checkpointing="selective", method="trace")
    with pytest.raises(ValueError, match="method"):
        estimate_memory("tiny", 2, micro_batch=1, seq_len=64, method="guess")


@pytest.mark.slow
def test_traced_peak_is_close_to_the_analytic_one_and_checkpointing_lowers_it():
    kw = dict(micro_batch=4, seq_len=256, gpu="cpu")
    traced = estimate_memory("tiny", 2, method="trace", **kw)
    assert traced["total"] == pytest.approx(sum(traced[k] for k in ("static", "activations", "gathered_params",
                                                                     "grad_accum_buffer", "overhead")))
    analytic = estimate_memory("tiny", 2, **kw)
    # tensors only (the allowances are the same on both sides)
    t, a = traced["total"] - traced["overhead"], analytic["total"] - analytic["overhead"]
    assert a == pytest.approx(t, rel=0.25)
    ckpt = estimate_memory("tiny", 2, method="trace", activation_checkpointing=True, **kw)
    assert ckpt["activations"] < traced["activations"]
