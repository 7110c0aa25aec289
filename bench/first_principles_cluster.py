"""A cluster model written from first principles, independently of helper/.

Step time of one optimizer step of an FSDP2 fine-tune (bf16 compute, Adam, full shard over
all ranks, gradients reduce-scattered once per step in bf16), built from vendor datasheets and
papers, never from helper's code or constants:

    step = grad_accum x (compute x contention x memory_pressure + exposed all-gather
                         + host overhead + data-loader stall)
           + exposed reduce-scatter + optimizer + per-step overhead

- compute: FLOPs of a micro-batch / (peak bf16 FLOP/s x efficiency(tokens per micro-batch)).
  FLOPs per token 6·N + 12·L·h·s (Kaplan et al. 2020, eq. 2.1; the attention term as
  torchtitan's models/utils.py counts it); activation checkpointing adds a forward: 8·N + 16·L·h·s.
  Efficiency rises with the GEMM size as T / (T + T_half) towards a ceiling (Megatron-LM reports
  52% of A100 peak at scale, Narayanan et al. 2021; PaLM 46%, Chowdhery et al. 2022).
- collectives: ring all-gather / reduce-scatter move (n-1)/n of the buffer per GPU (Patarasuk &
  Yuan 2009) over the slowest link of the ring (NVLink inside a node, the GPU's NIC across);
  NCCL's protocols carry 1 (Simple), 120/128 (LL128) or 1/2 (LL: 4 data bytes per 8-byte
  store) of the link's bytes (NCCL docs and Jeaugey's GTC 2020 talk); NVLS (NVSwitch SHARP,
  Hopper only) reduces in the switch. Tree has no all-gather/reduce-scatter; NVLS runs only
  Simple; NVLS needs an NVSwitch with SHARP (H100 SXM): these fail like NCCL's "no
  algorithm/protocol available".
- overlap: FSDP2 prefetches the next block's all-gather during the current block's compute,
  so only what compute cannot hide is exposed (plus the first block's gather); NCCL kernels
  take SMs, slowing the overlapped compute (Jangda et al. 2022, "Breaking the computation and
  communication abstraction barrier").
- optimizer: Adam on the local shard is memory-bound: ~34 bytes per parameter moved (fp32
  param, grad and two moments read and written, a bf16 copy written) at HBM bandwidth.
- data loader: per example CPU time (template + tokenizer + collate); 0 workers run it inline,
  w workers in parallel up to the node's cores per GPU; a queue of w x prefetch_factor batches
  absorbs the jitter of long examples; workers past the cores slow the training process too.
- memory: fp32 master weights, fp32 gradient shard and two Adam moments, 16 bytes per parameter
  over the shard group (Rajbhandari et al. 2020, ZeRO, section 3: 2+2+12 with a bf16 copy; FSDP2
  keeps the bf16 copy only for the gathered blocks); bf16 gathered blocks (two at a time, or
  all of them without reshard_after_forward); with grad_accum > 1 the unsharded gradients
  accumulate in bf16 (MixedPrecisionPolicy(reduce_dtype=torch.bfloat16), the team's setting);
  activations per block s·b·(16h + 6f) bytes: Korthikanti et al. 2022, eq. 1, with the s²
  attention scores gone (FlashAttention, Dao et al. 2022), no dropout masks, and SwiGLU's three
  f-wide tensors in place of GeLU's 4h; with checkpointing 2·s·b·h per block plus one block
  recomputed; logits s·b·V at bf16 + fp32 upcast + fp32 gradient; a fixed CUDA context and NCCL
  buffers; allocator fragmentation on the dynamic part. Near capacity the caching allocator
  frees and retries cudaMalloc (PyTorch docs, "CUDA memory management"), slowing the step.

The constants that no datasheet fixes (efficiency ceiling, overlap, CPU cost per example, ...)
are drawn per seed from the ranges in :data:`RANGES`, so ``seed`` gives a family of plausible
clusters of the same construction; ``seed=None`` takes each range's middle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from bench.surface_truth import Outcome

__all__ = ["ModelShape", "GpuSheet", "SHAPES", "GPU_SHEETS", "Constants", "RANGES", "draw_constants",
           "FirstPrinciplesCluster"]

GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A decoder's dimensions (the model cards' config.json)."""

    n_params: float
    n_layers: int
    hidden: int
    ffn_hidden: int
    n_heads: int
    vocab: int


SHAPES = {
    # meta-llama/Llama-2-7b-hf and -13b-hf config.json; TinyLlama-1.1B config.json
    "llama-2-7b": ModelShape(n_params=6.74e9, n_layers=32, hidden=4096, ffn_hidden=11008, n_heads=32, vocab=32000),
    "llama-2-13b": ModelShape(n_params=13.02e9, n_layers=40, hidden=5120, ffn_hidden=13824, n_heads=40, vocab=32000),
    "llama-1b": ModelShape(n_params=1.10e9, n_layers=22, hidden=2048, ffn_hidden=5632, n_heads=32, vocab=32000),
}


@dataclass(frozen=True, kw_only=True)
class GpuSheet:
    """One GPU and its node, from the vendor's datasheets."""

    peak_bf16_flops: float
    """Dense bf16 tensor-core FLOP/s."""
    hbm_bytes_per_s: float
    capacity_gib: float
    """Memory the allocator can use: nvidia-smi's total less ~0.5 GiB the driver keeps."""
    nvlink_bytes_per_s: float
    """NVLink bandwidth per GPU, one direction."""
    nic_bytes_per_s: float
    """Inter-node bandwidth per GPU (one rail-optimised NIC per GPU), one direction."""
    nvls: bool
    """NVSwitch with SHARP (NCCL's NVLS algorithm)."""
    cores_per_gpu: int
    """CPU cores of the node per GPU."""


GPU_SHEETS = {
    # H100 SXM5 datasheet: 989 TFLOPS bf16 dense, 3.35 TB/s HBM3, NVLink 900 GB/s bidirectional;
    # nvidia-smi 81,559 MiB. DGX H100: 8x ConnectX-7 400 Gb/s, 2x Xeon 8480C (112 cores).
    "H100-80GB": GpuSheet(peak_bf16_flops=989e12, hbm_bytes_per_s=3.35e12, capacity_gib=79.15,
                          nvlink_bytes_per_s=450e9, nic_bytes_per_s=50e9, nvls=True, cores_per_gpu=14),
    # A100 SXM4 datasheet: 312 TFLOPS bf16 dense, 2,039 GB/s (80GB) / 1,555 GB/s (40GB), NVLink
    # 600 GB/s bidirectional; nvidia-smi 81,920 / 40,960 MiB. DGX A100: 8x ConnectX-6 HDR
    # 200 Gb/s, 2x EPYC 7742 (128 cores).
    "A100-80GB": GpuSheet(peak_bf16_flops=312e12, hbm_bytes_per_s=2.039e12, capacity_gib=79.5,
                          nvlink_bytes_per_s=300e9, nic_bytes_per_s=25e9, nvls=False, cores_per_gpu=16),
    "A100-40GB": GpuSheet(peak_bf16_flops=312e12, hbm_bytes_per_s=1.555e12, capacity_gib=39.5,
                          nvlink_bytes_per_s=300e9, nic_bytes_per_s=25e9, nvls=False, cores_per_gpu=16),
}


@dataclass(frozen=True, kw_only=True)
class Constants:
    """What no datasheet fixes; each drawn per seed from :data:`RANGES`."""

    efficiency_max: float
    """Ceiling of achieved / peak FLOP/s for large GEMMs (Megatron 0.52 on A100; PaLM 0.46)."""
    tokens_half_efficiency: float
    """Tokens per micro-batch at which half the ceiling is reached."""
    link_efficiency: float
    """Bus bandwidth NCCL reaches of the link's peak (nccl-tests reach 80-90% on NVLink/IB)."""
    overlap: float
    """Share of compute time that can hide communication (FSDP2 prefetch of the next block)."""
    sm_contention: float
    """Compute slow-down while NCCL kernels run beside it, at full overlap."""
    nccl_default_penalty: float
    """NCCL's own choice (unset NCCL_ALGO/PROTO) loses this share of bandwidth to the best
    forced setting: its tuning tables are per platform, not per job."""
    host_s_per_micro_batch: float
    """Exposed host time per micro-batch (hooks, launches not hidden, loss bookkeeping)."""
    host_s_per_step: float
    """Exposed host time per optimizer step (grad-norm clipping, zero_grad, logging)."""
    cpu_s_per_example: float
    """Data-loader CPU seconds per example (prompt template, tokenizer, collate)."""
    loader_jitter: float
    """Coefficient of variation of one batch's load time (long-tailed example lengths)."""
    mean_tokens_per_example: float
    """Alpaca with its prompt template, Llama tokenizer (an assumption: ~180 tokens of
    instruction/input/output plus ~60 of template)."""
    logit_bytes_per_element: float
    """Bytes per logit element live at the loss (bf16 logits, fp32 upcast, fp32 gradient)."""
    fixed_mem_gib: float
    """CUDA context, cuBLAS workspaces and NCCL buffers."""
    fragmentation: float
    """Caching-allocator overhead on the dynamic memory."""
    pressure_slowdown: float
    """Step slow-down at 100% of capacity from allocator retries (none below 90%)."""
    startup_fixed_s: float
    """Interpreter, torch import, CUDA init and dataset load of a cold start."""
    fs_bytes_per_s: float
    """Checkpoint read bandwidth per node (shared filesystem)."""


RANGES: dict[str, tuple[float, float]] = {
    "efficiency_max": (0.38, 0.58), "tokens_half_efficiency": (400.0, 2000.0), "link_efficiency": (0.75, 0.9),
    "overlap": (0.6, 0.95), "sm_contention": (0.03, 0.15), "nccl_default_penalty": (0.0, 0.12),
    "host_s_per_micro_batch": (0.004, 0.025), "host_s_per_step": (0.02, 0.08), "cpu_s_per_example": (0.0005, 0.005),
    "loader_jitter": (0.2, 1.0), "mean_tokens_per_example": (200.0, 300.0), "logit_bytes_per_element": (6.0, 10.0),
    "fixed_mem_gib": (2.5, 4.5), "fragmentation": (0.03, 0.15), "pressure_slowdown": (0.05, 0.4),
    "startup_fixed_s": (30.0, 70.0), "fs_bytes_per_s": (1e9, 4e9),
}


def draw_constants(seed: int | None) -> Constants:
    """One draw of :class:`Constants` (uniform in each range); ``None``: the middles."""
    rng = None if seed is None else np.random.default_rng(np.random.SeedSequence([seed, 0xF1257]))
    return Constants(**{f.name: (sum(RANGES[f.name]) / 2 if rng is None else float(rng.uniform(*RANGES[f.name])))
                        for f in fields(Constants)})


_PROTO_PAYLOAD = {"simple": 1.0, "ll128": 120 / 128, "ll": 0.5}
"""Share of the link's bytes that carry data (NCCL's protocols: LL128 128-byte lines with 8
flag bytes, LL 8-byte stores with a 4-byte flag)."""
_PROTO_LATENCY_S = {"simple": 8e-6, "ll128": 4e-6, "ll": 2e-6}
"""Per ring step latency, the order of NCCL's tuning tables (src/graph/tuning.cc)."""
_NVLS_GAIN = 1.3
"""NVLS bandwidth gain inside a node (reduction and multicast in the switch; NVIDIA's NCCL 2.18
blog reports up to 2x all-reduce bus bandwidth; we take a cautious 1.3x for AG/RS)."""
_NVLS_MEM_GIB = 1.5
"""Extra buffers NVLS registers (NCCL docs warn NVLS uses significant GPU memory)."""


class FirstPrinciplesCluster:
    """One such cluster for a model preset on ``world_size`` GPUs (a :class:`surface_truth.Truth`).

    Example:
        >>> c = FirstPrinciplesCluster("llama-2-7b", gpu="H100-80GB", world_size=32, gpus_per_node=8,
        ...                            seq_len=2048, seed=None)
        >>> base = {"nccl_algo": "default", "nccl_proto": "default", "num_workers": 2, "prefetch_factor": 2,
        ...         "grad_accum": 4, "micro_batch": 4, "padding": "packed", "activation_checkpointing": False}
        >>> o = c.evaluate(base)
        >>> o.status, 5000 < o.tokens_per_sec_per_gpu < 15000, 40 < o.peak_mem_gib < 79
        ('ok', True, True)
        >>> c.evaluate({**base, "nccl_algo": "Tree"}).status
        'error'
    """

    def __init__(self, model: str, *, gpu: str, world_size: int, gpus_per_node: int, seq_len: int,
                 seed: int | None, constants: Constants | None = None) -> None:
        self.shape, self.gpu = SHAPES[model], GPU_SHEETS[gpu]
        self.world_size, self.gpus_per_node, self.seq_len = world_size, min(gpus_per_node, world_size), seq_len
        self.nodes = math.ceil(world_size / self.gpus_per_node)
        self.constants = constants or draw_constants(seed)

    # ---- NCCL -------------------------------------------------------------------------------
    def preflight_nccl(self, nccl_algo: str, nccl_proto: str) -> str | None:
        return self._nccl_error(nccl_algo.lower(), nccl_proto.lower())

    def _nccl_error(self, algo: str, proto: str) -> str | None:
        unavailable = "NCCL WARN Error: no algorithm/protocol available for AllGather with NCCL_ALGO={} NCCL_PROTO={}"
        if algo == "tree":  # Tree implements all-reduce only
            return unavailable.format(algo, proto)
        if algo == "nvls" and (not self.gpu.nvls or proto not in ("default", "simple")):
            return unavailable.format(algo, proto)
        if algo not in ("default", "ring", "nvls") or proto not in ("default", *_PROTO_PAYLOAD):
            return f"NCCL WARN Error: unknown setting NCCL_ALGO={algo} NCCL_PROTO={proto}"
        return None

    def _collective_s(self, nbytes: float, n: int, *, intra_node: bool, algo: str, proto: str) -> float:
        """Seconds of one ring all-gather or reduce-scatter of ``nbytes`` (the full buffer) over
        ``n`` ranks; ``default`` settings: NCCL's choice, the best available less its penalty."""
        if n <= 1:
            return 0.0
        algos = ("ring", "nvls") if algo == "default" else (algo,)
        protos = tuple(_PROTO_PAYLOAD) if proto == "default" else (proto,)
        link = self.gpu.nvlink_bytes_per_s if intra_node else self.gpu.nic_bytes_per_s
        best = math.inf
        for a in algos:
            for p in protos:
                if self._nccl_error(a, p):
                    continue
                bw = link * self.constants.link_efficiency * _PROTO_PAYLOAD[p]
                if a == "nvls":  # the switch helps the NVLink part only
                    bw = bw * _NVLS_GAIN if intra_node else bw
                best = min(best, nbytes * (n - 1) / n / bw + (n - 1) * _PROTO_LATENCY_S[p])
        penalty = self.constants.nccl_default_penalty if algo == "default" and proto == "default" else 0.0
        return best * (1 + penalty)

    # ---- memory -----------------------------------------------------------------------------
    def _rows(self, padding: str, micro_batch: int) -> tuple[int, float]:
        """(row length in tokens, non-padding tokens per row)."""
        mean = min(self.constants.mean_tokens_per_example, self.seq_len)
        if padding == "packed":
            return self.seq_len, 0.99 * self.seq_len  # a separator per example
        if padding == "longest":  # the batch's longest example: Gumbel-like growth with b
            row = min(self.seq_len, int(mean * (1 + 0.6 * math.sqrt(2 * math.log(micro_batch + 1)))))
            return row, mean
        return self.seq_len, mean

    def memory_gib(self, params: Mapping[str, Any]) -> dict[str, float]:
        """Peak memory per GPU by part, GiB (see the module doc)."""
        s, c = self.shape, self.constants
        mb, ga, ckpt = int(params["micro_batch"]), int(params["grad_accum"]), bool(params["activation_checkpointing"])
        row, _ = self._rows(str(params["padding"]), mb)
        group = self.gpus_per_node if params.get("sharding") == "hybrid_shard" else self.world_size
        reshard = params.get("sharding") != "shard_grad_op" and params.get("reshard_after_forward", True)
        states = 16 * s.n_params / group
        gathered = 2 * s.n_params if not reshard else 2 * 2 * s.n_params / s.n_layers
        grads = 2 * 2 * s.n_params / s.n_layers + (2 * s.n_params if ga > 1 else 0.0)
        per_block = row * mb * (16 * s.hidden + 6 * s.ffn_hidden) + 4 * row * mb * s.n_heads
        acts = (s.n_layers * 2 * row * mb * s.hidden + per_block) if ckpt else s.n_layers * per_block
        logits = row * mb * s.vocab * c.logit_bytes_per_element
        dynamic = (gathered + grads + acts + logits) * (1 + c.fragmentation)
        fixed = c.fixed_mem_gib + (_NVLS_MEM_GIB if str(params.get("nccl_algo", "")).lower() == "nvls" else 0.0)
        parts = {"states": states / GIB, "gathered": gathered / GIB, "grads": grads / GIB, "activations": acts / GIB,
                 "logits": logits / GIB, "fragmentation": dynamic / GIB - (gathered + grads + acts + logits) / GIB,
                 "fixed": fixed}
        return {**parts, "total": sum(parts.values())}

    # ---- time -------------------------------------------------------------------------------
    def evaluate(self, params: Mapping[str, Any]) -> Outcome:
        s, c, g = self.shape, self.constants, self.gpu
        if int(params.get("tp_degree", 1)) != 1:
            raise ValueError("FirstPrinciplesCluster models FSDP only (tp_degree 1)")
        algo, proto = str(params["nccl_algo"]).lower(), str(params["nccl_proto"]).lower()
        mb, ga, ckpt = int(params["micro_batch"]), int(params["grad_accum"]), bool(params["activation_checkpointing"])
        row, real_per_row = self._rows(str(params["padding"]), mb)
        tokens_per_step = real_per_row * mb * ga * self.world_size
        mem = self.memory_gib(params)
        if err := self._nccl_error(algo, proto):
            return Outcome(status="error", tokens_per_sec_per_gpu=0.0, step_time_s=0.0, tokens_per_step=tokens_per_step,
                           peak_mem_gib=mem["fixed"], message=err)

        tokens_mb = row * mb
        flops_per_token = (8 if ckpt else 6) * s.n_params + (16 if ckpt else 12) * s.n_layers * s.hidden * row
        efficiency = c.efficiency_max * tokens_mb / (tokens_mb + c.tokens_half_efficiency)
        compute_s = tokens_mb * flops_per_token / (g.peak_bf16_flops * efficiency)
        pressure = mem["total"] / g.capacity_gib
        compute_s *= 1 + c.pressure_slowdown * max(0.0, (pressure - 0.9) / 0.1)

        hybrid = params.get("sharding") == "hybrid_shard"
        reshard = params.get("sharding") != "shard_grad_op" and params.get("reshard_after_forward", True)
        group = self.gpus_per_node if hybrid else self.world_size
        intra = hybrid or self.nodes == 1
        gather_s = self._collective_s(2 * s.n_params, group, intra_node=intra, algo=algo, proto=proto)
        ag_s = gather_s * (2 if reshard else 1)
        rs_s = self._collective_s(2 * s.n_params, group, intra_node=intra, algo=algo, proto=proto)
        if hybrid and self.nodes > 1:  # the shard's gradients all-reduced across nodes (2x a reduce-scatter)
            rs_s += 2 * self._collective_s(2 * s.n_params / group, self.nodes, intra_node=False, algo=algo, proto=proto)
        hide = c.overlap * compute_s
        exposed_ag = max(0.0, ag_s - hide) + gather_s / s.n_layers
        exposed_rs = max(0.0, rs_s - max(0.0, hide - ag_s)) + rs_s / s.n_layers
        compute_s *= 1 + c.sm_contention * min(1.0, (ag_s + rs_s / ga) / compute_s)

        workers = int(params.get("num_workers", 0))
        prefetch = int(params.get("prefetch_factor") or 2)
        examples_mb = mb * real_per_row / c.mean_tokens_per_example if params["padding"] == "packed" else mb
        load_s = examples_mb * c.cpu_s_per_example  # one micro-batch's worth, on one core
        oversubscribed = max(0.0, (workers + 1) / (g.cores_per_gpu - 1) - 1)  # the node's cores per GPU
        host_s = c.host_s_per_micro_batch * (1 + oversubscribed)
        busy_s = compute_s + exposed_ag + host_s
        if workers == 0:
            stall_s = load_s * (1 + c.loader_jitter / 4)
        else:
            rate = min(workers, g.cores_per_gpu - 1) / load_s  # micro-batches per second
            stall_s = max(0.0, 1 / rate - busy_s) + c.loader_jitter * load_s / (workers * prefetch)
        optimizer_s = 34 * s.n_params / group / (0.7 * g.hbm_bytes_per_s)
        step_s = ga * (busy_s + stall_s) + exposed_rs + optimizer_s + c.host_s_per_step
        details = {"compute_s": compute_s, "exposed_allgather_s": exposed_ag, "exposed_reducescatter_s": exposed_rs,
                   "data_stall_s": stall_s, "optimizer_s": optimizer_s, "efficiency": efficiency,
                   "mfu": tokens_mb * 6 * s.n_params / compute_s / g.peak_bf16_flops, "memory_gib": mem}
        if mem["total"] > g.capacity_gib:
            return Outcome(status="oom", tokens_per_sec_per_gpu=0.0, step_time_s=step_s, tokens_per_step=tokens_per_step,
                           peak_mem_gib=g.capacity_gib, details=details,
                           message=(f"CUDA out of memory: needs {mem['total']:.1f} GiB of "
                                    f"{g.capacity_gib:.1f} GiB per GPU"))
        return Outcome(status="ok", tokens_per_sec_per_gpu=tokens_per_step / self.world_size / step_s,
                       step_time_s=step_s, tokens_per_step=tokens_per_step, peak_mem_gib=mem["total"],
                       data_wait_frac=ga * stall_s / step_s, details=details)

    # ---- start-up ---------------------------------------------------------------------------
    def startup_parts(self) -> dict[str, float]:
        """Seconds of a cold start by part: interpreter and data (``fixed_s``), rendezvous and
        NCCL communicators (``rendezvous_s``: c10d store plus a ring bootstrap per node),
        model build (``model_init_s``: meta-device init, materialised and sharded) and the
        checkpoint read (``load_weights_s``: bf16 weights at the filesystem's bandwidth)."""
        s, c = self.shape, self.constants
        return {"fixed_s": c.startup_fixed_s, "rendezvous_s": 2.0 + 0.5 * self.nodes,
                "model_init_s": 3.0 + 4 * s.n_params / 2e9, "load_weights_s": 2 * s.n_params / c.fs_bytes_per_s}

    def setup_seconds(self, level: str, params: Mapping[str, Any]) -> float:
        """A cold start (``process``), or what a resident worker redoes: a new DataLoader (its
        workers forked, ~0.2 s each) always; the model rebuilt from meta-device init for
        ``model`` and up; new communicators for ``communicators``."""
        parts = self.startup_parts()
        if level == "process":
            return sum(parts.values())
        total = 1.0 + 0.2 * int(params.get("num_workers", 0))
        if level in ("model", "communicators"):
            total += parts["model_init_s"]
        if level == "communicators":
            total += parts["rendezvous_s"]
        return total

    def with_constants(self, **changes: float) -> FirstPrinciplesCluster:
        """The same cluster with some constants changed (tests, what-ifs)."""
        out = object.__new__(FirstPrinciplesCluster)
        out.__dict__.update(self.__dict__, constants=replace(self.constants, **changes))
        return out
