"""Parallel layouts: FSDP, HSDP, FSDP x TP, pipelines; memory per GPU and step time of each.

Ranks are laid out as torchtitan's device mesh orders them, ``[pp, dp_replicate, dp_shard,
tp]`` with tensor parallelism innermost (torchtitan ``ParallelDims``), so a TP group is
consecutive GPUs of one node and a pipeline stage is a block of whole nodes.

- **FSDP** (``zero3`` over every GPU): :func:`helper.memory.estimate_memory` and
  :func:`helper.throughput.step_time_breakdown` as they are.
- **HSDP** (FSDP2 on a 2-D mesh, replicate x shard): weights, gradients and optimizer state
  are sharded over the ``dp_shard`` GPUs of a node (intra-node all-gather and reduce-scatter
  on NVLink) and each shard's gradient is all-reduced across the ``dp_replicate`` nodes
  (PyTorch ``fully_shard`` docs: "HSDP ... all-reduce across replicas").
- **TP** (Megatron-style, Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3): each block's
  matmuls are split over ``tp`` GPUs of a node; per block and micro-batch the forward makes
  two all-reduces of the ``b x s x h`` activation and the backward two more (one more pair
  when the forward is recomputed); with sequence parallelism they become a reduce-scatter plus
  an all-gather of the same total bytes (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2),
  which also splits every stored activation by ``tp``. They sit on the critical path: exposed.
- **PP** with the 1F1B schedule (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2): the
  bubble is ``(p - 1) / (m + p - 1)`` of the step for ``m`` micro-batches per step; the first
  stage holds ``min(p, m)`` micro-batches of activations for its ``L / p`` blocks; stages pass
  ``b x s x h`` activations (forward) and their gradients (backward) point to point.

All functions are pure arithmetic over plain numbers.
"""

from __future__ import annotations

import math
from typing import Any

from helper.collectives import CollectiveChoice, choose_collective, collective_time_s
from helper.dispatch import host_bound_seconds
from helper.gpus import GpuSpec, get_gpu
from helper.memory import FRAGMENTATION_ALLOWANCE, activation_memory_gb, estimate_memory, static_memory_gb
from helper.mesh import Layout
from helper.sizes import ModelShape, parse_model_size
from helper.stacks import Stack
from helper.throughput import compute_seconds, flops_per_token, plan_step

__all__ = ["Layout", "LayoutStepPlan", "layout_speed_ratio", "candidate_layouts", "layout_memory", "layout_step_time",
           "pipeline_bubble_fraction",
           "tp_collectives_per_block"]

_ADAM_BYTES_PER_PARAM = 28.0  # as helper.throughput: fp32 reads param, grad, m, v; writes param, m, v
_REDUCE_BYTES = 4  # fp32 gradient reduction (torchtitan's default reduce dtype)


def candidate_layouts(gpu_count: int, gpus_per_node: int, n_layers: int) -> list[Layout]:
    """FSDP, HSDP (several nodes), FSDP x TP (TP dividing a node), PP over nodes, 3-D.

    Example:
        >>> [l.name for l in candidate_layouts(32, 8, 40)]
        ['fsdp', 'hsdp', 'fsdp+tp2', 'fsdp+tp4', 'fsdp+tp8', 'pp2+fsdp', 'pp4+fsdp', 'pp2+fsdp+tp8']
    """
    g = min(gpus_per_node, gpu_count)
    nodes = math.ceil(gpu_count / g)
    out = [Layout(dp_shard=gpu_count)]
    if nodes > 1 and gpu_count % g == 0:
        out.append(Layout(dp_shard=g, dp_replicate=nodes))
    out += [Layout(dp_shard=gpu_count // t, tp=t) for t in (2, 4, 8) if t <= g and g % t == 0 and gpu_count > t]
    # Pipeline stages of whole nodes; a stage needs at least one block.
    pps = [p for p in (2, 4, 8) if p <= nodes and nodes % p == 0 and p <= n_layers]
    out += [Layout(dp_shard=gpu_count // p, pp=p) for p in pps]
    if pps and g in (2, 4, 8) and gpu_count // (pps[0] * g) >= 1:  # TP degrees that divide heads
        out.append(Layout(dp_shard=gpu_count // (pps[0] * g), tp=g, pp=pps[0]))
    return [lay for lay in out if lay.gpu_count == gpu_count]  # e.g. 12 GPUs: no TP8, no pipeline


def pipeline_bubble_fraction(pp: int, micro_batches: int) -> float:
    """Idle share of a 1F1B step: ``(p - 1) / (m + p - 1)`` (Narayanan et al. 2021, Sec. 2.2.1).

    Example:
        >>> pipeline_bubble_fraction(4, 8)
        0.2727272727272727
    """
    return (pp - 1) / (micro_batches + pp - 1) if pp > 1 else 0.0


def tp_collectives_per_block(activation_checkpointing: bool) -> int:
    """All-reduces (or RS+AG pairs) per block per micro-batch: 2 forward + 2 backward, + 2 recomputed."""
    return 6 if activation_checkpointing else 4


def _group(size: int, stride: int, gpus_per_node: int) -> tuple[int, int, int]:
    """(ranks, nodes, ranks per node) of a mesh dimension of ``size`` with rank ``stride``."""
    if size <= 1:
        return 1, 1, 1
    per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return size, math.ceil(size / per_node), per_node


def layout_memory(model_size: float | int | str | ModelShape, layout: Layout, *,
                  gpu: str | GpuSpec = "H100-80GB", micro_batch: int, seq_len: int,
                  activation_checkpointing: bool, grad_accum: int = 1,
                  stack: str | Stack | None = None) -> dict[str, float]:
    """Peak memory per GPU (GB) by part, for the most loaded GPU of ``layout``.

    Model states (16 B per parameter) are split over ``dp_shard x tp x pp`` GPUs (TP and PP
    split the parameters, FSDP shards each slice; HSDP's replicas each hold a copy). Gradients
    are reduce-scattered every micro-batch, so under accumulation (``grad_accum`` > 1) the
    sharded gradients are live at every later micro-batch's loss. Activations as the layouts
    run them: TP (with sequence and loss parallelism) splits all of them by ``tp``; a 1F1B
    pipeline's first stage keeps ``min(pp, grad_accum)`` micro-batches of its ``L / pp`` blocks
    and, with activation checkpointing, recomputes one full block in backward; the last stage
    keeps one micro-batch and holds the logits at the loss. FSDP's gathered blocks are split
    by ``tp``.

    Example:
        >>> m = layout_memory("13b", Layout(dp_shard=4, tp=8), micro_batch=2, seq_len=2048,
        ...                   activation_checkpointing=False)
        >>> round(m["static"], 2)      # 16 B x 13e9 / 32, less the 4 B of sharded gradients freed at the loss
        4.88
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    t, p = layout.tp, layout.pp
    if t == 1 and p == 1:  # FSDP or HSDP: the memory model's own peak over the shard group
        full = estimate_memory(shape, layout.dp_shard, sharding="zero3", gpu=spec, micro_batch=micro_batch,
                               seq_len=seq_len, activation_checkpointing=activation_checkpointing,
                               grad_accum=grad_accum, reduce_scatter_every_micro_step=True, stack=stack)
        return {k: full[k] for k in ("weights", "gradients", "optimizer", "static", "activations",
                                     "gathered_params", "overhead", "total")}
    static = static_memory_gb(shape.n_params, layout.dp_shard * t * p, "zero3")
    act = activation_memory_gb(shape, micro_batch=micro_batch, seq_len=seq_len,
                               activation_checkpointing=activation_checkpointing,
                               dtype_bytes=spec.compute_dtype_bytes, stack=stack)
    one_block = act["backward"] - (act["blocks"] if activation_checkpointing else 0.0)  # a block's full set
    recompute = one_block if activation_checkpointing else 0.0
    kept_per_stage = act["blocks"] / p
    first = kept_per_stage * min(p, grad_accum) + recompute
    last = kept_per_stage + max(act["logits"], recompute)
    activations = (max(first, last) if p > 1 else act["total"]) / t
    backward = (kept_per_stage * (min(p, grad_accum) if activation_checkpointing else 0.0) + one_block) / t
    if grad_accum == 1:  # as estimate_memory: the loss's peak has no sharded gradients (zero_grad freed them)
        freed = 2.0 * static["gradients"]  # FSDP2's fp32 sharded gradients: 4 of the 16 B
        if backward > activations - freed:
            activations = backward
        else:
            static = {**static, "gradients": 0.0, "optimizer": static["optimizer"] - static["gradients"]}
    gathered = 0.0
    if layout.dp_shard > 1:
        pb = spec.compute_dtype_bytes
        root = shape.root_params / (2 if p > 1 else 1)  # embedding on the first stage, head on the last
        gathered = (root * pb + 2 * shape.block_params * pb + shape.block_params * _REDUCE_BYTES) / t / 1e9
    dynamic = activations + gathered
    overhead = spec.framework_overhead_gb + FRAGMENTATION_ALLOWANCE * dynamic
    static_gb = sum(static.values())
    return {**static, "static": static_gb, "activations": activations, "gathered_params": gathered,
            "overhead": overhead, "total": static_gb + dynamic + overhead}


def _exposed(comm_s: float, compute_s: float, overlap: float) -> float:
    """Communication not hidden behind compute: ``max(0, comm - compute) + (1 - overlap) min(comm, compute)``."""
    return max(0.0, comm_s - compute_s) + (1 - overlap) * min(comm_s, compute_s)


def _time(coll: str, nbytes: float, group: tuple[int, int, int], spec: GpuSpec, c: dict[str, float]) -> float:
    n, nodes, per_node = group
    if n <= 1 or nbytes <= 0:
        return 0.0
    if spec.nccl_arch == "none":  # gloo: NCCL's settings do not apply
        choice = CollectiveChoice(algo="ring", proto="simple", forced=False)
    else:
        choice = choose_collective(coll, nbytes, nccl_algo=None, nccl_proto=None, n=n, nodes=nodes,
                                   gpus_per_node=per_node, gpu=spec)
    return collective_time_s(coll, nbytes, choice, n=n, nodes=nodes, gpus_per_node=per_node, gpu=spec,
                             constants=c)


def layout_step_time(model_size: float | int | str | ModelShape, layout: Layout, *,
                     constants: dict[str, float], gpu: str | GpuSpec = "H100-80GB", gpus_per_node: int = 8,
                     micro_batch: int, seq_len: int, activation_checkpointing: bool,
                     grad_accum: int = 1, reshard_after_forward: bool = True,
                     defer_all_reduce: bool = True, stack: str | Stack | None = None) -> dict[str, float]:
    """Seconds per optimizer step by part, tokens/s/GPU and MFU for ``layout``.

    ``micro_batch`` is rows per data-parallel rank (a TP group shares its rows); ``constants``
    come from :func:`helper.calibration.resolve_constants`. Parts: ``compute_s`` (FLOPs over
    ``tp x pp``, TP's GEMMs at the efficiency of their ``h / tp`` width), ``fsdp_comm_s``
    (all-gather / reduce-scatter in the shard group every micro-batch, HSDP's all-reduce across
    replicas) of which ``exposed_comm_s`` is not hidden behind compute, ``tp_comm_s``
    (exposed), ``p2p_s`` (stage hand-offs), ``bubble_s`` (1F1B idle time), ``optimizer_s``,
    ``overhead_s``.

    ``defer_all_reduce``: HSDP all-reduces across replicas on the last micro-batch only (FSDP2
    ``set_requires_all_reduce(False)`` on the others; the reduce-scatter still runs every
    micro-batch, so the sharded gradients accumulate); its exposure is then that of the last
    micro-batch's compute alone. False: the all-reduce runs every micro-batch.
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    c = constants
    g = min(gpus_per_node, layout.gpu_count)
    t, p, ga = layout.tp, layout.pp, grad_accum
    pb = spec.compute_dtype_bytes
    blocks = shape.arch.n_layers / p
    # Compute is the throughput model's own (matmul and attention efficiencies, recompute) for one
    # data-parallel rank's rows, split over the tp x pp GPUs that share them, with TP's GEMMs at
    # the efficiency of their narrower width (helper.compute.compute_seconds).
    plan = plan_step(shape, layout.gpu_count, gpu=spec, gpus_per_node=gpus_per_node, seq_len=seq_len,
                     micro_batch=micro_batch, activation_checkpointing=activation_checkpointing,
                     grad_accum=ga, reshard_after_forward=reshard_after_forward, stack=stack)
    matmul_s, attention_s = compute_seconds(plan, c, tp=t)
    compute_s = (matmul_s + attention_s) / (t * p)

    shard = _group(layout.dp_shard, t, g)
    replicate = _group(layout.dp_replicate, layout.dp_shard * t, g)
    block_w, root_w = shape.block_params / t, shape.root_params / t / (2 if p > 1 else 1)
    gathers = 2 if reshard_after_forward else 1
    every = ga * (blocks * gathers * _time("allgather", block_w * pb, shard, spec, c)
                  + _time("allgather", root_w * pb, shard, spec, c))
    every += ga * (blocks * _time("reducescatter", block_w * _REDUCE_BYTES, shard, spec, c)
                   + _time("reducescatter", root_w * _REDUCE_BYTES, shard, spec, c))
    all_reduce = (blocks * _time("allreduce", block_w * _REDUCE_BYTES / layout.dp_shard, replicate, spec, c)
                  + _time("allreduce", root_w * _REDUCE_BYTES / layout.dp_shard, replicate, spec, c))
    overlap = c["comm_overlap_fraction"]
    if defer_all_reduce:  # ga - 1 micro-batches without it, the last one with it
        fsdp = every + all_reduce
        exposed_s = _exposed(every, compute_s, overlap) + (
            _exposed(every / ga + all_reduce, compute_s / ga, overlap) - _exposed(every / ga, compute_s / ga, overlap))
    else:
        fsdp = every + ga * all_reduce
        exposed_s = _exposed(fsdp, compute_s, overlap)

    act_bytes = micro_batch * seq_len * shape.arch.hidden * pb
    tp_s = ga * blocks * tp_collectives_per_block(activation_checkpointing) * _time(
        "allreduce", act_bytes, (t, 1, t), spec, c) if t > 1 else 0.0
    p2p_s = 0.0
    if p > 1:  # forward activation and backward gradient per micro-batch, to the next stage's node
        link = (spec.net_gbs_per_gpu if layout.gpu_count // p >= g else spec.intra_node_gbs) * 1e9
        p2p_s = ga * 2 * (act_bytes / t) / (link * c.get("bus_bw_efficiency", 1.0))
    optimizer_s = shape.n_params / (layout.dp_shard * t * p) * _ADAM_BYTES_PER_PARAM / (spec.hbm_gbs * 1e9)
    overhead_s = ga * (c["micro_step_overhead_s"] + blocks * c.get("layer_overhead_s", 0.0))
    device_s = compute_s + exposed_s + tp_s + p2p_s
    work_s = host_bound_seconds(device_s, stack=plan.stack, blocks=blocks, checkpointing=plan.checkpointing,
                                gpu=spec, micro_steps=ga, scale=c.get("host_dispatch_scale", 1.0))
    bubble_s = work_s * pipeline_bubble_fraction(p, ga) / (1 - pipeline_bubble_fraction(p, ga))
    step_s = work_s + bubble_s + optimizer_s + overhead_s
    tokens_per_gpu = ga * micro_batch * seq_len / (t * p)
    tps = tokens_per_gpu / step_s
    return {"compute_s": compute_s, "fsdp_comm_s": fsdp, "exposed_comm_s": exposed_s, "tp_comm_s": tp_s,
            "p2p_s": p2p_s, "host_wait_s": max(0.0, work_s - device_s), "bubble_s": bubble_s, "optimizer_s": optimizer_s,
            "overhead_s": overhead_s,
            "step_time_s": step_s, "tokens_per_step_per_gpu": tokens_per_gpu, "tokens_per_sec_per_gpu": tps,
            "mfu": tps * flops_per_token(shape, seq_len) / spec.peak_flops}


def layout_speed_ratio(plan: Any, layout: Layout, constants: dict[str, float], *,
                       reshard_after_forward: bool = True) -> float:
    """tokens/s/GPU of ``layout`` over FSDP on every GPU, for a :class:`helper.throughput.StepPlan`'s batch.

    The throughput model predicts FSDP with its data-loader, padding and NCCL terms; this ratio
    carries it to HSDP/TP (the sim launcher and the fit of HSDP/TP trials use it alike).

    Example:
        >>> from helper.calibration import resolve_constants
        >>> plan = plan_step("tiny", 2, gpu="cpu", seq_len=256, micro_batch=4, gpus_per_node=2)
        >>> layout_speed_ratio(plan, Layout(dp_shard=1, tp=2), resolve_constants(None, "cpu")[0]) < 1
        True
    """
    kw = dict(constants=constants, gpu=plan.gpu, gpus_per_node=plan.gpus_per_node, micro_batch=plan.micro_batch,
              seq_len=plan.seq_len, activation_checkpointing=plan.activation_checkpointing,
              grad_accum=plan.grad_accum, reshard_after_forward=reshard_after_forward)
    this = layout_step_time(plan.shape, layout, **kw)["tokens_per_sec_per_gpu"]
    return this / layout_step_time(plan.shape, Layout(dp_shard=plan.gpu_count), **kw)["tokens_per_sec_per_gpu"]


class LayoutStepPlan:
    """A StepPlan measured in an HSDP/TP ``layout`` (for fitting): the StepPlan's attributes, plus
    ``layout`` and ``reshard_after_forward``."""

    def __init__(self, plan: Any, layout: Layout, *, reshard_after_forward: bool = True):
        self.plan, self.layout, self.reshard_after_forward = plan, layout, reshard_after_forward

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "plan":  # copy/pickle look-ups before __init__ ran
            raise AttributeError(name)
        return getattr(self.plan, name)
