"""Measurement noise from repeated trials: what weighs data against priors in a fit.

Trials that ran the same configuration (same model, cluster and knob values) differ only by
noise. The pooled standard deviation of their log throughput, over every repeated
configuration, estimates the relative noise (``s_pooled = sqrt(sum (n_i - 1) s_i^2 /
sum (n_i - 1))``, the usual pooled variance of a one-way layout).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

__all__ = ["estimate_noise_rel", "config_key", "fit_memory_scale"]

_NOT_CONFIG = {"tokens_per_sec_per_gpu", "trial", "study", "simulated", "startup_seconds",
               "peak_mem_gib", "ref", "figure", "note", "label", "role", "memory_figure"}
_FLOOR = 0.005  # below 0.5 % the log-normal weighting would let one repeat dominate a fit


def config_key(m: dict[str, Any]) -> tuple:
    """The configuration a measurement ran: every field except the outcome and bookkeeping."""
    return tuple(sorted((k, repr(v)) for k, v in m.items() if k not in _NOT_CONFIG))


def estimate_noise_rel(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled relative noise of repeated configurations.

    Returns:
        ``noise_rel`` (None when nothing is repeated), ``repeated_configs`` and
        ``degrees_of_freedom``.

    Example:
        >>> m = [{"preset": "tiny", "micro_batch": 1, "tokens_per_sec_per_gpu": v}
        ...      for v in (100.0, 110.0, 90.0)]
        >>> round(estimate_noise_rel(m)["noise_rel"], 3)
        0.1
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for m in measurements:
        v = m.get("tokens_per_sec_per_gpu")
        if isinstance(v, (int, float)) and v > 0:
            groups[config_key(m)].append(math.log(v))
    ss, dof, repeated = 0.0, 0, 0
    for logs in groups.values():
        if len(logs) > 1:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
            repeated += 1
    noise = max(math.sqrt(ss / dof), _FLOOR) if dof else None
    return {"noise_rel": noise, "repeated_configs": repeated, "degrees_of_freedom": dof}


def fit_memory_scale(measurements: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per GPU, the ``memory_scale`` that makes ``estimate_memory`` match trials' ``peak_mem_gib``.

    For each measurement with ``peak_mem_gib``: scale = (measured - modelled static -
    framework allowance) / modelled per-step memory (activations, gathered blocks, buffers,
    fragmentation); the median over a GPU's trials (robust to one odd trial), clipped to
    [0.25, 4]. Returns ``{gpu: {"memory_scale": s, "n": k, "median_abs_pct_error_before": e}}``.
    """
    from helper.fitting import measurement_plan
    from helper.memory import FRAGMENTATION_ALLOWANCE, estimate_memory

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
                              grad_accum=plan.grad_accum, gpu=plan.gpu, attention=plan.attention,
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
