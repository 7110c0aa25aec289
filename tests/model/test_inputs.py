"""tuner.model: the one translation of knob values into helper's inputs, used alike by the
sampler, screening, the sim and the fits."""

import pytest

from helper import measurement_plan
from tuner.model import memory_gb, model_inputs, predict, spec_model_inputs, step_plan
from tuner.spec import load_spec

CLUSTER = dict(model="llama-2-7b", gpu="H100-80GB", world_size=32, gpus_per_node=8, seq_len=2048)


@pytest.mark.parametrize("padding, row, efficiency, per_row", [
    ("max_length", 2048, 0.125, 1.0), ("packed", 2048, 1.0, 8.0)])
def test_padding_becomes_rows_real_tokens_and_examples(padding, row, efficiency, per_row):
    inp = model_inputs({"micro_batch": 2, "padding": padding}, mean_tokens=256.0, **CLUSTER)
    assert (inp.seq_len, inp.padding_efficiency, inp.examples_per_sequence) == (row, efficiency, per_row)


def test_longest_padding_computes_shorter_rows():
    inp = model_inputs({"micro_batch": 4, "padding": "longest"}, mean_tokens=256.0, **CLUSTER)
    assert 256 < inp.seq_len < 2048 and inp.padding_efficiency == pytest.approx(256.0 / inp.seq_len)


def test_a_measured_share_overrides_the_estimate():
    inp = model_inputs({"padding": "max_length"}, padding_efficiency=0.2, **CLUSTER)
    assert inp.padding_efficiency == 0.2


def test_the_measurement_dict_plans_the_same_step_as_the_inputs():
    inp = model_inputs({"micro_batch": 4, "grad_accum": 2, "padding": "packed", "num_workers": 2, "prefetch_factor": 4,
                        "nccl_proto": "LL128", "sharding": "shard_grad_op"}, **CLUSTER)
    plan, pad_key = measurement_plan(inp.measurement(1000.0))
    assert pad_key is None and plan == step_plan(inp)
    assert inp.measurement()["reshard_after_forward"] is False


def test_unknown_padding_share_goes_to_the_fit_as_a_mode():
    m = model_inputs({"padding": "max_length"}, **CLUSTER).measurement(1000.0, padding_known=False)
    assert "padding_efficiency" not in m and m["padding"] == "max_length"
    assert measurement_plan(m)[1] == "padding_efficiency_max_length"


def test_hsdp_and_tp_travel_as_helpers_layout():
    inp = model_inputs({"sharding": "hybrid_shard", "tp_degree": 2}, **CLUSTER)
    assert inp.layout.name == "hsdp+tp2"
    assert inp.measurement()["layout"] == {"dp_shard": 4, "dp_replicate": 4, "tp": 2}
    assert "layout" not in model_inputs({}, **CLUSTER).measurement()


def test_the_spec_form_fills_every_knob_from_the_spec():
    spec = load_spec("studies/llama7b-h100x32.toml")
    inp = spec_model_inputs({"micro_batch": 4, "padding": "packed"}, spec)
    assert (inp.gpu_count, inp.gpus_per_node, inp.model) == (32, 8, "llama-2-7b")
    assert inp.activation_checkpointing is spec.model.activation_checkpointing
    assert predict(inp) > 0


def test_the_stack_reaches_memory_and_the_measurement_only_when_not_the_workloads():
    values = {"micro_batch": 4, "grad_accum": 4, "padding": "packed"}
    own = model_inputs(values, **CLUSTER)
    foundry = model_inputs(values, stack="llm-foundry", **CLUSTER)
    assert own.stack == "hf-sdpa" and "stack" not in own.measurement(1.0)
    assert foundry.measurement(1.0)["stack"] == "llm-foundry"
    assert memory_gb(foundry) < memory_gb(own) - 20  # no 28 GB fp32 no-sync buffer
    plan, _ = measurement_plan(foundry.measurement(1.0))
    assert plan == step_plan(foundry) and plan.reduce_scatter_every_micro_step
