"""Tokens per second per GPU: compute, FSDP communication, overlap, data loading, overhead.

One optimizer step of ``grad_accum`` micro-batches, per GPU::

    step_time_s = compute + exposed communication + host wait + optimizer + overhead + data stall

- compute: FLOPs per token x tokens / (peak x ``compute_efficiency``). FLOPs per token are
  6 N (forward 2N, backward 4N; Kaplan et al. 2020, Sec. 2.1) over the matmul parameters (the
  input embedding is a lookup, excluded as in torchtitan's ``get_nparams_and_flops``) plus
  12 L H T for attention scores (PaLM, Chowdhery et al. 2022, App. B; torchtitan
  models/utils.py). Full activation checkpointing repeats the forward: 8 N + 16 L H T.
- communication (FSDP2 per-block collectives, one per transformer block plus the root):
  all-gather of bf16 weights before each block's forward, again before its backward when
  ``reshard_after_forward`` (FSDP2's default for non-root modules; False skips it); gradient
  reduce-scatter once per optimizer step when accumulation uses
  ``set_requires_gradient_sync(False)`` on all but the last micro-batch, else every
  micro-batch (PyTorch PR #126166); all-gathers run every micro-batch either way. zero2 is
  FSDP2 without reshard-after-forward; zero1 and ddp all-reduce gradients. Each collective's
  time comes from :mod:`helper.collectives` (NCCL's model, calibrated factors).
- overlap: ``exposed = max(0, comm - compute) + (1 - overlap) x min(comm, compute)``.
- host wait: where a stack states its host dispatch cost (helper.dispatch), a micro-batch whose
  compute and exposed communication are shorter than the host's kernel dispatch takes the
  dispatch's time instead (eager PyTorch's overhead-bound regime).
- optimizer: Adam reads fp32 param, grad, m, v and writes param, m, v (28 B per local
  parameter) at HBM bandwidth.
- data: workers tokenise ``data_cost_s_per_example`` per example in parallel with the step;
  a stall appears when per-step CPU work / workers exceeds the step (with 0 workers the main
  process does it serially). ``prefetch_factor`` only absorbs jitter: no steady-state effect.

Throughput counts non-padding tokens: ``micro_batch x seq_len x padding_efficiency x
grad_accum / step_time_s``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from helper.activations import effective_attention, normalize_checkpointing
from helper.calibration import resolve_constants
from helper.collectives import PRIOR_FACTORS, CollectiveChoice, _raw_time_s, choose_collective
from helper.compute import compute_seconds, flops_per_token, matmul_and_attention_flops
from helper.dispatch import host_bound_seconds
from helper.gpus import GpuSpec, get_gpu
from helper.memory import estimate_memory, normalize_sharding
from helper.padding import DEFAULT_MEAN_TOKENS_PER_EXAMPLE, estimate_padding_efficiency
from helper.sizes import ModelShape, parse_model_size
from helper.stacks import Stack, resolve_stack
from helper.step import StepPlan

__all__ = ["Prediction", "StepPlan", "plan_step", "step_time_breakdown", "predict_step_time",
           "predict_throughput", "flops_per_token", "matmul_and_attention_flops", "compute_seconds",
           "estimate_padding_efficiency",
           "estimate_startup_seconds", "DEFAULT_MEAN_TOKENS_PER_EXAMPLE"]

_ADAM_BYTES_PER_PARAM = 28.0  # fp32 reads: param, grad, m, v; writes: param, m, v


class Prediction(float):
    """A float that also says which calibration produced it (``source``) and how (``details``).

    Example:
        >>> p = Prediction(1234.5, source="default", details={"step_time_s": 1.0})
        >>> p + 1, p.source
        (1235.5, 'default')
    """

    source: str
    details: dict[str, Any]

    def __new__(cls, value: float, *, source: str, details: dict[str, Any] | None = None) -> Prediction:
        obj = super().__new__(cls, value)
        obj.source = source
        obj.details = dict(details or {})
        return obj

    def __reduce__(self):  # pickles (and deep-copies) as a plain float
        return (float, (float(self),))


def plan_step(model_size: float | int | str | ModelShape, gpu_count: int, *,
              gpu: str | GpuSpec = "H100-80GB", seq_len: int = 2048, micro_batch: int = 1,
              activation_checkpointing: bool | str = False, grad_accum: int = 1, gpus_per_node: int = 8,
              nccl_algo: str | None = "default", nccl_proto: str | None = "default",
              num_workers: int = 2, prefetch_factor: int | None = 2, sharding: str = "zero3",
              padding_efficiency: float = 1.0, examples_per_sequence: float = 1.0,
              reshard_after_forward: bool = True, reduce_scatter_every_micro_step: bool | None = None,
              reduce_dtype_bytes: int | None = None, attention: str | None = None,
              stack: str | Stack | None = None) -> StepPlan:
    """The calibration-free part of a prediction (see :func:`predict_throughput` for args).

    Raises:
        helper.collectives.UnsupportedCollective: a forced NCCL algorithm/protocol that a
            needed collective lacks (NCCL fails such a job at its first collective).
        ValueError: a bad argument.
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    stage = normalize_sharding(sharding)
    st = resolve_stack(stack, shape)
    mode = normalize_checkpointing(activation_checkpointing, st)
    attention = effective_attention(st, attention)
    if reduce_scatter_every_micro_step is None:
        reduce_scatter_every_micro_step = st.accumulation == "reduce_scatter"
    reduce_dtype_bytes = reduce_dtype_bytes or st.reduce_dtype_bytes
    for name, v in (("gpu_count", gpu_count), ("seq_len", seq_len), ("micro_batch", micro_batch),
                    ("grad_accum", grad_accum), ("gpus_per_node", gpus_per_node)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if not 0 < padding_efficiency <= 1:
        raise ValueError(f"padding_efficiency must be in (0, 1], got {padding_efficiency}")
    g = min(gpus_per_node, gpu_count)
    nodes = math.ceil(gpu_count / g)
    p = spec.compute_dtype_bytes
    n = gpu_count

    colls: list[tuple[str, float, float]] = []  # (collective, bytes, count per step)
    if n > 1:
        L = shape.arch.n_layers
        syncs = grad_accum if reduce_scatter_every_micro_step else 1
        if stage in ("zero2", "zero3"):
            gathers_per_micro = 2 if (stage == "zero3" and reshard_after_forward) else 1
            colls.append(("allgather", shape.block_params * p, L * gathers_per_micro * grad_accum))
            colls.append(("allgather", shape.root_params * p, grad_accum))  # root: once per forward
            colls.append(("reducescatter", shape.block_params * reduce_dtype_bytes, L * syncs))
            colls.append(("reducescatter", shape.root_params * reduce_dtype_bytes, syncs))
        else:  # zero1 / ddp: all-reduce gradient buckets; zero1 re-gathers updated weights
            colls.append(("allreduce", shape.block_params * reduce_dtype_bytes, L * syncs))
            colls.append(("allreduce", shape.root_params * reduce_dtype_bytes, syncs))
            if stage == "zero1":
                colls.append(("allgather", shape.n_params * p / (L + 1), L + 1))
    planned = []
    for coll, nbytes, count in colls:
        if spec.nccl_arch == "none":  # gloo: NCCL settings do not apply
            choice = CollectiveChoice(algo="ring", proto="simple", forced=False)
        else:
            choice = choose_collective(coll, nbytes, nccl_algo=nccl_algo, nccl_proto=nccl_proto,
                                       n=n, nodes=nodes, gpus_per_node=g, gpu=spec,
                                       reduce_fp32=reduce_dtype_bytes == 4)
        planned.append((coll, float(nbytes), float(count), choice))

    local_params = shape.n_params if stage == "ddp" else shape.n_params / n
    mm, att = matmul_and_attention_flops(shape, seq_len, checkpointing=mode)
    if attention == "eager":
        att *= 2.0  # the full s x s product: no causal skipping
    return StepPlan(
        shape=shape, gpu=spec, gpu_count=n, nodes=nodes, gpus_per_node=g, seq_len=seq_len,
        micro_batch=micro_batch, grad_accum=grad_accum, sharding=stage,
        activation_checkpointing=mode != "none", checkpointing=mode, attention=attention, stack=st,
        reduce_scatter_every_micro_step=bool(reduce_scatter_every_micro_step),
        matmul_flops_per_micro_step=micro_batch * seq_len * mm,
        attention_flops_per_micro_step=micro_batch * seq_len * att,
        padding_efficiency=float(padding_efficiency),
        examples_per_sequence=float(examples_per_sequence), num_workers=int(num_workers),
        prefetch_factor=prefetch_factor,
        flops_per_micro_step=micro_batch * seq_len * (mm + att),
        optimizer_bytes=local_params * _ADAM_BYTES_PER_PARAM,
        collectives=tuple(planned))


def step_time_breakdown(plan: StepPlan, constants: dict[str, float]) -> dict[str, float]:
    """Seconds per optimizer step by part, and the resulting tokens/s/GPU (pure arithmetic)."""
    c = constants
    spec = plan.gpu
    matmul_s, attention_s = compute_seconds(plan, c)
    compute_s = matmul_s + attention_s
    comm_s = 0.0
    if plan.collectives:
        cc = {**PRIOR_FACTORS, **c}
        for coll, nbytes, count, ch in plan.collectives:
            comm_s += count * _raw_time_s(coll, nbytes, algo=ch.algo, proto=ch.proto, n=plan.gpu_count,
                                          nodes=plan.nodes, gpus_per_node=plan.gpus_per_node, gpu=spec, c=cc)
    overlap = c["comm_overlap_fraction"]
    exposed_s = max(0.0, comm_s - compute_s) + (1.0 - overlap) * min(comm_s, compute_s)
    optimizer_s = plan.optimizer_bytes / (spec.hbm_gbs * 1e9)
    overhead_s = plan.grad_accum * (c["micro_step_overhead_s"]
                                    + plan.shape.arch.n_layers * c.get("layer_overhead_s", 0.0))
    device_s = compute_s + exposed_s
    work_s = host_bound_seconds(device_s, stack=plan.stack, blocks=plan.shape.arch.n_layers,
                                checkpointing=plan.checkpointing, gpu=spec, micro_steps=plan.grad_accum,
                                scale=c.get("host_dispatch_scale", 1.0))
    busy_s = work_s + optimizer_s + overhead_s
    examples = plan.micro_batch * plan.grad_accum * plan.examples_per_sequence
    data_cpu_s = examples * c["data_cost_s_per_example"]
    if plan.num_workers == 0:
        stall_s = data_cpu_s  # the main process tokenises between steps
    else:
        workers = min(plan.num_workers, spec.cpu_cores_per_gpu) if spec.cpu_cores_per_gpu else plan.num_workers
        stall_s = max(0.0, data_cpu_s / max(workers, 1) - busy_s)
    step_s = busy_s + stall_s
    tokens = plan.micro_batch * plan.seq_len * plan.padding_efficiency * plan.grad_accum
    return {"compute_s": compute_s, "matmul_s": matmul_s, "attention_s": attention_s, "comm_s": comm_s,
            "exposed_comm_s": exposed_s,
            "optimizer_s": optimizer_s, "overhead_s": overhead_s, "host_wait_s": max(0.0, work_s - device_s),
            "data_stall_s": stall_s, "data_cpu_s": data_cpu_s, "step_time_s": step_s,
            "tokens_per_step_per_gpu": tokens, "tokens_per_sec_per_gpu": tokens / step_s,
            "mfu": plan.micro_batch * plan.seq_len * plan.grad_accum
                   * flops_per_token(plan.shape, plan.seq_len) / step_s / spec.peak_flops}


def predict_step_time(model_size: float | int | str | ModelShape, gpu_count: int, *,
                      calibration: dict[str, Any] | str | Path | None = None,
                      **knobs: Any) -> dict[str, Any]:
    """Step-time breakdown (seconds), tokens/s/GPU, memory, and ``source`` as one dict.

    Takes the same arguments as :func:`predict_throughput`.

    Example:
        >>> d = predict_step_time("7b", 8, micro_batch=2)
        >>> d["step_time_s"] > d["compute_s"] > 0, "source" in d
        (True, True)
    """
    plan = plan_step(model_size, gpu_count, **knobs)
    constants, source = resolve_constants(calibration, plan.gpu.name)
    out: dict[str, Any] = step_time_breakdown(plan, constants)
    mem = estimate_memory(plan.shape, gpu_count, sharding=plan.sharding, micro_batch=plan.micro_batch,
                          seq_len=plan.seq_len, activation_checkpointing=plan.checkpointing,
                          attention=plan.attention, memory_scale=constants.get("memory_scale", 1.0),
                          grad_accum=plan.grad_accum, gpu=plan.gpu, stack=plan.stack,
                          reshard_after_forward=knobs.get("reshard_after_forward", True),
                          reduce_scatter_every_micro_step=plan.reduce_scatter_every_micro_step,
                          reduce_dtype_bytes=knobs.get("reduce_dtype_bytes"))
    counts: dict[str, float] = {}
    for coll, _, count, ch in plan.collectives:
        key = f"{coll}/{ch.algo}/{ch.proto}"
        counts[key] = counts.get(key, 0.0) + count
    out.update(memory_total_gb=mem["total"], fits_in_memory=mem["total"] <= plan.gpu.memory_gb,
               collectives_per_step=counts, source=source)
    return out


def predict_throughput(model_size: float | int | str | ModelShape, gpu_count: int, *,
                       gpu: str = "H100-80GB", seq_len: int = 2048, micro_batch: int = 1,
                       activation_checkpointing: bool | str = False, grad_accum: int = 1,
                       gpus_per_node: int = 8, nccl_algo: str | None = "default",
                       nccl_proto: str | None = "default", num_workers: int = 2,
                       prefetch_factor: int | None = 2, sharding: str = "zero3",
                       padding_efficiency: float = 1.0, examples_per_sequence: float = 1.0,
                       reshard_after_forward: bool = True,
                       reduce_scatter_every_micro_step: bool | None = None,
                       calibration: dict[str, Any] | str | Path | None = None,
                       attention: str | None = None, stack: str | Stack | None = None) -> Prediction:
    """Predicted training throughput, non-padding tokens per second per GPU.

    Args:
        model_size: ``7e9``, ``"7b"``, ``"13B"``, ``"1.3b"`` or a preset name.
        gpu_count: world size (data-parallel GPUs).
        gpu: ``A100-40GB``, ``A100-80GB``, ``H100-80GB``, ``H200-141GB`` or ``cpu``.
        seq_len: tokens per row.
        micro_batch: rows per GPU per forward/backward.
        activation_checkpointing: ``False``/``"none"``, ``True``/``"full"`` (per-block
            recomputation: one extra forward) or ``"selective"`` (recompute the attention
            core and pointwise ops, keep the matmul outputs).
        grad_accum: micro-batches per optimizer step.
        gpus_per_node: GPUs per node (NVLink inside, network across).
        nccl_algo: NCCL_ALGO value (``default`` = unset): ``Ring``, ``Tree``, ``NVLS``...
        nccl_proto: NCCL_PROTO value (``default`` = unset): ``Simple``, ``LL128``, ``LL``.
        num_workers: DataLoader workers per GPU (0 = tokenise in the training process).
        prefetch_factor: batches per worker kept ready (jitter only; no effect here).
        sharding: ``ddp``, ``zero1``, ``zero2``, ``zero3`` (``fsdp``).
        padding_efficiency: non-padding share of computed tokens (see
            :func:`estimate_padding_efficiency`).
        examples_per_sequence: examples tokenised per row (packing puts several in one).
        reshard_after_forward: FSDP2 option; False skips the backward all-gather.
        reduce_scatter_every_micro_step: False = FSDP2 no-sync accumulation (reduce-scatter
            on the last micro-batch only); None = the stack's accumulation.
        calibration: a calibration dict, a JSON path, or None for the shipped default.
        attention: None (the stack's kernel), ``sdpa``/``flash`` (fused kernels) or
            ``eager`` (HF's eager path: materialised s x s scores).
        stack: a :mod:`helper.stacks` preset or ``Stack`` (None: ``hf-sdpa``, tuner's
            workload, for Llama shapes; ``llm-foundry`` for MPT): what ``True`` checkpoints,
            the attention kernel, the reduce dtype and the accumulation semantics.

    Returns:
        A :class:`Prediction` (a float) with ``.source`` (the calibration used) and
        ``.details`` (the step-time breakdown of :func:`predict_step_time`).

    Raises:
        helper.collectives.UnsupportedCollective: e.g. ``nccl_algo="Tree"`` with FSDP.

    Example:
        >>> tps = predict_throughput("7b", 8, gpu="H100-80GB", micro_batch=4)
        >>> 5000 < tps < 20000, tps.source.startswith("default")
        (True, True)
    """
    details = predict_step_time(
        model_size, gpu_count, calibration=calibration, gpu=gpu, seq_len=seq_len,
        micro_batch=micro_batch, activation_checkpointing=activation_checkpointing,
        grad_accum=grad_accum, gpus_per_node=gpus_per_node, nccl_algo=nccl_algo,
        nccl_proto=nccl_proto, num_workers=num_workers, prefetch_factor=prefetch_factor,
        sharding=sharding, padding_efficiency=padding_efficiency,
        examples_per_sequence=examples_per_sequence, reshard_after_forward=reshard_after_forward,
        reduce_scatter_every_micro_step=reduce_scatter_every_micro_step, attention=attention, stack=stack)
    return Prediction(details["tokens_per_sec_per_gpu"], source=details["source"], details=details)


def estimate_startup_seconds(model_size: float | int | str | ModelShape, gpu_count: int, *,
                             gpu: str = "H100-80GB", gpus_per_node: int = 8,
                             load_weights: bool = False, storage_read_gbs_per_node: float = 2.0,
                             calibration: dict[str, Any] | str | Path | None = None) -> Prediction:
    """Seconds from launching a trial to its first training step.

    ``startup_fixed_s`` (interpreter, imports, CUDA context, data set-up; calibrated)
    + rendezvous and NCCL communicator set-up, assumed 0.5 s per node + 10 ms per rank
    (NCCL's bootstrap is an all-gather over ranks)
    + building and initialising the model, ``model_init_s_per_gparam`` per 1e9 parameters
    (calibrated; every rank builds the model before FSDP shards it)
    + with ``load_weights``, reading the bf16 checkpoint (2 B/param) once per node at
    ``storage_read_gbs_per_node`` (an assumed 2 GB/s). Warm-up steps are not included.

    Example:
        >>> s = estimate_startup_seconds("7b", 32)
        >>> s > 0, s.source.startswith("default")
        (True, True)
    """
    shape = parse_model_size(model_size)
    spec = get_gpu(gpu)
    constants, source = resolve_constants(calibration, spec.name)
    nodes = math.ceil(gpu_count / min(gpus_per_node, gpu_count))
    parts = {"fixed_s": constants["startup_fixed_s"],
             "rendezvous_s": 0.5 * nodes + 0.01 * gpu_count,
             "model_init_s": constants["model_init_s_per_gparam"] * shape.n_params / 1e9,
             "load_weights_s": (2.0 * shape.n_params / (storage_read_gbs_per_node * 1e9))
                               if load_weights else 0.0}
    return Prediction(sum(parts.values()), source=source, details=parts)
