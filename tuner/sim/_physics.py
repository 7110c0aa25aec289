"""The simulated cluster's physics: helper's own model (`matched`) or a cluster that differs.

A search judged only on the simulator built from helper's model is judged on its own
assumptions. ``[cluster] sim_physics = "perturbed:SEED"`` gives a cluster whose physics
differ from helper's in the ways a real cluster does (the seed picks one such cluster):

- every constant perturbed: each of helper's calibration constants, the data's mean tokens
  per example, the framework memory overhead and the fragmentation share are multiplied by
  ``1 +- U(0.30, 0.50)`` (random sign; fractions stay in (0.05, 0.97));
- a different activation-memory formula: Korthikanti et al. 2022 (arXiv 2205.05198, Sec. 4.1)
  for a GPT block, ``s b h (34 + beta 5 a s / h)`` per layer with a partly materialised
  attention matrix (``beta`` in [0.05, 0.3]: a memory-efficient kernel's chunks), where
  helper counts the Llama block's saved tensors with no ``s x s`` term;
- interactions helper does not model: GEMM efficiency that falls at small micro-batches
  (``compute x (1 + g / tokens_per_micro_step_in_2k_units)``, g in [0.05, 0.2]), DataLoader
  workers competing with NCCL's proxy threads for CPU (communication slows by
  ``c x num_workers / 8``, c in [0.1, 0.3]), and a different overlap law
  (``exposed = max(comm - overlap x compute, (1 - overlap) x comm)``);
- slow nodes: one node (one GPU on a one-node cluster) runs 5-20% slower; synchronous
  training waits for it every step;
- a version-dependent NCCL rule: a forced ``Tree`` for all-gather/reduce-scatter fails on
  some NCCL versions and silently falls back to Ring on older ones (helper.collectives'
  note), decided by the seed: what the screening preflight must find out.

``matched`` is the launcher's historical physics: helper's prediction itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helper import DEFAULT_MEAN_TOKENS_PER_EXAMPLE, UnsupportedCollective, estimate_memory, get_gpu, resolve_constants
from helper.dispatch import host_bound_seconds
from helper.gpus import gib
from helper.throughput import plan_step, step_time_breakdown
from tuner.model import ModelInputs

__all__ = ["SimPhysics", "SimTruth", "physics_for", "truth", "PERTURB_RANGE"]

PERTURB_RANGE = (0.30, 0.50)
"""Relative perturbation of every constant (the issue's 30-50%)."""
_FRACTIONS = ("compute_efficiency", "comm_overlap_fraction")


@dataclass(frozen=True, kw_only=True)
class SimPhysics:
    """One simulated cluster's physics (all factors 1 / off for `matched`)."""

    name: str
    """The spec value it came from (`matched`, `perturbed:7`)."""
    constants: dict[str, float] = field(default_factory=dict)
    """Perturbed helper calibration constants (empty: helper's own)."""
    mean_tokens_factor: float = 1.0
    overhead_factor: float = 1.0
    fragmentation: float = 0.10
    attention_beta: float = 0.0
    gemm_penalty: float = 0.0
    cpu_contention: float = 0.0
    slow_node_factor: float = 1.0
    tree_falls_back: bool = False

    @property
    def matched(self) -> bool:
        return self.name == "matched"

    def mean_tokens(self) -> float | None:
        """This cluster's data: mean tokens per example (None: helper's default, for `matched`)."""
        return None if self.matched else DEFAULT_MEAN_TOKENS_PER_EXAMPLE * self.mean_tokens_factor


@dataclass(frozen=True, kw_only=True)
class SimTruth:
    """The noiseless outcome of one config on a simulated cluster."""

    status: str
    """`ok`, `oom` or `error`."""
    tokens_per_sec_per_gpu: float = 0.0
    step_time_s: float = 0.0
    peak_mem_gb: float = 0.0
    capacity_gb: float = 0.0
    data_wait_frac: float = 0.0
    padding_efficiency: float = 1.0
    row_len: int = 0
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def physics_for(value: str, gpu: str) -> SimPhysics:
    """The physics a spec's `sim_physics` names, for its GPU (deterministic in the seed)."""
    if value == "matched":
        return SimPhysics(name="matched")
    seed = int(value.partition(":")[2])
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9415]))

    def factor() -> float:
        return 1.0 + float(rng.choice([-1.0, 1.0])) * float(rng.uniform(*PERTURB_RANGE))

    base, _ = resolve_constants(None, gpu)
    consts = {}
    for name in sorted(base):
        v = base[name] * factor()
        consts[name] = min(max(v, 0.05), 0.97) if name in _FRACTIONS else v
    return SimPhysics(name=value, constants=consts, mean_tokens_factor=factor(),
                      overhead_factor=factor(), fragmentation=0.10 * factor(),
                      attention_beta=float(rng.uniform(0.05, 0.3)),
                      gemm_penalty=float(rng.uniform(0.05, 0.2)),
                      cpu_contention=float(rng.uniform(0.1, 0.3)),
                      slow_node_factor=float(rng.uniform(1.05, 1.20)),
                      tree_falls_back=bool(rng.random() < 0.5))


def truth(physics: SimPhysics, inputs: ModelInputs) -> SimTruth:
    """The noiseless throughput and peak memory of a configuration under ``physics`` (not
    `matched`); ``inputs`` with this cluster's data (:meth:`SimPhysics.mean_tokens`)."""
    spec = get_gpu(inputs.gpu)
    mb, ga, ckpt, workers = inputs.micro_batch, inputs.grad_accum, inputs.activation_checkpointing, inputs.num_workers
    row_len, efficiency = inputs.seq_len, inputs.padding_efficiency
    algo = inputs.nccl_algo
    if physics.tree_falls_back and str(algo).lower() == "tree":
        algo = "allreduce:tree;allgather:ring;reducescatter:ring"  # older NCCL: silently Ring
    try:
        plan = plan_step(**dataclasses.replace(inputs, nccl_algo=algo).step_kwargs())
    except UnsupportedCollective as exc:
        return SimTruth(status="error", message=str(exc), row_len=row_len)

    # --- memory: helper's static and FSDP buffers, this cluster's activation formula
    mem = estimate_memory(inputs.model, inputs.gpu_count, sharding="zero3", activation_checkpointing=ckpt,
                          grad_accum=ga, reshard_after_forward=inputs.reshard_after_forward, gpu=inputs.gpu)
    a = plan.shape.arch
    tokens = mb * row_len
    full_layer = tokens * a.hidden * (34 + physics.attention_beta * 5 * a.n_heads * row_len / a.hidden)
    blocks = (tokens * a.n_layers * 2 * a.hidden + full_layer) if ckpt else a.n_layers * full_layer
    logits = tokens * a.vocab * 14.0  # bf16 logits, fp32 upcast, log-softmax and its grad
    dynamic = (blocks + logits) / 1e9 + mem["gathered_params"] + mem["grad_accum_buffer"]
    peak = (mem["static"] + dynamic * (1 + physics.fragmentation)
            + spec.framework_overhead_gb * physics.overhead_factor)

    # --- time: the parts helper models, with this cluster's constants, then what it does not
    br = step_time_breakdown(plan, physics.constants)
    compute = br["compute_s"] * (1 + physics.gemm_penalty * 2048 / tokens) * physics.slow_node_factor
    comm = br["comm_s"] * (1 + physics.cpu_contention * workers / 8)
    overlap = physics.constants["comm_overlap_fraction"]
    exposed = max(comm - overlap * compute, (1 - overlap) * comm)
    # eager PyTorch's host dispatch: a micro-batch waits on it where the device finishes first
    work = host_bound_seconds(compute + exposed, stack=plan.stack, blocks=a.n_layers, checkpointing=plan.checkpointing,
                              gpu=plan.gpu, micro_steps=ga, scale=physics.constants.get("host_dispatch_scale", 1.0))
    busy = work + br["optimizer_s"] + br["overhead_s"]
    stall = br["data_cpu_s"] if workers == 0 else max(
        0.0, br["data_cpu_s"] / max(1, min(workers, spec.cpu_cores_per_gpu or workers)) - busy)
    step_s = busy + stall
    tps = br["tokens_per_step_per_gpu"] / step_s
    common = dict(peak_mem_gb=peak, capacity_gb=spec.memory_gb, padding_efficiency=efficiency,
                  row_len=row_len, step_time_s=step_s)
    if peak > spec.memory_gb:
        return SimTruth(status="oom", message=(f"CUDA out of memory (simulated, {physics.name}): needs "
                                               f"{gib(peak):.1f} GiB of {spec.memory_gib:.1f} GiB per GPU"), **common)
    return SimTruth(status="ok", tokens_per_sec_per_gpu=tps, data_wait_frac=stall / step_s,
                    details={"compute_s": compute, "comm_s": comm, "step_time_s": step_s}, **common)


def preflight(physics: SimPhysics, *, gpu: str, world: int, gpus_per_node: int, nccl_algo: str,
              nccl_proto: str) -> str | None:
    """A simulated NCCL collective test: the error a forced setting raises here, or None."""
    algo = nccl_algo
    if physics.tree_falls_back and str(algo).lower() == "tree":
        return None
    try:
        plan_step("llama-1b", world, gpu=gpu, gpus_per_node=gpus_per_node, nccl_algo=algo, nccl_proto=nccl_proto)
    except UnsupportedCollective as exc:
        return str(exc)
    return None
