"""``plan_training``: which layout, batch, throughput, cost and checkpoint cadence for a run.

For each layout that applies (:func:`helper.layouts.candidate_layouts`) it takes the largest
micro-batch that fits memory with headroom, with and without activation checkpointing, sets
gradient accumulation to reach the global batch, predicts tokens/s/GPU with a band, and keeps
the fastest. The global batch is the team's own target, else the compute-optimal batch of
DeepSeek LLM's scaling law (arXiv 2401.02954, Sec. 3.1: ``B_opt = 0.2920 C^0.3271`` tokens for
a compute budget of ``C`` FLOPs, here ``C = 6 N D``), a guide below which steps waste
GPU time and above which extra tokens per step stop buying progress (the "critical batch
size", McCandlish et al. 2018, arXiv 1812.06162).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from helper.calibration import _as_calibration, resolve_constants
from helper.checkpointing import LLAMA3_FAILURES_PER_GPU_HOUR, checkpoint_plan
from helper.gpus import get_gpu
from helper.layouts import Layout, candidate_layouts, layout_memory, layout_step_time, pipeline_bubble_fraction
from helper.sizes import parse_model_size

__all__ = ["plan_training", "critical_batch_tokens", "dataset_global_batch", "MIN_STEPS", "DEFAULT_BAND_PCT"]

MIN_STEPS = 100
"""Fewer optimizer steps than this and a learning-rate schedule (warm-up, decay) has little room."""
DEFAULT_BAND_PCT = 10.0
"""Band when the calibration reports no error for this GPU: an allowance, not a measurement."""
_SIMPLER_WINS_WITHIN = 0.02  # a simpler layout within 2 % of the fastest is chosen instead


def critical_batch_tokens(n_params: float, tokens: float) -> float:
    """DeepSeek LLM's compute-optimal batch, tokens: ``0.2920 x (6 N D)^0.3271``.

    Example:
        >>> round(critical_batch_tokens(13e9, 100e9) / 1e6, 1)
        4.2
    """
    return 0.2920 * (6.0 * n_params * tokens) ** 0.3271


def _band_pct(cal: dict[str, Any], gpu: str) -> float:
    quality = cal.get("quality") or {}
    per_gpu = (quality.get("per_gpu") or {}).get(gpu) or {}
    if per_gpu and quality.get("p90_abs_pct_error"):
        return float(max(quality["p90_abs_pct_error"], per_gpu.get("median_abs_pct_error", 0.0)))
    return DEFAULT_BAND_PCT


def _evaluate(shape, layout: Layout, *, spec, gpn, seq_len, usable_gb, target_tokens, constants,
              max_micro_batch) -> dict[str, Any]:
    best = None
    smallest = None
    for ac in (False, True):
        mbs = [2 ** k for k in range(int(math.log2(max_micro_batch)) + 1)]
        fitting = []
        for mb in mbs:
            ga = max(1, round(target_tokens / (mb * seq_len * layout.dp)))
            mem = layout_memory(shape, layout, gpu=spec, micro_batch=mb, seq_len=seq_len,
                                activation_checkpointing=ac, grad_accum=ga)
            if smallest is None or mem["total"] < smallest[0]["total"]:
                smallest = (mem, mb, ga, ac)
            if mem["total"] <= usable_gb:
                fitting.append((mb, ga, mem))
        if not fitting:
            continue
        mb, ga, mem = fitting[-1]
        t = layout_step_time(shape, layout, constants=constants, gpu=spec, gpus_per_node=gpn, micro_batch=mb,
                             seq_len=seq_len, activation_checkpointing=ac, grad_accum=ga)
        if best is None or t["tokens_per_sec_per_gpu"] > best["time"]["tokens_per_sec_per_gpu"] * 1.0001:
            best = {"micro_batch": mb, "grad_accum": ga, "activation_checkpointing": ac, "memory": mem, "time": t}
    if best is None:
        mem, mb, ga, ac = smallest
        return {"fits": False, "micro_batch": mb, "grad_accum": ga, "activation_checkpointing": ac,
                "memory": mem, "time": None}
    return {"fits": True, **best}


def _layout_sentence(layout: Layout, gpn: int) -> str:
    if layout.pp > 1 and layout.tp > 1:
        return (f"3-D: {layout.pp} pipeline stages, each layer split over {layout.tp} GPUs, FSDP over "
                f"{layout.dp_shard} copies")
    if layout.pp > 1:
        return f"the layers cut into {layout.pp} pipeline stages, FSDP over {layout.dp_shard} GPUs in each"
    if layout.tp > 1:
        return f"every layer split over {layout.tp} GPUs of a node (tensor parallel), FSDP over {layout.dp_shard} groups"
    if layout.dp_replicate > 1:
        return (f"model state sharded over the {layout.dp_shard} GPUs of a node and copied on each of "
                f"{layout.dp_replicate} nodes (HSDP)")
    if layout.dp_shard == 1:
        return "the whole model on one GPU"
    return f"model state sharded over all {layout.dp_shard} GPUs (FSDP)"


def _why_loses(row: dict, win: dict, spec) -> str:
    """One or two sentences a reader without a systems background follows."""
    name, lay = row["layout"], row["_layout"]
    if not row["fits"]:
        return (f"{name} does not fit: even its smallest setting needs {row['memory']['total']:.0f} GB per GPU, "
                f"more than the {row['usable_gb']:.0f} GB an {spec.name} can safely use, so the job would "
                "stop with an out-of-memory error.")
    slower = 1 - row["tokens_per_sec_per_gpu"] / win["tokens_per_sec_per_gpu"]
    if slower <= 0:  # the winner is the simplest layout within the margin of the fastest
        return (f"{name} is predicted {-slower:.0%} faster than {win['layout']}, within the model's margin, so the "
                f"simpler {win['layout']} is chosen: it needs no extra split of the model to set up, debug or "
                "tune, and a gain this small is inside the prediction's own error.")
    lead = f"{name} is {slower:.0%} slower than {win['layout']}"
    t, w = row["time"], win["time"]
    if lay.pp > 1 and t["bubble_s"] > 0.02 * t["step_time_s"]:
        share = pipeline_bubble_fraction(lay.pp, row["grad_accum"])
        return (f"{lead}: a pipeline hands work from stage to stage, so while it fills and drains GPUs "
                f"wait; with {row['grad_accum']} micro-batches per step that idle time is {share:.0%} of "
                "every step. Pipelines pay off only when the model does not fit otherwise.")
    if lay.tp > 1 and (t["tp_comm_s"] + t["overhead_s"]) > 0.15 * t["step_time_s"]:
        return (f"{lead}: splitting every layer over {lay.tp} GPUs makes them exchange partial results "
                f"{4 if not row['activation_checkpointing'] else 6} times per layer while nothing else can run, "
                "and each GPU gets smaller pieces of arithmetic; the model already fits without it, so the split "
                "only adds waiting.")
    if lay.dp_replicate > 1:
        return (f"{lead}: HSDP keeps a whole copy of the model state in every node, so each GPU holds "
                f"{row['memory']['static']:.0f} GB of it instead of {win['memory']['static']:.0f} GB, leaving less "
                "room for the work itself" + (" (it must recompute activations to fit)"
                                              if row["activation_checkpointing"] else "")
                + "; the cross-node traffic it saves was already hidden behind computation.")
    if row["activation_checkpointing"] and not win["activation_checkpointing"]:
        return (f"{lead}: to fit it must recompute each layer's forward pass during the backward pass "
                "(activation checkpointing), a third more arithmetic per token.")
    worst = max(("exposed_comm_s", "tp_comm_s", "overhead_s", "bubble_s"), key=lambda k: t[k] - w.get(k, 0.0))
    what = {"exposed_comm_s": "more time waiting for the network", "tp_comm_s": "more time exchanging partial results",
            "overhead_s": "more time on the fixed cost every micro-batch carries (it runs more, smaller ones)",
            "bubble_s": "pipeline idle time"}[worst]
    return f"{lead}: its steps spend {what} ({t[worst]:.2f} s vs {w.get(worst, 0.0):.2f} s per step)."


def plan_training(model_size: float | int | str, gpu_count: int, *, tokens: float, gpu: str = "H100-80GB",
                  gpus_per_node: int = 8, inter_node_gbps: float | None = None, seq_len: int = 2048,
                  storage_write_gbs_per_node: float = 2.0,
                  failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR,
                  cost_per_gpu_hour: float | None = None, global_batch_tokens: float | None = None,
                  calibration: dict[str, Any] | str | Path | None = None, memory_headroom: float = 0.10,
                  max_lost_work_minutes: float = 30.0, max_micro_batch: int = 64) -> dict[str, Any]:
    """A training plan: every applicable layout compared, one chosen, with batch and checkpoints.

    Args:
        model_size: ``13b``, ``7e9``, a preset name.
        gpu_count: GPUs of the job.
        tokens: tokens to train on.
        gpu: ``H100-80GB``, ``A100-80GB``, ``A100-40GB``, ``H200-141GB`` (or ``cpu``).
        gpus_per_node: GPUs per node (NVLink inside).
        inter_node_gbps: network per GPU between nodes, Gb/s (default: the GPU's reference
            node, e.g. 400 Gb/s InfiniBand per H100 on DGX H100).
        seq_len: tokens per sequence.
        storage_write_gbs_per_node: shared-storage write bandwidth per node, GB/s.
        failures_per_gpu_hour: default from Llama 3's published interruptions.
        cost_per_gpu_hour: price, for the cost line (None: no cost).
        global_batch_tokens: the team's global batch target in tokens (None: the
            compute-optimal batch, see :func:`critical_batch_tokens`).
        calibration: a calibration dict or JSON path (None: the shipped default).
        memory_headroom: share of device memory kept free.
        max_lost_work_minutes: the checkpoint plan's limit on lost work.
        max_micro_batch: largest micro-batch considered.

    Returns:
        A dict: ``inputs``, ``layouts`` (one row per layout: memory by part, fits, headroom,
        batch, steps, warnings, tokens/s/GPU with ``band``, MFU, wall hours, GPU-hours, cost,
        ``why_not``), ``chosen`` (the winning row), ``checkpoint``, ``batch_guidance``, ``source``.

    Raises:
        ValueError: bad arguments (the message names the argument).

    Example:
        >>> p = plan_training("13b", 32, tokens=100e9)
        >>> p["chosen"]["layout"], p["chosen"]["fits"]
        ('fsdp', True)
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    for name, value in (("gpu_count", gpu_count), ("gpus_per_node", gpus_per_node), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name, value in (("tokens", tokens), ("storage_write_gbs_per_node", storage_write_gbs_per_node)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if inter_node_gbps is not None:
        if not inter_node_gbps > 0:
            raise ValueError(f"inter_node_gbps must be > 0, got {inter_node_gbps!r}")
        spec = dataclasses.replace(spec, net_gbs_per_gpu=inter_node_gbps / 8)
    cal = _as_calibration(calibration)
    constants, source = resolve_constants(cal, spec.name)
    band_pct = _band_pct(cal, spec.name)
    usable_gb = spec.memory_gb * (1 - memory_headroom)
    gpn = min(gpus_per_node, gpu_count)
    crit = critical_batch_tokens(shape.n_params, tokens)
    target = float(global_batch_tokens) if global_batch_tokens else crit

    rows = []
    for layout in candidate_layouts(gpu_count, gpn, shape.arch.n_layers):
        ev = _evaluate(shape, layout, spec=spec, gpn=gpn, seq_len=seq_len, usable_gb=usable_gb,
                       target_tokens=target, constants=constants, max_micro_batch=max_micro_batch)
        mem = ev["memory"]
        row: dict[str, Any] = {
            "layout": layout.name, "_layout": layout, "description": _layout_sentence(layout, gpn),
            "dp_shard": layout.dp_shard, "dp_replicate": layout.dp_replicate, "tp": layout.tp, "pp": layout.pp,
            "workload_knobs": layout.workload_knobs(), "fits": ev["fits"], "memory": mem,
            "usable_gb": usable_gb, "headroom_gb": usable_gb - mem["total"],
            "micro_batch": ev["micro_batch"], "grad_accum": ev["grad_accum"],
            "activation_checkpointing": ev["activation_checkpointing"], "time": ev["time"], "warnings": []}
        gb_seqs = ev["micro_batch"] * ev["grad_accum"] * layout.dp
        gb_tokens = gb_seqs * seq_len
        steps = math.ceil(tokens / gb_tokens)
        row.update(global_batch=gb_seqs, global_batch_tokens=gb_tokens, steps=steps)
        if steps < MIN_STEPS:
            row["warnings"].append(f"only {steps} optimizer steps: too few for a learning-rate schedule; "
                                   "use a smaller global batch or more tokens")
        last = tokens - (steps - 1) * gb_tokens
        if last < gb_tokens * 0.999:
            row["warnings"].append(f"the last step is only {last / gb_tokens:.0%} filled "
                                   f"({tokens:.3g} tokens is not a multiple of {gb_tokens:,} per step)")
        if ev["time"]:
            t = ev["time"]
            tps = t["tokens_per_sec_per_gpu"]
            widen = 1 if layout.tp == layout.pp == 1 else 2  # TP / PP parts are not calibrated
            b = band_pct * widen / 100
            wall_h = tokens / (tps * gpu_count) / 3600
            row.update(tokens_per_sec_per_gpu=tps, band_pct=band_pct * widen, band=[tps * (1 - b), tps * (1 + b)],
                       mfu=t["mfu"], step_time_s=t["step_time_s"], wall_hours=wall_h,
                       wall_hours_band=[wall_h / (1 + b), wall_h / (1 - b)], gpu_hours=wall_h * gpu_count,
                       cost=wall_h * gpu_count * cost_per_gpu_hour if cost_per_gpu_hour else None)
        else:
            row.update(tokens_per_sec_per_gpu=None, band=None, mfu=None, step_time_s=None, wall_hours=None,
                       gpu_hours=None, cost=None, band_pct=None)
        rows.append(row)

    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        raise ValueError(f"{shape.label} does not fit on {gpu_count} x {spec.name} in any layout "
                         f"(smallest: {min(r['memory']['total'] for r in rows):.0f} GB per GPU vs "
                         f"{usable_gb:.0f} GB usable); add GPUs or shorten seq_len")
    fastest = max(r["tokens_per_sec_per_gpu"] for r in fitting)
    complexity = {r["layout"]: (r["pp"] > 1, r["tp"], r["dp_replicate"] > 1) for r in rows}
    near = [r for r in fitting if r["tokens_per_sec_per_gpu"] >= fastest * (1 - _SIMPLER_WINS_WITHIN)]
    chosen = min(near, key=lambda r: complexity[r["layout"]])
    for r in rows:
        r["why_not"] = None if r is chosen else _why_loses(r, chosen, spec)
    nodes = math.ceil(gpu_count / gpn)
    ckpt = checkpoint_plan(shape.n_params, gpu_count=gpu_count, nodes=nodes, step_time_s=chosen["step_time_s"],
                           storage_write_gbs_per_node=storage_write_gbs_per_node,
                           failures_per_gpu_hour=failures_per_gpu_hour, max_lost_work_minutes=max_lost_work_minutes)
    reasons = [f"{chosen['layout']}: {chosen['description']}. It fits with {chosen['headroom_gb']:.0f} GB to "
               f"spare per GPU at micro-batch {chosen['micro_batch']} and is the fastest layout that fits"
               + (" (or within 2 % of it, and simpler)." if chosen["tokens_per_sec_per_gpu"] < fastest else ".")]
    reasons += [r["why_not"] for r in rows if r["why_not"]]
    for r in rows:
        r.pop("_layout")
    return {
        "inputs": {"model": shape.label, "n_params": shape.n_params, "model_note": shape.note,
                   "gpu": spec.name, "gpu_count": gpu_count, "gpus_per_node": gpn, "nodes": nodes,
                   "inter_node_gbps": spec.net_gbs_per_gpu * 8, "seq_len": seq_len, "tokens": tokens,
                   "storage_write_gbs_per_node": storage_write_gbs_per_node,
                   "failures_per_gpu_hour": failures_per_gpu_hour, "cost_per_gpu_hour": cost_per_gpu_hour,
                   "memory_capacity_gb": spec.memory_gb, "memory_headroom": memory_headroom},
        "batch_guidance": {"critical_batch_tokens": crit, "target_tokens": target,
                           "target_source": "team target" if global_batch_tokens else
                           "compute-optimal batch (DeepSeek LLM scaling law, arXiv 2401.02954)"},
        "layouts": rows, "chosen": chosen, "reasons": reasons, "checkpoint": ckpt,
        "source": source, "band_pct": band_pct,
        "proxy": {"gpu_cluster": {"model_size": "1.3b", "gpu_count": 4},
                  "cpu": {"preset": "tiny", "processes": 2}},
    }


def dataset_global_batch(n_params: float, examples: int, *, mean_tokens_per_example: float, seq_len: int,
                         padding: str, gpu_count: int) -> tuple[int, str, list[str]]:
    """A global batch (sequences, a multiple of ``gpu_count``) for one epoch of ``examples``.

    The compute-optimal batch (:func:`critical_batch_tokens`) for the epoch's tokens, capped so
    that an epoch has at least :data:`MIN_STEPS` steps, and at least one sequence per GPU.
    Returns ``(global_batch, reason, warnings)``.

    Example:
        >>> gb, why, warn = dataset_global_batch(7e9, 52_000, mean_tokens_per_example=256, seq_len=2048,
        ...                                      padding="packed", gpu_count=32)
        >>> gb, warn
        (64, [])
    """
    mean = min(float(mean_tokens_per_example), float(seq_len))
    tokens = examples * mean
    seqs = tokens / seq_len if padding == "packed" else float(examples)
    per_seq = seq_len if padding == "packed" else mean
    target = critical_batch_tokens(n_params, tokens) / per_seq
    cap = seqs / MIN_STEPS
    gb = max(gpu_count, int(min(target, cap) // gpu_count) * gpu_count)
    steps = math.ceil(seqs / gb)
    reason = (f"{gb} sequences: the compute-optimal batch for {tokens:.3g} tokens is ~{target:,.0f} sequences "
              f"(DeepSeek LLM scaling law), capped so an epoch of ~{seqs:,.0f} sequences has >= {MIN_STEPS} steps "
              f"({steps} here), at least one per GPU")
    warnings = []
    if steps < MIN_STEPS:
        warnings.append(f"tiny epoch: {examples:,} examples make only {steps} optimizer steps even at one sequence "
                        f"per GPU; train several epochs, use fewer GPUs, or a shorter seq_len")
    return gb, reason, warnings
