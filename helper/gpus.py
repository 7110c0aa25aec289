"""Accelerators as plain numbers, each with its source.

GB is 1e9 bytes and GB/s 1e9 bytes per second throughout the model. What a reader sees about
GPU memory is in GiB (2^30 bytes), the unit nvidia-smi (MiB) and ``torch.cuda.max_memory_allocated``
report and the unit trials record (``peak_mem_gib``): an "80GB" H100 shows 81559 MiB = 79.6 GiB.
:func:`gib` is the one conversion. Link bandwidths are per GPU and per direction: what one ring
step can push. An unknown GPU name is an error that lists the known ones (nanoGPT's rule: no
number rather than a wrong one).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["GpuSpec", "GPUS", "get_gpu", "power_capped", "gib", "BYTES_PER_GIB"]

BYTES_PER_GIB = 2**30
"""A GiB: the unit GPU memory is shown in (nvidia-smi, torch.cuda)."""


def gib(gb: float) -> float:
    """GB (1e9 bytes, the model's unit) as GiB (2^30 bytes, the unit shown).

    Example:
        >>> round(gib(get_gpu("H100-80GB").memory_gb), 2)     # nvidia-smi: 81559 MiB
        79.65
    """
    return gb * 1e9 / BYTES_PER_GIB


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator model, in the node it usually ships in."""

    name: str
    """Name used everywhere in tuner (`cluster.gpu` of a spec)."""
    peak_flops: float
    """Dense peak of the training dtype, FLOP/s (bf16 tensor cores on GPUs)."""
    memory_gb: float
    """Device memory the allocator can use, GB (1e9 bytes; see ``_CAPACITY_NOTE``)."""
    hbm_gbs: float
    """Device memory bandwidth, GB/s (sets the optimizer-step time)."""
    intra_node_gbs: float
    """Per-GPU, per-direction bandwidth to the other GPUs of its node, GB/s (NVLink)."""
    net_gbs_per_gpu: float
    """Per-GPU share of the node's scale-out network, GB/s (one NIC per GPU on DGX)."""
    nccl_arch: str
    """Row of NCCL's tuning tables: ``ampere``, ``hopper``, or ``none`` (gloo, no NCCL)."""
    nvls: bool
    """NVLink SHARP (NVSwitch multicast) available: Hopper SXM in NVSwitch systems."""
    cpu_cores_per_gpu: int
    """Host cores per GPU in the reference node (caps useful DataLoader workers)."""
    framework_overhead_gb: float
    """Fixed memory outside tensors: CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers."""
    compute_dtype_bytes: int
    """Bytes per element of parameters and activations as computed (2 = bf16)."""
    peak_is_nominal: bool = False
    """True when ``peak_flops`` is a nominal figure (the CPU proxy), not a datasheet peak."""
    peak_rel_sd: float = 0.0
    """Relative uncertainty of ``peak_flops``: 0 for a datasheet figure; a modelled part (a
    power-capped one) states how far its peak may be off. ``helper.fitting`` weighs such a
    part's measurements by ``sqrt(noise^2 + peak_rel_sd^2)``: a row whose part is uncertain
    informs the shared constants less."""
    attention_ceiling_flops: float | None = None
    """Published forward + backward ceiling of the flash-attention kernel on this part, FLOP/s
    (None: ``peak_flops``). Not a throughput the model predicts with: ``helper.ties`` ties
    attention's efficiency across GPU models through it, so a GPU whose rows hardly exercise
    attention takes its kernel share from the GPUs whose rows do (see ``_FA2_*`` below)."""
    source: str
    """Where the numbers come from."""

    @property
    def memory_gib(self) -> float:
        """Device memory, GiB: what nvidia-smi shows (an "80GB" H100: 79.6 GiB)."""
        return gib(self.memory_gb)


# Framework overhead (all GPUs): ~0.5-1 GB CUDA context with kernels loaded lazily (PyTorch
# "CUDA semantics" notes, CUDA_MODULE_LOADING=LAZY), cuBLAS workspaces (a few MiB per
# stream), NCCL buffers (NCCL_BUFFSIZE = 4 MiB per channel per peer direction, NCCL env docs)
# -> an allowance of 1 GB, not a measurement (2 GB predicted MPT jobs that ran as OOM).
_GPU_OVERHEAD_GB = 1.0

# Capacity: the datasheets' "40GB"/"80GB"/"141GB" are binary sizes of the HBM stacks; the
# usable total is nvidia-smi's memory.total (A100 40GB: 40960 MiB, A100 80GB: 81920 MiB,
# H100 SXM 80GB: 81559 MiB, H200: 143771 MiB), in 1e9 bytes. Checked 2026-11-23 against
# nvidia-smi tables quoted in public GitHub files: "NVIDIA A100-SXM4-40GB ... 40960MiB",
# "NVIDIA A100-SXM4-80GB ... 81920MiB", "NVIDIA H100 80GB HBM3 ... 81559MiB", "NVIDIA H200 ...
# 143771MiB" (each seen in several independent repositories; docs/validation.md). Reading "80GB" as 80e9 bytes
# understated an H100 by 7 % and predicted published jobs out of memory (issue 13).
_MIB = 2**20 / 1e9

# Flash attention's ceilings, one kernel (FlashAttention-2, Dao 2023, arXiv 2307.08691) on both
# parts. A100: "up to 73% of the theoretical max throughput in the forward pass, and up to 63%
# ... in the backward pass" (Sec. 1), the backward counted as 2.5x the forward's FLOPs (Sec.
# 4.1): fwd+bwd = 3.5 / (1 / 0.73 + 2.5 / 0.63) x 312 = 205 TFLOP/s. H100: "up to 335
# TFLOPs/s" forward + backward (Sec. 4.1, Fig. 7), the same kernel without Hopper's TMA or
# wgmma. The kernel reaches 0.66 of A100's dense peak but 0.34 of H100's: a share of the dense
# peak does not carry from one part to the other, a share of this ceiling does (issue 30).
_FA2_A100_FLOPS = 3.5 / (1 / 0.73 + 2.5 / 0.63) * 312e12
_FA2_H100_FLOPS = 335e12

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): BF16 tensor core 312
        # TFLOPS dense (624 with sparsity); A100 40GB SXM HBM2 1,555 GB/s; NVLink 600 GB/s
        # total (= 300 GB/s per direction). DGX A100 datasheet: 8x ConnectX-6 200 Gb/s HDR
        # InfiniBand for compute (= 25 GB/s per GPU), 2x 64-core AMD EPYC 7742 (16 cores/GPU).
        GpuSpec(name="A100-40GB", peak_flops=312e12, memory_gb=40960 * _MIB, hbm_gbs=1555.0,
                intra_node_gbs=300.0, net_gbs_per_gpu=25.0, nccl_arch="ampere", nvls=False,
                cpu_cores_per_gpu=16, framework_overhead_gb=_GPU_OVERHEAD_GB, compute_dtype_bytes=2,
                attention_ceiling_flops=_FA2_A100_FLOPS,
                source="NVIDIA A100 datasheet (SXM4 40GB); DGX A100 datasheet"),
        # Same datasheet: A100 80GB SXM HBM2e 2,039 GB/s; DGX A100 640GB: 8x 200 Gb/s.
        GpuSpec(name="A100-80GB", peak_flops=312e12, memory_gb=81920 * _MIB, hbm_gbs=2039.0,
                intra_node_gbs=300.0, net_gbs_per_gpu=25.0, nccl_arch="ampere", nvls=False,
                cpu_cores_per_gpu=16, framework_overhead_gb=_GPU_OVERHEAD_GB, compute_dtype_bytes=2,
                attention_ceiling_flops=_FA2_A100_FLOPS,
                source="NVIDIA A100 datasheet (SXM4 80GB); DGX A100 datasheet"),
        # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), SXM5: BF16 tensor core
        # 1,979 TFLOPS with sparsity = 989 dense; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s
        # total (450 per direction). DGX H100 user guide: 8x ConnectX-7 400 Gb/s compute
        # ports (= 50 GB/s per GPU), 2x 56-core Xeon 8480C (14 cores/GPU).
        GpuSpec(name="H100-80GB", peak_flops=989e12, memory_gb=81559 * _MIB, hbm_gbs=3350.0,
                intra_node_gbs=450.0, net_gbs_per_gpu=50.0, nccl_arch="hopper", nvls=True,
                cpu_cores_per_gpu=14, framework_overhead_gb=_GPU_OVERHEAD_GB, compute_dtype_bytes=2,
                attention_ceiling_flops=_FA2_H100_FLOPS,
                source="NVIDIA H100 datasheet (SXM5); DGX H100 user guide"),
        # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200), SXM: BF16 1,979 TFLOPS
        # with sparsity = 989 dense; 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s. DGX H200:
        # same 8x ConnectX-7 400 Gb/s and CPUs as DGX H100.
        GpuSpec(name="H200-141GB", peak_flops=989e12, memory_gb=143771 * _MIB, hbm_gbs=4800.0,
                intra_node_gbs=450.0, net_gbs_per_gpu=50.0, nccl_arch="hopper", nvls=True,
                cpu_cores_per_gpu=14, framework_overhead_gb=_GPU_OVERHEAD_GB, compute_dtype_bytes=2,
                attention_ceiling_flops=_FA2_H100_FLOPS,
                source="NVIDIA H200 datasheet (SXM); DGX H200 datasheet"),
        # The CPU/gloo quickstart proxy: one process per "GPU". Nothing here is a datasheet
        # number. peak_flops is the nominal fp32 FMA peak of one 2.5 GHz AVX2 core
        # (2 FMA units x 8 lanes x 2 FLOP = 32 FLOP/cycle = 80 GFLOP/s); what a process really
        # achieves is the calibrated compute_efficiency. The "link" is gloo over loopback TCP
        # (an assumed 2 GB/s, calibrated by bus_bw_efficiency); memory is an assumed 16 GB
        # share of host RAM; fp32 (dtype "auto" on CPU).
        GpuSpec(name="cpu", peak_flops=80e9, memory_gb=16.0, hbm_gbs=20.0,
                intra_node_gbs=2.0, net_gbs_per_gpu=1.0, nccl_arch="none", nvls=False,
                cpu_cores_per_gpu=1, framework_overhead_gb=0.5, compute_dtype_bytes=4,
                peak_is_nominal=True,
                source="nominal (not a datasheet): calibrated from a CPU quickstart study"),
    )
}


def get_gpu(name: str | GpuSpec) -> GpuSpec:
    """The :class:`GpuSpec` called ``name`` (case-insensitive).

    Raises:
        ValueError: unknown name; the message lists the known ones.

    Example:
        >>> get_gpu("h100-80gb").peak_flops
        989000000000000.0
    """
    if isinstance(name, GpuSpec):
        return name
    for key, spec in GPUS.items():
        if key.lower() == str(name).strip().lower():
            return spec
    raise ValueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")


def power_capped(spec: GpuSpec, *, watts: float, tdp_watts: float) -> GpuSpec:
    """``spec`` run under a power limit of ``watts`` (its datasheet TDP is ``tdp_watts``).

    Dense matmuls are power-bound on these parts, so the power limit sets the sustained clock.
    Dynamic power is P = a C V^2 f and, in the DVFS range, V rises with f, so P ~ f^3 and the
    clock (and the tensor-core peak) scales as (watts / tdp_watts)^(1/3). A model, not a
    measurement: torchtitan's H100 benchmark (500 W on a 700 W part) only bounds its peak
    between the H100 NVL's 835 and the SXM's 989 TFLOP/s; this rule gives 884. The name is
    kept so the part resolves the full-power part's calibrated constants.

    Example:
        >>> round(power_capped(get_gpu("H100-80GB"), watts=500, tdp_watts=700).peak_flops / 1e12)
        884
    """
    if not 0 < watts <= tdp_watts:
        raise ValueError(f"watts must be in (0, tdp_watts={tdp_watts}], got {watts}")
    scale = (watts / tdp_watts) ** (1.0 / 3.0)
    ceiling = spec.attention_ceiling_flops
    return dataclasses.replace(spec, peak_flops=spec.peak_flops * scale,
                               attention_ceiling_flops=None if ceiling is None else ceiling * scale,
                               source=f"{spec.source}; power-capped at {watts:g} W of {tdp_watts:g} W "
                                      f"(peak x {scale:.3f}, helper.gpus.power_capped)")
