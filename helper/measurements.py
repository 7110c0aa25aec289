"""Measurements as helper reads them: a plain dict per trial (the model's inputs and what was
measured), the step plan it describes, and the memory scale that makes the memory model match
measured peaks.

A measurement dict is the one format helper takes a configuration in from outside: the
calibration fit (helper.fitting), the noise estimate (helper.noise) and tuner's view of the
model (tuner.model) all write or read it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from helper.memory import FRAGMENTATION_ALLOWANCE, estimate_memory
from helper.sizes import parse_model_size
from helper.throughput import StepPlan, plan_step

__all__ = ["measurement_plan", "config_key", "fit_memory_scale"]

_NOT_CONFIG = {"tokens_per_sec_per_gpu", "trial", "study", "simulated", "startup_seconds",
               "peak_mem_gib", "ref", "figure", "note", "label", "role", "memory_figure", "source",
               "gpu_label", "memory_capacity_gb"}


def config_key(m: dict[str, Any]) -> tuple:
    """The configuration a measurement ran: every field except the outcome and bookkeeping."""
    return tuple(sorted((k, repr(v)) for k, v in m.items() if k not in _NOT_CONFIG))


def measurement_plan(m: dict[str, Any]) -> tuple[StepPlan, str | None]:
    """A measurement dict -> (StepPlan, nuisance padding key or None).

    Keys: ``model_size`` or ``preset``; ``gpu``; ``gpu_count``; optional ``gpus_per_node``
    (default min(8, gpu_count)), ``seq_len`` (2048), ``micro_batch`` (1), ``grad_accum`` (1),
    ``activation_checkpointing`` (False), ``nccl_algo``/``nccl_proto`` (default),
    ``num_workers`` (0, PyTorch's default), ``prefetch_factor``, ``sharding`` (zero3),
    ``reshard_after_forward`` (True), ``padding_efficiency`` or ``padding`` (packed / none =
    1.0), ``examples_per_sequence`` (1.0), ``stack`` (a helper.stacks preset or Stack; None:
    the shape's default), ``attention``, ``reduce_dtype_bytes`` and
    ``reduce_scatter_every_micro_step`` (None: the stack's); the target ``tokens_per_sec_per_gpu``.
    ``fit_calibration`` also reads ``layout`` (``{"dp_shard", "dp_replicate", "tp"}``) for an
    HSDP/TP trial: predicted as FSDP x :func:`helper.layouts.layout_speed_ratio`.
    """
    model = m.get("model_size", m.get("preset"))
    if model is None:
        raise ValueError("measurement needs `model_size` or `preset`")
    for key in ("gpu", "gpu_count"):
        if key not in m:
            raise ValueError(f"measurement needs `{key}`")
    n = int(m["gpu_count"])
    pad_eff = m.get("padding_efficiency")
    pad_key = None
    if pad_eff is None:
        mode = m.get("padding")
        if mode not in (None, "packed"):
            pad_key = f"padding_efficiency_{mode}"
        pad_eff = 1.0
    plan = plan_step(
        parse_model_size(model), n, gpu=m["gpu"], seq_len=int(m.get("seq_len", 2048)),
        micro_batch=int(m.get("micro_batch", 1)), grad_accum=int(m.get("grad_accum", 1)),
        activation_checkpointing=m.get("activation_checkpointing", False),
        attention=m.get("attention"), stack=m.get("stack"), reduce_dtype_bytes=m.get("reduce_dtype_bytes"),
        gpus_per_node=int(m.get("gpus_per_node") or min(8, n)),
        nccl_algo=m.get("nccl_algo", "default"), nccl_proto=m.get("nccl_proto", "default"),
        num_workers=int(m.get("num_workers", 0)), prefetch_factor=m.get("prefetch_factor"),
        sharding=m.get("sharding", "zero3"), padding_efficiency=float(pad_eff),
        examples_per_sequence=float(m.get("examples_per_sequence", 1.0)),
        reshard_after_forward=bool(m.get("reshard_after_forward", True)),
        reduce_scatter_every_micro_step=m.get("reduce_scatter_every_micro_step"))
    return plan, pad_key


def fit_memory_scale(measurements: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per GPU, the ``memory_scale`` that makes ``estimate_memory`` match trials' ``peak_mem_gib``.

    For each measurement with ``peak_mem_gib``: scale = (measured - modelled static -
    framework allowance) / modelled per-step memory (activations, gathered blocks, buffers,
    fragmentation); the median over a GPU's trials (robust to one odd trial), clipped to
    [0.25, 4]. Returns ``{gpu: {"memory_scale": s, "n": k, "median_abs_pct_error_before": e}}``.
    """
    ratios: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, list[float]] = defaultdict(list)
    for m in measurements:
        peak = m.get("peak_mem_gib")
        if not isinstance(peak, (int, float)) or peak <= 0:
            continue
        try:
            plan, _ = measurement_plan(m)
        except (KeyError, ValueError, TypeError):
            continue
        mem = estimate_memory(plan.shape, plan.gpu_count, sharding=plan.sharding, micro_batch=plan.micro_batch,
                              seq_len=plan.seq_len, activation_checkpointing=plan.checkpointing,
                              grad_accum=plan.grad_accum, gpu=plan.gpu, attention=plan.attention, stack=plan.stack,
                              reduce_scatter_every_micro_step=plan.reduce_scatter_every_micro_step,
                              reshard_after_forward=bool(m.get("reshard_after_forward", True)))
        measured_gb = float(peak) * 2**30 / 1e9
        dynamic = mem["activations"] + mem["gathered_params"] + mem["grad_accum_buffer"]
        if dynamic > 0:
            fixed = mem["static"] + plan.gpu.framework_overhead_gb
            ratios[plan.gpu.name].append((measured_gb - fixed) / (dynamic * (1 + FRAGMENTATION_ALLOWANCE)))
        errors[plan.gpu.name].append(100.0 * abs(mem["total"] / measured_gb - 1.0))
    out = {}
    for gpu, rs in ratios.items():
        rs.sort()
        med = rs[len(rs) // 2] if len(rs) % 2 else 0.5 * (rs[len(rs) // 2 - 1] + rs[len(rs) // 2])
        errs = sorted(errors[gpu])
        out[gpu] = {"memory_scale": round(min(max(med, 0.25), 4.0), 4), "n": len(rs),
                    "median_abs_pct_error_before": round(errs[len(errs) // 2], 2)}
    return out
