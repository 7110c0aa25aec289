"""The performance model's free constants: their meaning, priors, and the calibration files.

A calibration is a JSON-ready dict::

    {"schema_version": 1, "source": "...", "created_at": "...",
     "constants": {"default": {name: value}, "<gpu name>": {name: value}, ...},
     "informed": {"<gpu name>": [names fitted from data]},
     "quality": {...} | null, "provenance": {...}}

Constants for a GPU are the built-in priors, overridden by the ``default`` block, overridden
by that GPU's block. ``load_calibration()`` reads the shipped ``default_calibration.json``
(fitted by ``bench/validate_model.py --write-default`` to published throughput figures:
see its ``provenance``); ``tuner distill`` writes the same format from finished studies.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ConstantSpec", "CONSTANTS", "PRIORS", "DEFAULT_CALIBRATION_PATH", "SCHEMA_VERSION",
           "load_calibration", "resolve_constants", "calibration_source", "extrapolation_note"]

SCHEMA_VERSION = 1
DEFAULT_CALIBRATION_PATH = Path(__file__).with_name("default_calibration.json")


@dataclass(frozen=True, kw_only=True)
class ConstantSpec:
    """One free constant of the model."""

    name: str
    """Key in a calibration's ``constants`` blocks."""
    kind: str
    """``fraction`` (fitted on the logit scale, in (0, 1)) or ``positive`` (log scale)."""
    prior_sigma: float
    """Width of the prior on the fitted scale (logit or natural log): weak, data dominate."""
    doc: str
    """What it means and where its prior comes from."""
    fitted: bool = True
    """False: pinned at its prior by every fit (throughput data cannot separate it from the
    constants that are fitted; it is set by a source or by a dedicated measurement)."""


CONSTANTS: dict[str, ConstantSpec] = {c.name: c for c in (
    ConstantSpec(name="compute_efficiency", kind="fraction", prior_sigma=1.0,
                 doc="Achieved share of the dense bf16 peak on the model's FLOPs (hardware FLOPs "
                     "utilisation incl. recompute). Prior 0.45: published FSDP MFU is 0.33-0.64."),
    ConstantSpec(name="micro_step_overhead_s", kind="positive", prior_sigma=1.5,
                 doc="Seconds per micro-batch not hidden behind device work: Python, FSDP2 hooks, "
                     "kernel launches, loss/logging syncs. Prior: a guess (5 ms GPU, 20 ms CPU)."),
    ConstantSpec(name="layer_overhead_s", kind="positive", prior_sigma=1.5,
                 doc="Seconds per transformer block per micro-batch not hidden behind its "
                     "compute: FSDP2's per-block pre/post hooks, the block's kernel launches, "
                     "all-gather waits at small batches. Prior 1 ms: a guess (tens of kernels "
                     "per block forward and backward at ~10 us each, plus hooks)."),
    ConstantSpec(name="host_dispatch_scale", kind="positive", prior_sigma=0.5,
                 doc="This cluster's host dispatch time over the stack's measured one "
                     "(helper.dispatch: a micro-batch takes max(host, device)); a faster host CPU "
                     "reads below 1. Prior 1: the stack's figure, measured on one host. No effect "
                     "on a stack that states no dispatch cost, or on a CPU."),
    ConstantSpec(name="gemm_tokens_half", kind="positive", prior_sigma=1.0,
                 doc="Tokens per micro-batch at which matmul efficiency halves (x T / (T + this)): "
                     "a GEMM's M dimension is the micro-batch's tokens; few tokens under-fill "
                     "the tensor-core tiles and leave per-kernel costs exposed. Prior 1024: a guess."),
    ConstantSpec(name="gemm_hidden_half", kind="positive", prior_sigma=1.0,
                 doc="Hidden width at which matmul efficiency is half of compute_efficiency "
                     "(efficiency x h / (h + this)): narrow GEMMs under-use tensor cores. Prior "
                     "512: MPT 125M vs 3B MFU on the same A100s (llm-foundry benchmarks)."),
    ConstantSpec(name="attention_efficiency", kind="fraction", prior_sigma=1.0,
                 doc="Share of peak flash attention reaches on its causal FLOPs at long "
                     "sequences. Prior 0.5: FlashAttention-2 fwd+bwd 50-73 % of A100 peak (Dao 2023)."),
    ConstantSpec(name="attention_seq_half", kind="positive", prior_sigma=1.0, fitted=False,
                 doc="Sequence length at which flash attention runs at half its efficiency "
                     "(short rows under-fill the kernel's tiles). Prior 256: a guess, pinned."),
    ConstantSpec(name="memory_scale", kind="positive", prior_sigma=0.3, fitted=False,
                 doc="Measured / modelled per-step memory (activations, gathered blocks, "
                     "buffers). Prior 1 (the formulas match PyTorch's FSDP2 tracker); fitted by "
                     "fit_memory_scale from trials' peak_mem_gib, never from throughput."),
    ConstantSpec(name="bus_bw_efficiency", kind="positive", prior_sigma=0.7,
                 doc="Achieved share of the nominal ring bus bandwidth (Simple protocol). Prior "
                     "0.8: old tuning.cc capped A100 rings at 235 of 300 GB/s (0.78)."),
    ConstantSpec(name="proto_bw_factor_ll128", kind="positive", prior_sigma=0.5,
                 doc="LL128 bandwidth relative to Simple. Prior 0.92 (tuning.cc; 120/128 payload)."),
    ConstantSpec(name="proto_bw_factor_ll", kind="positive", prior_sigma=0.7,
                 doc="LL bandwidth relative to Simple inside a node (x3/4 across nodes or for "
                     "all-reduce, capped at llMaxBw). Prior 1/3 (tuning.cc; half the wire is flags)."),
    ConstantSpec(name="algo_bw_factor_tree", kind="positive", prior_sigma=0.5,
                 doc="Tree (all-reduce only) bandwidth relative to the ring bus. Prior 0.92 (tuning.cc)."),
    ConstantSpec(name="algo_bw_factor_nvls", kind="positive", prior_sigma=0.5,
                 doc="NVLS (NVSwitch multicast) bandwidth relative to Ring. Prior 1.0: unmeasured."),
    ConstantSpec(name="algo_bw_factor_pat", kind="positive", prior_sigma=0.5,
                 doc="PAT bandwidth relative to Ring. Prior 1.0: unmeasured."),
    ConstantSpec(name="collective_latency_scale", kind="positive", prior_sigma=1.0,
                 doc="Multiplier on NCCL's (or gloo's) per-collective latency model. Prior 1."),
    ConstantSpec(name="comm_overlap_fraction", kind="fraction", prior_sigma=1.0,
                 doc="Share of communication hidden under compute while both run. Prior 0.9: "
                     "FSDP2 prefetches the next block's all-gather during this block's compute "
                     "(PyTorch FSDP notes); the first all-gather and last reduce-scatter stay exposed."),
    ConstantSpec(name="data_cost_s_per_example", kind="positive", prior_sigma=1.5,
                 doc="CPU seconds to tokenise and collate one example in a DataLoader worker. "
                     "Prior 1 ms: a guess for a fast (Rust) tokenizer plus Python collation."),
    ConstantSpec(name="startup_fixed_s", kind="positive", prior_sigma=1.0,
                 doc="Seconds from launch to the first step, excluding rendezvous, NCCL init and "
                     "model init: interpreter, imports, CUDA context, data set-up. Prior: a guess."),
    ConstantSpec(name="model_init_s_per_gparam", kind="positive", prior_sigma=1.0,
                 doc="Seconds to build and randomly initialise 1e9 parameters. Prior 2 s: a guess."),
)}

_GPU_PRIOR = {"compute_efficiency": 0.45, "micro_step_overhead_s": 0.005, "bus_bw_efficiency": 0.8,
              "host_dispatch_scale": 1.0,
              "gemm_hidden_half": 512.0, "gemm_tokens_half": 1024.0, "layer_overhead_s": 0.001,
              "attention_efficiency": 0.5, "attention_seq_half": 256.0,
              "memory_scale": 1.0,
              "proto_bw_factor_ll128": 0.92, "proto_bw_factor_ll": 1 / 3,
              "algo_bw_factor_tree": 0.92, "algo_bw_factor_nvls": 1.0, "algo_bw_factor_pat": 1.0,
              "collective_latency_scale": 1.0, "comm_overlap_fraction": 0.9,
              "data_cost_s_per_example": 0.001, "startup_fixed_s": 40.0,
              "model_init_s_per_gparam": 2.0}
PRIORS: dict[str, dict[str, float]] = {
    "default": _GPU_PRIOR,
    # The CPU proxy: a process reaches a small share of the nominal peak, and per-step Python
    # and gloo costs dominate a tiny model. Guesses until a quickstart study is distilled.
    "cpu": {**_GPU_PRIOR, "compute_efficiency": 0.2, "micro_step_overhead_s": 0.02,
            "gemm_hidden_half": 1.0, "gemm_tokens_half": 1.0, "layer_overhead_s": 1e-4,
            "attention_efficiency": 0.2, "attention_seq_half": 1.0,
            "bus_bw_efficiency": 1.0, "comm_overlap_fraction": 0.3, "startup_fixed_s": 8.0},
}
"""Built-in priors: the fitting's starting point, and what an empty calibration means."""


def _validate(cal: Any, where: str) -> dict[str, Any]:
    if not isinstance(cal, dict):
        raise ValueError(f"{where}: a calibration is a JSON object, got {type(cal).__name__}")
    if cal.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version must be {SCHEMA_VERSION}, got {cal.get('schema_version')!r}")
    consts = cal.get("constants")
    if not isinstance(consts, dict) or not isinstance(consts.get("default", {}), dict):
        raise ValueError(f"{where}: `constants` must be an object of blocks ({{'default': {{...}}, gpu: {{...}}}})")
    for block_name, block in consts.items():
        if not isinstance(block, dict):
            raise ValueError(f"{where}: constants.{block_name} must be an object")
        for key, value in block.items():
            if not (key in CONSTANTS or key.startswith("padding_efficiency_")):
                raise ValueError(f"{where}: constants.{block_name}.{key}: unknown constant; "
                                 f"known: {', '.join(CONSTANTS)}")
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{where}: constants.{block_name}.{key} must be a positive number, got {value!r}")
    if not isinstance(cal.get("source"), str) or not cal["source"]:
        raise ValueError(f"{where}: `source` must say where the constants come from")
    return cal


@functools.lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int) -> str:
    return Path(path).read_text()


def _read(path: str) -> str:
    st = Path(path).stat()  # the cache key includes mtime and size: an edited file is re-read
    return _read_cached(path, st.st_mtime_ns, st.st_size)


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """A calibration dict from a JSON file; the shipped default when ``path`` is None.

    Raises:
        ValueError: the file is missing, not JSON, or not a calibration (the message names it).

    Example:
        >>> cal = load_calibration()
        >>> sorted(cal)[:3], "H100-80GB" in cal["constants"]
        (['constants', 'created_at', 'informed'], True)
    """
    p = Path(path) if path is not None else DEFAULT_CALIBRATION_PATH
    try:
        text = _read(str(p.resolve()))
    except OSError as exc:
        raise ValueError(f"calibration {p}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"calibration {p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return _validate(data, f"calibration {p}")  # json.loads made it: the caller's own copy


def _as_calibration(calibration: dict[str, Any] | str | Path | None) -> dict[str, Any]:
    if calibration is None:
        return load_calibration()
    if isinstance(calibration, (str, Path)):
        return load_calibration(calibration)
    return _validate(calibration, "calibration")


def calibration_source(calibration: dict[str, Any] | str | Path | None) -> str:
    """The ``source`` line of a calibration (the default's when None)."""
    return _as_calibration(calibration)["source"]


def resolve_constants(calibration: dict[str, Any] | str | Path | None,
                      gpu: str) -> tuple[dict[str, float], str]:
    """Constants for ``gpu`` (priors < ``default`` block < GPU block) and the calibration's source.

    Example:
        >>> consts, source = resolve_constants(None, "H100-80GB")
        >>> 0 < consts["compute_efficiency"] < 1, source.startswith("default")
        (True, True)
    """
    cal = _as_calibration(calibration)
    blocks = cal["constants"]
    merged = {**PRIORS.get(gpu, PRIORS["default"]), **blocks.get("default", {}), **blocks.get(gpu, {})}
    return merged, cal["source"]


def extrapolation_note(calibration: dict[str, Any] | str | Path | None, gpu: str, *,
                       n_params: float, gpu_count: int) -> str:
    """``""`` inside the calibration's data, else ``"; extrapolated: ..."`` naming what is outside.

    Uses ``quality.coverage`` (the model sizes and GPU counts each GPU's fit saw); a
    calibration without it, or a GPU it has no data for, says so.

    Example:
        >>> extrapolation_note(None, "H100-80GB", n_params=7e9, gpu_count=8)
        ''
        >>> print(extrapolation_note(None, "H100-80GB", n_params=405e9, gpu_count=8))
        ; extrapolated: model size 405e9 outside the calibration's 0.759e9-64.9e9 on H100-80GB
    """
    cal = _as_calibration(calibration)
    cov = ((cal.get("quality") or {}).get("coverage") or {}).get(gpu)
    if not cov:
        return f"; extrapolated: the calibration has no {gpu} measurement"
    out = []
    lo, hi = cov["n_params"]
    if not lo * 0.9 <= n_params <= hi * 1.1:
        out.append(f"model size {n_params / 1e9:.3g}e9 outside the calibration's {lo / 1e9:.3g}e9-{hi / 1e9:.3g}e9")
    lo, hi = cov["gpu_count"]
    if not lo <= gpu_count <= hi:
        out.append(f"{gpu_count} GPUs outside the calibration's {lo:.0f}-{hi:.0f}")
    return f"; extrapolated: {', '.join(out)} on {gpu}" if out else ""
