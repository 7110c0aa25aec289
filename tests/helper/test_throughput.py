"""helper.throughput: sanity of the step time and the prediction it gives."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from helper import (
    GPUS,
    Prediction,
    estimate_startup_seconds,
    predict_step_time,
    predict_throughput,
)
from helper.calibration import resolve_constants
from helper.throughput import plan_step, step_time_breakdown

H100 = GPUS["H100-80GB"]


def test_prediction_is_a_float_that_names_its_calibration():
    tps = predict_throughput("7b", 8, micro_batch=2)
    assert isinstance(tps, float) and isinstance(tps, Prediction)
    assert tps.source.startswith("default") and tps.details["step_time_s"] > 0
    assert json.loads(json.dumps({"v": tps}))["v"] == pytest.approx(float(tps))
    assert 2000 < tps < 30000


def test_interface_example_runs():
    tps = predict_throughput(model_size="7b", gpu_count=8, gpu="A100-80GB", seq_len=2048,
                             micro_batch=8, activation_checkpointing=False)
    assert tps > 0


def _tps(gpu_spec, *, constants=None, **kw) -> float:
    plan = plan_step(kw.pop("model", "7b"), kw.pop("gpu_count", 32), gpu=gpu_spec, **kw)
    consts, _ = resolve_constants(None, gpu_spec.name)
    return step_time_breakdown(plan, {**consts, **(constants or {})})["tokens_per_sec_per_gpu"]


@pytest.mark.parametrize("model, n, mb", list(itertools.product(("1.3b", "7b", "13b"), (8, 16, 64), (1, 4))))
def test_more_communication_bandwidth_is_never_slower(model, n, mb):
    prev = 0.0
    for scale in (0.25, 0.5, 1, 2, 4):
        faster = dataclasses.replace(H100, intra_node_gbs=H100.intra_node_gbs * scale,
                                     net_gbs_per_gpu=H100.net_gbs_per_gpu * scale)
        tps = _tps(faster, model=model, gpu_count=n, micro_batch=mb)
        assert tps >= prev - 1e-9
        prev = tps
    effs = [_tps(H100, model=model, gpu_count=n, micro_batch=mb, constants={"bus_bw_efficiency": e})
            for e in (0.2, 0.4, 0.8, 1.0)]
    assert effs == sorted(effs)


def test_activation_checkpointing_is_slower_at_the_same_micro_batch():
    for model, n, mb in itertools.product(("1.3b", "7b", "13b"), (8, 32), (1, 4)):
        assert predict_throughput(model, n, micro_batch=mb, activation_checkpointing=True) < \
               predict_throughput(model, n, micro_batch=mb)


def test_data_loading_stalls_only_when_workers_cannot_keep_up():
    cal = {"schema_version": 1, "source": "test: slow tokenizer",
           "constants": {"default": {}, "H100-80GB": {"data_cost_s_per_example": 0.05}}}
    kw = dict(micro_batch=4, examples_per_sequence=8.0, calibration=cal)
    serial = predict_step_time("7b", 8, num_workers=0, **kw)
    one = predict_step_time("7b", 8, num_workers=1, **kw)
    many = predict_step_time("7b", 8, num_workers=8, **kw)
    assert serial["data_stall_s"] == pytest.approx(4 * 8 * 0.05)
    assert serial["data_stall_s"] > one["data_stall_s"] > 0 == many["data_stall_s"]
    assert serial["tokens_per_sec_per_gpu"] < one["tokens_per_sec_per_gpu"] < many["tokens_per_sec_per_gpu"]


def test_padding_counts_only_real_tokens():
    full = predict_throughput("7b", 8, micro_batch=2)
    half = predict_throughput("7b", 8, micro_batch=2, padding_efficiency=0.5)
    assert half == pytest.approx(full / 2)


def test_no_sync_accumulation_amortises_the_reduce_scatter():
    kw = dict(micro_batch=1, seq_len=512, grad_accum=8)
    once = predict_step_time("7b", 32, **kw)
    every = predict_step_time("7b", 32, reduce_scatter_every_micro_step=True, **kw)
    assert once["comm_s"] < every["comm_s"]
    no_reshard = predict_step_time("7b", 32, reshard_after_forward=False, **kw)
    assert no_reshard["comm_s"] < once["comm_s"]      # no backward all-gather


def test_single_gpu_has_no_communication_and_cpu_ignores_nccl_settings():
    assert predict_step_time("7b", 1)["comm_s"] == 0.0
    a = predict_throughput("tiny", 2, gpu="cpu", seq_len=256, micro_batch=4, gpus_per_node=2)
    b = predict_throughput("tiny", 2, gpu="cpu", seq_len=256, micro_batch=4, gpus_per_node=2,
                           nccl_algo="Tree", nccl_proto="LL")
    assert a == b and a > 0


def test_startup_estimate():
    small = estimate_startup_seconds("tiny", 2, gpu="cpu", gpus_per_node=2)
    big = estimate_startup_seconds("70b", 64)
    loaded = estimate_startup_seconds("70b", 64, load_weights=True)
    assert 0 < small < big < loaded
    assert big.source.startswith("default") and set(big.details) >= {"fixed_s", "model_init_s"}


def test_bad_arguments_are_value_errors():
    for kw in ({"micro_batch": 0}, {"grad_accum": -1}, {"padding_efficiency": 1.5}, {"num_workers": -1}):
        with pytest.raises(ValueError):
            predict_throughput("7b", 8, **kw)


# --- issue 13: attention, size and checkpointing modes -------------------------------------------

def test_attention_runs_at_its_own_efficiency_and_eager_is_slower():
    d = predict_step_time("7b", 8, seq_len=8192, micro_batch=1)
    assert d["compute_s"] == pytest.approx(d["matmul_s"] + d["attention_s"]) and d["attention_s"] > 0
    sdpa = predict_throughput("7b", 8, seq_len=4096, micro_batch=2)
    eager = predict_throughput("7b", 8, seq_len=4096, micro_batch=2, attention="eager")
    assert eager < sdpa


def test_attention_share_grows_with_sequence_length():
    shares = []
    for seq in (1024, 4096, 16384):
        d = predict_step_time("7b", 8, seq_len=seq, micro_batch=max(1, 16384 // seq))
        shares.append(d["attention_s"] / d["compute_s"])
    assert shares[0] < shares[1] < shares[2]


def test_selective_checkpointing_costs_less_than_full():
    kw = dict(seq_len=4096, micro_batch=2)
    none = predict_throughput("7b", 8, **kw)
    sel = predict_throughput("7b", 8, activation_checkpointing="selective", **kw)
    full = predict_throughput("7b", 8, activation_checkpointing=True, **kw)
    assert full < sel < none


def test_a_power_capped_gpu_is_slower_by_the_cube_root_of_its_power_share():
    from helper.gpus import get_gpu, power_capped

    h100 = get_gpu("H100-80GB")
    capped = power_capped(h100, watts=500, tdp_watts=700)
    assert capped.peak_flops == pytest.approx(h100.peak_flops * (500 / 700) ** (1 / 3))
    assert 835e12 < capped.peak_flops < 989e12  # torchtitan's footnote: between the NVL and the SXM
    full = predict_throughput("llama-3-8b", 8, gpu=h100, seq_len=8192, micro_batch=2)
    slow = predict_throughput("llama-3-8b", 8, gpu=capped, seq_len=8192, micro_batch=2)
    assert 0.88 < slow / full < 0.95 and slow.source == full.source  # same calibrated constants
    with pytest.raises(ValueError, match="watts"):
        power_capped(h100, watts=800, tdp_watts=700)
