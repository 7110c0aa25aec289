"""The numbers a team lead reads first: the recommendation's speedup, MFU and GPU-hours saved.

Pure arithmetic over an analysis (tuner.stats.analyze_record's dict); nothing here is a new
statistic. MFU is model FLOPs utilisation as torchtitan's ``components/metrics.py`` and
PaLM (Chowdhery et al. 2022, App. B) define it::

    MFU = tokens_per_sec_per_gpu x flops_per_token / peak_flops
    flops_per_token = 6 N_matmul + 12 L H T        (recompute not counted: that would be HFU)

with N_matmul the parameters outside the input embedding, L layers, H hidden size, T the
spec's sequence length, and the GPU's dense bf16 peak from its datasheet (helper.gpus). A GPU
whose peak is nominal (the CPU proxy) or unknown yields no MFU rather than a wrong one
(nanoGPT's rule). tokens/s/GPU counts non-padding tokens, so this is the useful MFU.

Example:
    >>> round(mfu(3000.0, flops_per_token=46.1e9, peak_flops=989e12), 3)
    0.14
    >>> gpu_hours(1e9, tokens_per_sec_per_gpu=2500.0)
    111.11111111111111
"""

from __future__ import annotations

from typing import Any

__all__ = ["mfu", "gpu_hours", "model_flops", "headline"]


def mfu(tokens_per_sec_per_gpu: float, *, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the share of the GPU's peak that the model's own FLOPs use."""
    return tokens_per_sec_per_gpu * flops_per_token / peak_flops


def gpu_hours(planned_tokens: float, *, tokens_per_sec_per_gpu: float) -> float:
    """GPU-hours to process ``planned_tokens`` at ``tokens_per_sec_per_gpu`` (any GPU count)."""
    return planned_tokens / tokens_per_sec_per_gpu / 3600.0


def model_flops(spec: dict[str, Any]) -> tuple[float, float] | None:
    """(flops_per_token, peak_flops) of a spec's model on its GPU, or None when either is
    unknown or the GPU's peak is only nominal (the CPU proxy)."""
    from helper import flops_per_token, get_gpu, parse_model_size  # helper is import-light

    model, cluster = spec.get("model") or {}, spec.get("cluster") or {}
    try:
        gpu = get_gpu(str(cluster.get("gpu")))
        shape = parse_model_size(model.get("preset") or model.get("path"))
        seq_len = int(model["seq_len"])
    except (ValueError, KeyError, TypeError):
        return None
    if gpu.peak_is_nominal:
        return None
    return flops_per_token(shape, seq_len), gpu.peak_flops


def _scaled(d: dict[str, Any] | None, f) -> dict[str, Any] | None:
    if not d:
        return None
    lo, hi = d["ci95"]
    return {"mean": f(d["mean"]), "ci95": sorted([f(lo), f(hi)])}


def headline(analysis: dict[str, Any], *, planned_tokens: float) -> dict[str, Any]:
    """The first screen of the report and the top of RECIPE.md, from an analysis.

    Returns ``recommended``/``baseline`` (trial, tokens/s/GPU with CI, MFU with CI or None),
    ``speedup`` (with CI or None), ``planned_tokens``, ``gpu_hours_today`` and
    ``gpu_hours_saved`` (with CI; None without a baseline), and ``simulated``.
    """
    spec = analysis.get("spec") or {}
    flops = model_flops(spec)
    best, base = analysis.get("best"), analysis.get("baseline")

    def side(d: dict[str, Any] | None) -> dict[str, Any] | None:
        if not d or not d.get("tokens_per_sec_per_gpu"):
            return None
        tps = d["tokens_per_sec_per_gpu"]
        util = _scaled(tps, lambda x: mfu(x, flops_per_token=flops[0], peak_flops=flops[1])) if flops else None
        return {"trial": d["trial"], "params": d["params"], "tokens_per_sec_per_gpu": tps, "mfu": util}

    rec, today = side(best), side(base)
    speed = (best or {}).get("speedup_vs_baseline") if today else None
    hours_today = saved = None
    if today and speed:
        hours_today = gpu_hours(planned_tokens, tokens_per_sec_per_gpu=today["tokens_per_sec_per_gpu"]["mean"])
        saved = _scaled(speed, lambda s: hours_today * (1.0 - 1.0 / s))
    return {"recommended": rec, "baseline": today, "speedup": speed, "planned_tokens": planned_tokens,
            "gpu_hours_today": hours_today, "gpu_hours_saved": saved,
            "simulated": bool(analysis.get("simulated")), "flops_per_token": flops[0] if flops else None,
            "peak_flops": flops[1] if flops else None}
