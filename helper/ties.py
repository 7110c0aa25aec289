"""Priors one GPU's fit takes from the other GPUs' fits (the second pass of helper.fitting).

:func:`helper.fitting.fit_calibration` fits each GPU group once on its own rows, then again
with some priors replaced by what the *other* groups' first fits read (:func:`prior_ties`):

- **Flash attention's efficiency**, carried in units of its kernel's published ceiling
  (helper.gpus' ``attention_ceiling_flops``): the same kernel share on every part, not the same
  share of the dense peak (:data:`ATTENTION_TIE_SD`).
- **Constants of the software and the host, not of the chip** (:data:`SHARED_ACROSS_GPUS`):
  the same value on every part, within :data:`SHARED_TIE_SD`.

A group whose rows pin a constant keeps its own reading (its data outweigh the tie's spread);
a group whose rows barely exercise it (an A100 table all on 8 GPUs says little about
collective latency, a table all at 2,048 tokens little about attention) no longer fits it to
whatever its other constants leave over. One group alone (a ``tuner distill`` of one
cluster, the model-guided sampler's in-loop refit): no tie. The numbers: docs/validation.md.
"""

from __future__ import annotations

import math

__all__ = ["ATTENTION", "ATTENTION_TIE_SD", "SHARED_ACROSS_GPUS", "SHARED_TIE_SD", "prior_ties", "encode_kind", "decode_kind"]

ATTENTION = "attention_efficiency"
ATTENTION_TIE_SD = 0.15
"""Log-scale spread of one GPU's flash-attention share of its kernel ceiling around another's:
the ceilings (helper.gpus' ``attention_ceiling_flops``) are each one published maximum, one of
them derived from the forward and backward maxima; their ratio is known to about 15%."""

SHARED_ACROSS_GPUS = ("micro_step_overhead_s", "layer_overhead_s", "collective_latency_scale",
                      "comm_overlap_fraction", "gemm_tokens_half")
"""Constants set by the software and the host rather than the GPU, so a part's value is a
prior for another's:

- ``micro_step_overhead_s``, ``layer_overhead_s``: Python, FSDP's per-block hooks and kernel
  launches, paid on the host CPU (helper.calibration's docs);
- ``collective_latency_scale``: a multiplier on NCCL's latency model, whose base latencies are
  per link type and algorithm (NCCL's tuning.cc ``hwLat``/``baseLat``), not per GPU generation;
- ``comm_overlap_fraction``: how much of FSDP's prefetched all-gather and reduce-scatter hides
  under compute, a property of the framework's schedule;
- ``gemm_tokens_half``: the micro-batch rows at which a GEMM fills its tiles, set by
  cuBLAS/CUTLASS tile shapes (128-256 rows) that A100 and H100 kernels share in size.

Left out: what the chip and its links set (dense and attention efficiency, the width term,
bus bandwidth and NCCL's protocol factors) and the cluster's own host speed
(``host_dispatch_scale``)."""

SHARED_TIE_SD = 0.5
"""Spread of one GPU's shared constant around the others', on the fitted scale (log for
seconds and rows, logit for the overlap fraction): a factor e^0.5 = 1.65 between parts. A guess;
``python bench/validate_model.py --tie-sensitivity`` reads the leave-one-source-out median
3.3-3.7% for 0.3-1.0, 4.4% untied (docs/validation.md)."""


def encode_kind(kind: str, value: float) -> float:
    if kind == "fraction":
        v = min(max(value, 1e-6), 1 - 1e-6)
        return math.log(v / (1 - v))
    return math.log(value)


def decode_kind(kind: str, z: float) -> float:
    return 1 / (1 + math.exp(-z)) if kind == "fraction" else math.exp(z)


def _kernel_share(group: list) -> float | None:
    """Attention efficiency (a share of the dense peak) per unit share of the kernel ceiling, from
    the group's own part (a power cap scales both alike; a part outside helper.gpus' table needs
    no look-up); None for a part without a published ceiling (the CPU proxy): it neither gives
    nor takes."""
    spec = group[0][1].gpu
    return None if spec.attention_ceiling_flops is None else spec.attention_ceiling_flops / spec.peak_flops


def _pooled(readings: dict[str, tuple[float, float]], label: str, spread: float) -> tuple[float, float] | None:
    """The other groups' readings ``(z, sd)`` pooled by precision: ``(z, sd)``, the sd widened by
    ``spread`` in quadrature; None where no other group read it."""
    others = [(z, s) for other, (z, s) in readings.items() if other != label]
    if not others:
        return None
    weights = [1.0 / s**2 for _, s in others]
    z = sum(w * v for w, (v, _) in zip(weights, others)) / sum(weights)
    return z, math.sqrt(1.0 / sum(weights) + spread**2)


def _attention_tie(by_gpu: dict[str, list], first: dict[str, tuple]) -> dict[str, tuple[float, float]]:
    """Per group, attention efficiency's prior (value, logit-scale sd) from the other groups'
    shares of their kernel ceilings, on the log scale, carried to this GPU's ceiling.

    Attention is informed on a GPU mostly by its long-sequence rows; a GPU with none (the H100
    rows of llm-foundry's large-scale table, all at 2,048 tokens, and torchtitan's two) would
    otherwise fit it to whatever the other constants leave over (0.10 of H100's peak, against
    0.15 where the long rows are in: docs/validation.md)."""
    ratio = {label: _kernel_share(group) for label, group in by_gpu.items()}
    shares = {}
    for label, (fitted, informed, sd, _) in first.items():
        a = fitted[ATTENTION]
        if ratio[label] and ATTENTION in informed and sd.get(ATTENTION):  # sd: logit -> log scale
            shares[label] = (math.log(a / ratio[label]), sd[ATTENTION] * (1.0 - a))
    out = {}
    for label in by_gpu:
        pooled = _pooled(shares, label, ATTENTION_TIE_SD) if ratio[label] else None
        if pooled:
            value = min(math.exp(pooled[0]) * ratio[label], 0.95)
            out[label] = (value, pooled[1] / (1.0 - value))  # d logit = d log / (1 - value)
    return out


def prior_ties(by_gpu: dict[str, list], first: dict[str, tuple],
               kinds: dict[str, str]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per fit group, ``{constant: (prior value, sd on the fitted scale)}`` from the other groups.

    Args:
        by_gpu: fit group label -> its measurements ``(index, plan, padding key, value)``.
        first: label -> that group's first fit ``(constants, informed, posterior sd, converged)``
            (helper.fitting's ``_fit_group``; sds on the fitted scale).
        kinds: constant -> ``"fraction"`` (logit scale) or ``"positive"`` (log scale).

    Only groups whose first fit informed a constant give it; a group with no other group to
    take from gets nothing (one group: ``{}``). The shared constants pass only between NVIDIA
    parts on NCCL: the CPU proxy (gloo, no tensor cores, a Python-bound step) neither gives nor
    takes them, as it has no flash-attention ceiling to give or take attention by."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for label, tie in _attention_tie(by_gpu, first).items():
        out.setdefault(label, {})[ATTENTION] = tie
    gpus = {label for label, group in by_gpu.items() if group[0][1].gpu.nccl_arch != "none"}
    for name in SHARED_ACROSS_GPUS:
        kind = kinds[name]
        readings = {label: (encode_kind(kind, fitted[name]), sd[name]) for label, (fitted, informed, sd, _) in first.items()
                    if label in gpus and name in informed and sd.get(name)}
        for label in gpus:
            pooled = _pooled(readings, label, SHARED_TIE_SD)
            if pooled:
                out.setdefault(label, {})[name] = (decode_kind(kind, pooled[0]), pooled[1])
    return out
