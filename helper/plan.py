"""``plan_training``: which layout, batch, throughput, cost and checkpoint cadence for a run.

Every layout that applies (:func:`helper.layouts.candidate_layouts`) is compared under one
recipe: the same global batch (:func:`helper.global_batch.common_global_batch`), split per layout
into the largest micro-batch that fits memory with headroom (with and without activation
checkpointing) and the accumulation that reaches it. Each is costed as it runs
(:mod:`helper.layouts`), tokens/s/GPU carries a band from held-out error (:mod:`helper.band`),
and the fastest wins unless a simpler one is within 2 %. The global batch is the team's own
target, else the compute-optimal batch of DeepSeek LLM's scaling law (arXiv 2401.02954,
Sec. 3.1: ``B_opt = 0.2920 C^0.3271`` tokens for a compute budget of ``C`` FLOPs, here
``C = 6 N D``), a guide below which steps waste GPU time and above which extra tokens per step
stop buying progress (the "critical batch size", McCandlish et al. 2018, arXiv 1812.06162).
The processes launched are the GPUs planned: :func:`node_split` spreads them evenly over nodes
or refuses the count.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from helper.band import band_pct
from helper.calibration import _as_calibration, resolve_constants
from helper.checkpointing import LLAMA3_FAILURES_PER_GPU_HOUR, REQUEUE_WAIT_S, SLURMD_TIMEOUT_S, checkpoint_plan
from helper.global_batch import BATCH_TOLERANCE, common_global_batch, micro_batch_candidates
from helper.go_no_go import go_no_go_thresholds
from helper.gpus import get_gpu, gib
from helper.layouts import Layout, candidate_layouts, layout_memory, layout_step_time
from helper.plan_reasons import layout_sentence, why_loses
from helper.sizes import parse_model_size
from helper.stacks import resolve_stack
from helper.throughput import estimate_startup_seconds

__all__ = ["plan_training", "critical_batch_tokens", "dataset_global_batch", "node_split", "idle_gpus_note", "MIN_STEPS",
           "LOW_MFU"]

MIN_STEPS = 100
"""Fewer optimizer steps than this and a learning-rate schedule (warm-up, decay) has little room."""
LOW_MFU = 0.20
"""Under 20 % MFU the GPUs mostly wait: published FSDP runs reach 33-64 % (helper.calibration's
``compute_efficiency`` prior, MosaicML's llm-foundry tables); fewer GPUs would do the same work
for fewer GPU-hours. An operating threshold."""
_SIMPLER_WINS_WITHIN = 0.02  # a simpler layout within 2 % of the fastest is chosen instead
_UNCALIBRATED_WIDEN = 2.0  # TP and PP rows: no held-out TP/PP figure, so their band is doubled


def critical_batch_tokens(n_params: float, tokens: float) -> float:
    """DeepSeek LLM's compute-optimal batch, tokens: ``0.2920 x (6 N D)^0.3271``.

    Example:
        >>> round(critical_batch_tokens(13e9, 100e9) / 1e6, 1)
        4.2
    """
    return 0.2920 * (6.0 * n_params * tokens) ** 0.3271


def idle_gpus_note(gpu_count: int, gpus_per_node: int) -> str | None:
    """The warning when :func:`node_split` leaves GPUs of each node idle, or None.

    Example:
        >>> idle_gpus_note(12, 8), idle_gpus_note(16, 8)
        ('12 GPUs run as 2 nodes x 6: 2 GPUs of each node stay idle (a multiple of the node size uses them)', None)
    """
    nodes, per = node_split(gpu_count, gpus_per_node)
    if per < gpus_per_node and nodes > 1:
        return (f"{gpu_count} GPUs run as {nodes} nodes x {per}: {gpus_per_node - per} GPUs of each node stay idle "
                "(a multiple of the node size uses them)")
    return None


def node_split(gpu_count: int, gpus_per_node: int) -> tuple[int, int]:
    """``(nodes, GPUs used per node)`` with ``nodes x per_node == gpu_count``, or a one-line ValueError.

    One partial node, whole nodes, or equal nodes of at least half a node each (12 GPUs on nodes
    of 8: 2 x 6); anything else cannot launch one process per planned GPU.

    Example:
        >>> node_split(32, 8), node_split(4, 8), node_split(12, 8)
        ((4, 8), (1, 4), (2, 6))
    """
    if gpu_count <= gpus_per_node:
        return 1, gpu_count
    for per in range(gpus_per_node, (gpus_per_node + 1) // 2 - 1, -1):
        if per >= 1 and gpu_count % per == 0:
            return gpu_count // per, per
    ok = [n for n in range(1, 2 * gpu_count + gpus_per_node + 1) if _splits(n, gpus_per_node)]
    below = max(n for n in ok if n < gpu_count)
    above = min(n for n in ok if n > gpu_count)
    raise ValueError(f"gpu_count {gpu_count} cannot be spread evenly over nodes of {gpus_per_node} GPUs (one process "
                     f"per GPU): use {below} or {above}, any count up to {gpus_per_node}, a multiple of {gpus_per_node}, "
                     f"or equal nodes of {(gpus_per_node + 1) // 2}-{gpus_per_node} GPUs")


def _splits(n: int, g: int) -> bool:
    return n <= g or any(n % per == 0 for per in range(g, (g + 1) // 2 - 1, -1) if per >= 1)


def _evaluate(shape, layout: Layout, *, spec, gpn, seq_len, usable_gb, global_batch, constants,
              max_micro_batch, stack=None) -> dict[str, Any]:
    """The fastest (micro-batch, accumulation, checkpointing) of ``layout`` at ``global_batch`` sequences.

    Every micro-batch that fits and reaches the batch within its tolerance is timed, not only the
    largest: a pipeline fills its stages with more, smaller micro-batches."""
    rows = global_batch / layout.dp
    best, smallest = None, None
    for ac in (False, True):
        for mb in micro_batch_candidates(max(1, round(rows)), max_micro_batch):
            ga = max(1, round(rows / mb))
            if abs(mb * ga * layout.dp - global_batch) > BATCH_TOLERANCE * global_batch:
                continue
            mem = layout_memory(shape, layout, gpu=spec, micro_batch=mb, seq_len=seq_len, activation_checkpointing=ac,
                                grad_accum=ga, stack=stack)
            if smallest is None or mem["total"] < smallest[0]["total"]:
                smallest = (mem, mb, ga, ac)
            if mem["total"] > usable_gb:
                continue
            t = layout_step_time(shape, layout, constants=constants, gpu=spec, gpus_per_node=gpn, micro_batch=mb,
                                 seq_len=seq_len, activation_checkpointing=ac, grad_accum=ga, stack=stack)
            if best is None or t["tokens_per_sec_per_gpu"] > best["time"]["tokens_per_sec_per_gpu"] * 1.0001:
                best = {"micro_batch": mb, "grad_accum": ga, "activation_checkpointing": ac, "memory": mem, "time": t}
    if best is None:
        mem, mb, ga, ac = smallest
        return {"fits": False, "micro_batch": mb, "grad_accum": ga, "activation_checkpointing": ac,
                "memory": mem, "time": None}
    return {"fits": True, **best}


def _row_warnings(row: dict, *, tokens: float, target_tokens: float, seq_len: int) -> list[str]:
    out = []
    if row["steps"] < MIN_STEPS:
        out.append(f"only {row['steps']} optimizer steps: too few for a learning-rate schedule; "
                   "use a smaller global batch or more tokens")
    extra = row["steps"] * row["global_batch_tokens"] - tokens
    if extra > 0.01 * tokens:
        out.append(f"{row['steps']} whole steps of {row['global_batch_tokens']:,} tokens train {extra / tokens:.0%} more "
                   f"than the {tokens:.3g} tokens asked for")
    if abs(row["global_batch_tokens"] / target_tokens - 1) > BATCH_TOLERANCE + 1e-9:
        out.append(f"the global batch is {row['global_batch_tokens'] / 1e6:.2f}M tokens, "
                   f"{row['global_batch_tokens'] / target_tokens - 1:+.0%} from the {target_tokens / 1e6:.2f}M target: "
                   "the nearest batch every layout can run")
    if row.get("mfu") is not None and row["mfu"] < LOW_MFU:
        out.append(f"MFU {row['mfu']:.0%} is low (published FSDP runs reach 33-64 %): the GPUs mostly wait on "
                   "communication and fixed costs; fewer GPUs, a longer seq_len or a larger batch would use them better")
    return out


def plan_training(model_size: float | int | str, gpu_count: int, *, tokens: float, gpu: str = "H100-80GB",
                  gpus_per_node: int = 8, inter_node_gbps: float | None = None, seq_len: int = 2048,
                  storage_write_gbs_per_node: float = 2.0,
                  failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR,
                  cost_per_gpu_hour: float | None = None, global_batch_tokens: float | None = None,
                  calibration: dict[str, Any] | str | Path | None = None, memory_headroom: float = 0.10,
                  max_lost_work_minutes: float = 30.0, max_micro_batch: int = 64, spare_nodes: int | None = None,
                  slurmd_timeout_s: float = SLURMD_TIMEOUT_S,
                  requeue_wait_s: float = REQUEUE_WAIT_S, stack: str | None = None) -> dict[str, Any]:
    """A training plan: every applicable layout compared, one chosen, with batch and checkpoints.

    Args:
        model_size: ``13b``, ``7e9``, a preset name.
        gpu_count: GPUs of the job (one process each; see :func:`node_split`).
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
        spare_nodes: idle nodes held for a relaunch (None: one from 8 nodes up).
        slurmd_timeout_s: the cluster's ``SlurmdTimeout`` (how long a dead node goes unnoticed).
        requeue_wait_s: wait for a node after a requeue, without a spare.
        stack: the training stack (a :mod:`helper.stacks` preset; None: ``hf-sdpa`` for Llama
            shapes): what checkpointing keeps, the attention kernel, accumulation.

    Returns:
        A dict: ``inputs``, ``layouts`` (one row per layout: ``memory_gib`` by part, fits,
        ``headroom_gib``, batch, steps, warnings, tokens/s/GPU with ``band``, MFU, wall hours,
        GPU-hours, cost, ``why_not``), ``chosen`` (the winning row), ``checkpoint``,
        ``go_no_go`` (launch-check thresholds), ``batch_guidance``, ``band_source``, ``source``.

    Raises:
        ValueError: bad arguments (the message names the argument).

    Example:
        >>> p = plan_training("13b", 32, tokens=100e9)
        >>> p["chosen"]["fits"], len({r["global_batch"] for r in p["layouts"]})
        (True, 1)
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
    if spare_nodes is not None and (isinstance(spare_nodes, bool) or not isinstance(spare_nodes, int) or spare_nodes < 0):
        raise ValueError(f"spare_nodes must be an integer >= 0, got {spare_nodes!r}")
    nodes, gpn = node_split(gpu_count, gpus_per_node)
    cal = _as_calibration(calibration)
    constants, source = resolve_constants(cal, spec.name)
    band, band_source = band_pct(cal, spec.name, gpu_count)
    usable_gb = spec.memory_gb * (1 - memory_headroom)
    crit = critical_batch_tokens(shape.n_params, tokens)
    target = float(global_batch_tokens) if global_batch_tokens else crit
    layouts = candidate_layouts(gpu_count, gpn, shape.arch.n_layers)
    global_batch = common_global_batch(target / seq_len, [lay.dp for lay in layouts])
    gb_tokens = global_batch * seq_len
    steps = math.ceil(tokens / gb_tokens)

    rows = []
    for layout in layouts:
        ev = _evaluate(shape, layout, spec=spec, gpn=gpn, seq_len=seq_len, usable_gb=usable_gb,
                       global_batch=global_batch, constants=constants, max_micro_batch=max_micro_batch,
                       stack=stack)
        realized = ev["micro_batch"] * ev["grad_accum"] * layout.dp
        row: dict[str, Any] = {
            "layout": layout.name, "description": layout_sentence(layout),
            "dp_shard": layout.dp_shard, "dp_replicate": layout.dp_replicate, "tp": layout.tp, "pp": layout.pp,
            "workload_knobs": layout.workload_knobs(), "fits": ev["fits"],
            "memory_gib": {k: gib(v) for k, v in ev["memory"].items()},
            "usable_gib": gib(usable_gb), "headroom_gib": gib(usable_gb - ev["memory"]["total"]),
            "micro_batch": ev["micro_batch"], "grad_accum": ev["grad_accum"],
            "activation_checkpointing": ev["activation_checkpointing"], "time": ev["time"],
            "global_batch": realized, "global_batch_tokens": realized * seq_len,
            "steps": math.ceil(tokens / (realized * seq_len))}
        if ev["time"]:
            t = ev["time"]
            tps = t["tokens_per_sec_per_gpu"]
            pct = band * (1 if layout.tp == layout.pp == 1 else _UNCALIBRATED_WIDEN)
            b = pct / 100
            wall_h = tokens / (tps * gpu_count) / 3600
            row.update(tokens_per_sec_per_gpu=tps, band_pct=pct, band=[tps * (1 - b), tps * (1 + b)],
                       mfu=t["mfu"], step_time_s=t["step_time_s"], wall_hours=wall_h,
                       wall_hours_band=[wall_h / (1 + b), wall_h / (1 - b)], gpu_hours=wall_h * gpu_count,
                       cost=wall_h * gpu_count * cost_per_gpu_hour if cost_per_gpu_hour else None)
        else:
            row.update(tokens_per_sec_per_gpu=None, band=None, mfu=None, step_time_s=None, wall_hours=None,
                       gpu_hours=None, cost=None, band_pct=None)
        row["warnings"] = _row_warnings(row, tokens=tokens, target_tokens=target, seq_len=seq_len)
        rows.append(row)

    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        raise ValueError(f"{shape.label} does not fit on {gpu_count} x {spec.name} in any layout "
                         f"(smallest: {min(r['memory_gib']['total'] for r in rows):.1f} GiB per GPU vs "
                         f"{gib(usable_gb):.1f} GiB usable); add GPUs or shorten seq_len")
    fastest = max(r["tokens_per_sec_per_gpu"] for r in fitting)
    complexity = {r["layout"]: (r["pp"] > 1, r["tp"], r["dp_replicate"] > 1) for r in rows}
    near = [r for r in fitting if r["tokens_per_sec_per_gpu"] >= fastest * (1 - _SIMPLER_WINS_WITHIN)]
    chosen = min(near, key=lambda r: complexity[r["layout"]])
    for r in rows:
        r["why_not"] = None if r is chosen else why_loses(r, chosen, spec.name)
    # A restart builds the model on the meta device and loads the checkpoint (reload_s, counted apart):
    # start-up to the first step is the fixed part and the rendezvous, not a full initialisation.
    parts = estimate_startup_seconds(shape, gpu_count, gpu=spec.name, gpus_per_node=gpn, calibration=cal).details
    startup = parts["fixed_s"] + parts["rendezvous_s"]
    ckpt = checkpoint_plan(shape.n_params, gpu_count=gpu_count, nodes=nodes, step_time_s=chosen["step_time_s"],
                           storage_write_gbs_per_node=storage_write_gbs_per_node,
                           failures_per_gpu_hour=failures_per_gpu_hour, max_lost_work_minutes=max_lost_work_minutes,
                           startup_s=float(startup), spare_nodes=spare_nodes, slurmd_timeout_s=slurmd_timeout_s,
                           requeue_wait_s=requeue_wait_s)
    spare_gpu_hours = ckpt["spare_nodes"] * gpn * chosen["wall_hours"]
    chosen.update(spare_gpu_hours=spare_gpu_hours,
                  spare_cost=spare_gpu_hours * cost_per_gpu_hour if cost_per_gpu_hour else None)
    reasons = [f"{chosen['layout']}: {chosen['description']}. It fits with {chosen['headroom_gib']:.1f} GiB to "
               f"spare per GPU at micro-batch {chosen['micro_batch']} and is the fastest layout that fits"
               + (" (or within 2 % of it, and simpler)." if chosen["tokens_per_sec_per_gpu"] < fastest else ".")]
    reasons += [r["why_not"] for r in rows if r["why_not"]]
    if (idle := idle_gpus_note(gpu_count, gpus_per_node)):
        chosen["warnings"].append(idle)
    return {
        "inputs": {"model": shape.label, "n_params": shape.n_params, "model_note": shape.note,
                   "gpu": spec.name, "gpu_count": gpu_count, "gpus_per_node": gpn, "node_size": gpus_per_node,
                   "nodes": nodes, "inter_node_gbps": spec.net_gbs_per_gpu * 8, "seq_len": seq_len, "tokens": tokens,
                   "storage_write_gbs_per_node": storage_write_gbs_per_node,
                   "failures_per_gpu_hour": failures_per_gpu_hour, "cost_per_gpu_hour": cost_per_gpu_hour,
                   "memory_capacity_gib": spec.memory_gib, "memory_headroom": memory_headroom,
                   "stack": resolve_stack(stack, shape).name},
        "batch_guidance": {"critical_batch_tokens": crit, "target_tokens": target,
                           "global_batch": global_batch, "global_batch_tokens": gb_tokens, "steps": steps,
                           "target_source": "team target" if global_batch_tokens else
                           "compute-optimal batch (DeepSeek LLM scaling law, arXiv 2401.02954)"},
        "layouts": rows, "chosen": chosen, "reasons": reasons, "checkpoint": ckpt,
        "go_no_go": go_no_go_thresholds(spec=spec, constants=constants, nodes=nodes, gpus_per_node=gpn,
                                        chosen=chosen, checkpoint=ckpt, usable_gb=usable_gb),
        "source": source, "band_pct": band, "band_source": band_source,
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
