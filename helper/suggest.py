"""``suggest_config``: (model size, GPUs, dataset size) -> launch settings, with reasons.

The choice, in order: the largest micro-batch the memory model fits with headroom, with and
without activation checkpointing (and, under accumulation, with FSDP2's no-sync flavour or a
reduce-scatter every micro-batch), keeping the fastest by the throughput model;
grad_accum to reach ``global_batch``; DataLoader workers so tokenising never stalls a step;
NCCL settings left to NCCL unless the calibration measured a gain; a checkpoint interval that
bounds the work a node failure can lose.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from helper.calibration import _as_calibration, extrapolation_note, resolve_constants
from helper.checkpointing import checkpoint_plan
from helper.collectives import UnsupportedCollective
from helper.global_batch import BATCH_TOLERANCE, split_global_batch
from helper.gpus import get_gpu, gib
from helper.memory import estimate_memory, normalize_sharding
from helper.plan import dataset_global_batch, idle_gpus_note, node_split, plan_training
from helper.sizes import parse_dataset_size, parse_model_size
from helper.stacks import resolve_stack
from helper.throughput import (
    DEFAULT_MEAN_TOKENS_PER_EXAMPLE,
    estimate_padding_efficiency,
    estimate_startup_seconds,
    plan_step,
    step_time_breakdown,
)

__all__ = ["suggest_config", "explain", "format_breakdown", "DEFAULT_MEMORY_HEADROOM"]

DEFAULT_MEMORY_HEADROOM = 0.10
"""Share of device memory kept free on top of the model's own overhead allowance."""
_PREFETCH_FACTOR = 2  # PyTorch DataLoader's default; see the rationale
_MIN_GAIN = 0.03  # a forced NCCL setting must beat `default` by 3 % to be suggested
_NCCL_TRIALS = {"proto_bw_factor_ll128": ("default", "LL128"), "proto_bw_factor_ll": ("default", "LL"),
                "algo_bw_factor_nvls": ("NVLS", "default"), "algo_bw_factor_tree": ("Tree", "default"),
                "algo_bw_factor_pat": ("PAT", "default")}


def _fits(shape, n, stage, mb, seq_len, ac, ga, spec, usable_gb,
          every: bool = False, stack=None) -> tuple[bool, dict[str, float]]:
    mem = estimate_memory(shape, n, sharding=stage, micro_batch=mb, seq_len=seq_len,
                          activation_checkpointing=ac, grad_accum=ga, gpu=spec,
                          reduce_scatter_every_micro_step=every, stack=stack)
    return mem["total"] <= usable_gb, mem


def _impossible(shape, n, stage, seq_len, spec, usable_gb, headroom, stack=None) -> ValueError:
    ok, mem = _fits(shape, n, stage, 1, seq_len, True, 1, spec, usable_gb, stack=stack)
    lines = [f"{shape.label} ({shape.n_params / 1e9:.3g}e9 params) does not fit on {n} x {spec.name} "
             f"with {stage}: micro_batch 1 with activation checkpointing needs {gib(mem['total']):.1f} GiB "
             f"per GPU (model state {gib(mem['static']):.1f}), above the {gib(usable_gb):.1f} GiB usable "
             f"({spec.memory_gib:.1f} GiB less {headroom:.0%} headroom)."]
    min_gpus = next((k for k in range(n + 1, 65537)
                     if _fits(shape, k, "zero3", 1, seq_len, True, 1, spec, usable_gb)[0]), None)
    if min_gpus:
        lines.append(f"It fits on at least {min_gpus} x {spec.name} with zero3 (fsdp).")
    lo, hi = 1e6, shape.n_params
    if _fits(parse_model_size(lo), n, "zero3", 1, seq_len, True, 1, spec, usable_gb)[0]:
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            if _fits(parse_model_size(mid), n, "zero3", 1, seq_len, True, 1, spec, usable_gb)[0]:
                lo = mid
            else:
                hi = mid
        lines.append(f"On {n} x {spec.name} a model of at most ~{lo / 1e9:.3g}e9 params fits (zero3).")
    else:
        lines.append(f"Even a tiny model's activations at seq_len {seq_len} exceed it: shorten seq_len.")
    return ValueError(" ".join(lines))


def _planned_layout(model_size, gpu_count, spec, seq_len, gpus_per_node, tokens, global_batch, cal,
                    headroom, stack=None) -> tuple[str, str]:
    """The layout ``plan_training`` chooses for this job, and why (one sentence)."""
    try:
        plan = plan_training(model_size, gpu_count, tokens=tokens, gpu=spec.name, gpus_per_node=gpus_per_node,
                             seq_len=seq_len, global_batch_tokens=global_batch * seq_len, calibration=cal,
                             memory_headroom=headroom, stack=stack)
    except ValueError as exc:
        return "none", f"no layout fits: {exc}"
    chosen = plan["chosen"]["layout"]
    note = (f"{chosen} ({plan['chosen']['description']}): the fastest of the {len(plan['layouts'])} layouts "
            "`tuner plan` compares that fit.")
    if chosen != "fsdp":
        note += " The knobs below are for FSDP; `tuner plan` gives this layout's batch and memory."
    return chosen, note


def suggest_config(model_size: float | int | str, gpu_count: int, dataset_size: int | float | str, *,
                   seq_len: int = 2048, gpu: str = "H100-80GB", gpus_per_node: int = 8,
                   global_batch: int | None = None, sharding: str = "fsdp",
                   calibration: dict[str, Any] | str | Path | None = None,
                   mean_tokens_per_example: float = DEFAULT_MEAN_TOKENS_PER_EXAMPLE,
                   padding: str = "packed", memory_headroom: float = DEFAULT_MEMORY_HEADROOM,
                   max_micro_batch: int = 64, max_lost_work_minutes: float = 30.0,
                   checkpoint_write_gbs_per_node: float = 2.0, stack: str | None = None) -> dict[str, Any]:
    """Launch settings for fine-tuning ``model_size`` on ``gpu_count`` GPUs, with reasons.

    Args:
        model_size: ``7e9``, ``"7b"``, ``"13B"``, ``"1.3b"`` or a preset name.
        gpu_count: GPUs of the job.
        dataset_size: examples in one epoch: ``52000`` or ``"52k"``.
        seq_len: tokens per row.
        gpu: ``A100-40GB``, ``A100-80GB``, ``H100-80GB``, ``H200-141GB`` (or ``cpu``).
        gpus_per_node: GPUs per node.
        global_batch: sequences per optimizer step; None targets one from the dataset size
            (``helper.plan.dataset_global_batch``: compute-optimal, >= 100 steps per epoch).
        sharding: ``fsdp`` (= ``zero3``), ``zero2``, ``zero1``, ``ddp``.
        calibration: a calibration dict or JSON path (``tuner distill``); None = shipped default.
        mean_tokens_per_example: average tokenised example length, an assumption (default 256).
        padding: ``packed`` (default), ``longest`` or ``max_length``: how rows are filled.
        memory_headroom: share of device memory left free on top of the model's allowances.
        max_micro_batch: largest micro-batch considered.
        max_lost_work_minutes: work a node failure may cost at most (checkpoint interval).
        checkpoint_write_gbs_per_node: assumed checkpoint write bandwidth per node, GB/s.
        stack: the training stack (a :mod:`helper.stacks` preset; None: ``hf-sdpa``, tuner's
            workload, for Llama shapes): what checkpointing keeps, the attention kernel, the
            reduce dtype and how gradients accumulate (only FSDP2's no-sync stacks choose
            ``reduce_scatter_every_micro_step``).

    Returns:
        A dict: the knobs (``micro_batch``, ``grad_accum``, ``num_workers``,
        ``prefetch_factor``, ``nccl_algo``, ``nccl_proto``, ``activation_checkpointing``,
        ``padding``, ``reduce_scatter_every_micro_step``: True when FSDP2's no-sync
        accumulation would not fit), ``expected_tokens_per_sec_per_gpu``, ``expected_step_time_s``,
        ``epoch_wall_hours``, ``epoch_gpu_hours``, ``steps_per_epoch``, ``startup_s``,
        ``checkpoint_interval_steps`` / ``_minutes``, ``memory`` (GB per GPU by part),
        ``time`` (seconds per step by part), ``rationale`` (knob -> one sentence),
        ``assumptions``, ``source`` (the calibration used), ``layout`` (``plan_training``'s
        choice) and ``warnings`` (e.g. a tiny epoch).

    Raises:
        ValueError: the model cannot fit (the message says what would), or bad arguments.

    Example:
        >>> cfg = suggest_config("7b", 32, "52k")
        >>> cfg["micro_batch"] >= 1 and cfg["memory"]["total"] <= 80 * 0.9
        True
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    st = resolve_stack(stack, shape)
    stage = normalize_sharding(sharding)
    examples = parse_dataset_size(dataset_size)
    for name, value, low in (("gpu_count", gpu_count, 1), ("gpus_per_node", gpus_per_node, 1), ("seq_len", seq_len, 8)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    # nodes as the plan spreads them (helper.plan.node_split: 12 on nodes of 8 run as 2 x 6; a
    # count no even split reaches is a ValueError naming the nearest that are)
    nodes, per_node = node_split(gpu_count, gpus_per_node)
    split_note = idle_gpus_note(gpu_count, gpus_per_node)
    gpus_per_node = per_node if nodes > 1 else gpus_per_node
    if global_batch is not None and (isinstance(global_batch, bool) or not isinstance(global_batch, int)):
        raise ValueError(f"global_batch must be an integer, got {global_batch!r}")
    if not (isinstance(memory_headroom, (int, float)) and 0 <= memory_headroom < 1):
        raise ValueError(f"memory_headroom must be a share of device memory in [0, 1), got {memory_headroom!r}")
    if not (isinstance(mean_tokens_per_example, (int, float)) and mean_tokens_per_example > 0):
        raise ValueError(f"mean_tokens_per_example must be > 0, got {mean_tokens_per_example!r}")
    cal = _as_calibration(calibration)
    constants, source = resolve_constants(cal, spec.name)
    # Say when the model and GPU count lie outside what the calibration was fitted to (issue 13).
    source += extrapolation_note(cal, spec.name, n_params=shape.n_params, gpu_count=gpu_count)
    informed = set(cal.get("informed", {}).get(spec.name, []))
    usable_gb = spec.memory_gb * (1 - memory_headroom)
    mean_tokens = min(float(mean_tokens_per_example), float(seq_len))

    # --- global batch from the dataset, layout from the planner (helper.plan) -----------
    batch_note, warnings = None, []
    if global_batch is None:
        global_batch, batch_note, warnings = dataset_global_batch(
            shape.n_params, examples, mean_tokens_per_example=mean_tokens, seq_len=seq_len, padding=padding,
            gpu_count=gpu_count)
    if split_note:
        warnings = [*warnings, split_note]
    layout, layout_note = _planned_layout(model_size, gpu_count, spec, seq_len, gpus_per_node, examples * mean_tokens,
                                          global_batch, cal, memory_headroom, st)

    # --- micro-batch x grad_accum: the largest that fits, within BATCH_TOLERANCE of the batch ---
    if global_batch < gpu_count:
        raise ValueError(f"global_batch {global_batch} is under one sequence per GPU ({gpu_count} GPUs); "
                         f"use at least {gpu_count}")

    def knobs(mb: int, ga: int, ac: bool, every: bool, workers: int = 2, algo: str = "default",
              proto: str = "default") -> dict[str, Any]:
        eff = estimate_padding_efficiency(padding, seq_len=seq_len, mean_tokens_per_example=mean_tokens,
                                          micro_batch=mb)
        eps = seq_len * eff / mean_tokens if padding == "packed" else 1.0
        return dict(gpu=spec, seq_len=seq_len, micro_batch=mb, grad_accum=ga, activation_checkpointing=ac,
                    gpus_per_node=gpus_per_node, nccl_algo=algo, nccl_proto=proto, num_workers=workers,
                    prefetch_factor=2, sharding=stage, padding_efficiency=eff, examples_per_sequence=eps,
                    reduce_scatter_every_micro_step=every, stack=st)

    # Options: checkpointing off/on; with accumulation, FSDP2's no-sync flavour (reduce-scatter
    # once, unsharded fp32 gradients held) or reduce-scatter every micro-batch (shards only).
    best = None  # (tokens/s, mb, ga, ac, every)
    fits_without_ac = False
    # The no-sync / every-micro-batch choice is FSDP2's; another stack accumulates its own way.
    everies = (False, True) if st.accumulation == "no_sync" else (st.accumulation == "reduce_scatter",)
    for ac, every in itertools.product((False, True), everies):
        split = split_global_batch(
            global_batch, gpu_count, max_micro_batch=max_micro_batch,
            fits=lambda mb, ga, ac=ac, every=every: (ga > 1 or not every)
            and _fits(shape, gpu_count, stage, mb, seq_len, ac, ga, spec, usable_gb, every, st)[0])
        if split is None:
            continue
        fits_without_ac |= not ac
        mb, ga = split
        tps = step_time_breakdown(plan_step(shape, gpu_count, **knobs(mb, ga, ac, every)),
                                  constants)["tokens_per_sec_per_gpu"]
        if best is None or tps > best[0] * 1.0001:
            best = (tps, mb, ga, ac, every)
    if best is None:
        raise _impossible(shape, gpu_count, stage, seq_len, spec, usable_gb, memory_headroom, st)
    _, mb, ga, ac, every = best
    realized = mb * ga * gpu_count
    if abs(realized - global_batch) > BATCH_TOLERANCE * global_batch:
        raise ValueError(f"global_batch {global_batch} cannot be split over {gpu_count} GPUs within "
                         f"{BATCH_TOLERANCE:.0%} (nearest: {realized}); use a multiple of {gpu_count}")

    # --- DataLoader workers: per-step tokenising / workers <= half the step --------------
    base = step_time_breakdown(plan_step(shape, gpu_count, **knobs(mb, ga, ac, every)), constants)
    busy_s = base["step_time_s"] - base["data_stall_s"]
    max_workers = max(1, spec.cpu_cores_per_gpu)
    choices = [w for w in (2, 4, 8, 16, 32) if w <= max_workers] or [1]
    workers = next((w for w in choices if base["data_cpu_s"] / w <= 0.5 * busy_s), choices[-1])
    prefetch = _PREFETCH_FACTOR

    # --- NCCL: default unless a calibrated setting measurably wins ----------------------
    algo, proto, nccl_note = "default", "default", "no forced NCCL setting was measured faster in the calibration"
    ref = step_time_breakdown(plan_step(shape, gpu_count, **knobs(mb, ga, ac, every, workers)), constants)
    best_tps = ref["tokens_per_sec_per_gpu"]
    for const, (a, p) in _NCCL_TRIALS.items():
        if const not in informed or spec.nccl_arch == "none":
            continue
        try:
            tps = step_time_breakdown(plan_step(shape, gpu_count, **knobs(mb, ga, ac, every, workers, a, p)),
                                      constants)["tokens_per_sec_per_gpu"]
        except UnsupportedCollective:
            continue
        if tps > best_tps * (1 + _MIN_GAIN):
            algo, proto, best_tps = a, p, tps
            gain = tps / ref["tokens_per_sec_per_gpu"] - 1
            nccl_note = f"the calibration measured {const} and predicts {gain:+.0%} over default"

    final_plan = plan_step(shape, gpu_count, **knobs(mb, ga, ac, every, workers, algo, proto))
    t = step_time_breakdown(final_plan, constants)
    _, mem = _fits(shape, gpu_count, stage, mb, seq_len, ac, ga, spec, usable_gb, every, st)
    step_s = t["step_time_s"]
    tokens_epoch = examples * mean_tokens
    steps_epoch = max(1, math.ceil(tokens_epoch / (t["tokens_per_step_per_gpu"] * gpu_count)))
    wall_h = steps_epoch * step_s / 3600
    startup = estimate_startup_seconds(shape, gpu_count, gpu=spec.name, gpus_per_node=gpus_per_node,
                                       calibration=cal)

    # --- checkpoints: the plan's one cadence rule (helper.checkpointing.checkpoint_plan) ----
    ckpt = checkpoint_plan(shape.n_params, gpu_count=gpu_count, nodes=final_plan.nodes, step_time_s=step_s,
                           storage_write_gbs_per_node=checkpoint_write_gbs_per_node,
                           max_lost_work_minutes=max_lost_work_minutes, startup_s=float(startup))
    ckpt_steps = min(steps_epoch, ckpt["interval_steps"])
    lost_min = ckpt["worst_case_lost_s"] / 60
    if ckpt_steps < ckpt["interval_steps"]:  # an epoch is shorter than the failure bound's interval
        warnings = [*warnings, f"an epoch ({steps_epoch} steps, {wall_h * 60:.1f} min) is shorter than the checkpoint "
                                f"interval a failure bound of {max_lost_work_minutes:g} min allows "
                                f"({ckpt['interval_steps']} steps): one checkpoint at the epoch's end"]
    if startup > wall_h * 3600:
        warnings = [*warnings, f"an epoch's {wall_h * 60:.1f} min of training is shorter than the job's "
                                f"{startup / 60:.1f} min start-up: start-up dominates its GPU-hours"]

    eff = final_plan.padding_efficiency
    rationale = {
        "micro_batch": f"largest micro-batch whose {gib(mem['total']):.1f} GiB per GPU fits the "
                       f"{gib(usable_gb):.1f} GiB usable ({memory_headroom:.0%} headroom on {spec.memory_gib:.1f} GiB) "
                       f"and whose accumulation reaches the global batch within {BATCH_TOLERANCE:.0%}.",
        "grad_accum": f"{mb} x {ga} x {gpu_count} GPUs = global batch {realized} sequences"
                      + (f" ({global_batch} asked, {realized / global_batch - 1:+.1%})" if realized != global_batch
                         else "")
                      + (f"; {batch_note}." if batch_note else "."),
        "layout": layout_note,
        "activation_checkpointing": (
            "off: predicted faster than checkpointing (an extra forward, 8N vs 6N FLOPs)." if not ac else
            "on: the larger micro-batch it allows beats no checkpointing at the largest micro-batch that "
            "fits." if fits_without_ac else "on: without it not even micro_batch 1 fits."),
        "reduce_scatter_every_micro_step": (
            "n/a: no gradient accumulation." if ga == 1 else
            f"{every}: the {st.name} stack's own accumulation ({st.accumulation})." if st.accumulation != "no_sync" else
            "True: reduce-scatter every micro-batch; no-sync accumulation would hold "
            f"{gib(shape.n_params * st.accum_dtype_bytes / 1e9):.0f} GiB of unsharded "
            f"{'fp32' if st.accum_dtype_bytes == 4 else 'bf16'} gradients per GPU." if every else
            "False: set_requires_gradient_sync(False) until the last micro-batch, one reduce-scatter per step."),
        "num_workers": f"tokenising {t['data_cpu_s'] * 1e3:.0f} ms of CPU work per step over {workers} workers "
                       f"stays under half the {step_s:.2f} s step, so data never stalls.",
        "prefetch_factor": f"{prefetch}, PyTorch's default: each of the {workers} workers keeps {prefetch} "
                           "micro-batches ready; more only holds host memory, the workers' rate is what keeps up.",
        "nccl_algo": f"{algo}: {nccl_note}.",
        "nccl_proto": f"{proto}: {nccl_note}.",
        "padding": f"{padding}: {eff:.0%} of computed tokens are real with ~{mean_tokens:.0f}-token examples "
                   f"in {seq_len}-token rows.",
        "sharding": f"{stage}: static state {gib(mem['static']):.1f} GiB per GPU of {gib(16 * shape.n_params / 1e9):.0f} GiB "
                    "in all.",
        "checkpoint_interval": (f"every {ckpt_steps} steps ({ckpt_steps * step_s / 60:.1f} min)"
                                + (f", the epoch's end (the failure bound allows {ckpt['interval_steps']} steps)"
                                   if ckpt_steps < ckpt["interval_steps"] else "")
                                + f": a node failure loses at most {lost_min:.1f} min (limit {max_lost_work_minutes:.0f}): ")
                               + " + ".join(f"{k[:-2]} {v / 60:.1f}" for k, v in ckpt["worst_case_parts_s"].items())
                               + " min (helper.checkpointing, the plan's rule).",
    }
    return {
        "model": shape.label, "n_params": shape.n_params, "model_note": shape.note,
        "gpu": spec.name, "gpu_count": gpu_count, "nodes": final_plan.nodes,
        "gpus_per_node": final_plan.gpus_per_node, "sharding": stage, "seq_len": seq_len,
        "micro_batch": mb, "grad_accum": ga, "global_batch": realized,
        "num_workers": workers, "prefetch_factor": prefetch, "nccl_algo": algo, "nccl_proto": proto,
        "activation_checkpointing": ac, "padding": padding,
        "reduce_scatter_every_micro_step": every,
        "expected_tokens_per_sec_per_gpu": round(t["tokens_per_sec_per_gpu"], 1),
        "expected_mfu": round(t["mfu"], 4),
        "expected_step_time_s": round(step_s, 4),
        "dataset_examples": examples, "epoch_tokens": tokens_epoch, "steps_per_epoch": steps_epoch,
        "epoch_wall_hours": round(wall_h, 4), "epoch_gpu_hours": round(wall_h * gpu_count, 4),
        "startup_s": round(float(startup), 1),
        "checkpoint_interval_steps": ckpt_steps,
        "checkpoint_interval_minutes": round(ckpt_steps * step_s / 60, 2),
        "checkpoint_size_gb": round(ckpt["size_gb"], 1),
        "checkpoint_worst_case_lost_minutes": round(lost_min, 2), "checkpoint": ckpt,
        "layout": layout, "warnings": warnings,
        "memory": {k: round(v, 3) for k, v in mem.items()},
        "memory_capacity_gb": spec.memory_gb, "memory_capacity_gib": round(spec.memory_gib, 2),
        "memory_usable_gb": round(usable_gb, 2),
        "time": {k: round(v, 5) for k, v in t.items()},
        "rationale": rationale,
        "assumptions": {"mean_tokens_per_example": mean_tokens, "padding": padding,
                        "memory_headroom": memory_headroom,
                        "checkpoint_write_gbs_per_node": checkpoint_write_gbs_per_node, "stack": st.name},
        "source": source,
    }


def format_breakdown(memory: dict[str, float], time: dict[str, float] | None = None, *,
                     capacity_gb: float | None = None) -> str:
    """Memory per GPU (given in GB, shown in GiB) and, if given, step time (s) by part, as aligned text.

    ``static`` is the sum of weights, gradients and optimizer: it is not listed beside them.

    Example:
        >>> print(format_breakdown({"weights": 2.0, "static": 14.0, "total": 20.0}, capacity_gb=85.52))
        Memory per GPU (GiB), capacity 79.6 GiB
          weights                 1.86
          total                  18.63
    """
    head = "Memory per GPU (GiB)" + (f", capacity {gib(capacity_gb):.1f} GiB" if capacity_gb else "")
    lines = [head] + [f"  {k:<20} {gib(v):>7.2f}" for k, v in memory.items() if k != "static"]
    if time:
        lines.append("Time per optimizer step (s)")
        for key in ("compute_s", "comm_s", "exposed_comm_s", "host_wait_s", "optimizer_s", "overhead_s",
                    "data_stall_s", "step_time_s"):
            if key in time:
                lines.append(f"  {key:<20} {time[key]:>9.4f}")
        if "tokens_per_sec_per_gpu" in time:
            lines.append(f"  {'tokens/s/GPU':<20} {time['tokens_per_sec_per_gpu']:>9.1f}")
    return "\n".join(lines)


def explain(cfg: dict[str, Any]) -> str:
    """A suggest_config result as text: what it assumed, memory and time by part, the reasons.

    Example:
        >>> text = explain(suggest_config("7b", 8, "52k"))
        >>> "Memory per GPU" in text and "rationale" in text
        True
    """
    head = (f"{cfg['model']} ({cfg['n_params'] / 1e9:.3g}e9 params; {cfg['model_note']}) on "
            f"{cfg['gpu_count']} x {cfg['gpu']} ({cfg['nodes']} node(s) x {cfg['gpus_per_node']}), "
            f"{cfg['sharding']}, seq_len {cfg['seq_len']}\ncalibration: {cfg['source']}")
    body = format_breakdown(cfg["memory"], cfg["time"], capacity_gb=cfg["memory_capacity_gb"])
    summary = (f"Expected {cfg['expected_tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU "
               f"(MFU {cfg['expected_mfu']:.0%}); one epoch of {cfg['dataset_examples']:,} examples "
               f"(~{cfg['assumptions']['mean_tokens_per_example']:.0f} tokens each): "
               f"{cfg['steps_per_epoch']} steps, {cfg['epoch_wall_hours']:.2f} h wall, "
               f"{cfg['epoch_gpu_hours']:.2f} GPU-h, plus ~{cfg['startup_s']:.0f} s start-up")
    why = ["rationale"] + [f"  {k}: {v}" for k, v in cfg["rationale"].items()]
    return "\n".join([head, body, summary] + why)
