"""What a trial measures besides time and tokens: peak memory, the process's age (start-up),
the device's peak FLOP/s and the model's FLOPs per token (for MFU). Standard library at
import; torch and helper inside the functions that need them."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

__all__ = ["CUDA_NAME_TO_GPU", "peak_memory_gib", "peak_reserved_gib", "process_age_s", "peak_flops_for",
           "model_flops_per_token"]

_IMPORT_S = time.perf_counter()

# CUDA device name -> helper.gpus entry whose datasheet peak gives MFU, most specific first.
# Variants with another peak map to None (PCIe/NVL H100 and H200 have lower clocks: H100
# PCIe 756 TF, H100 NVL 835 TF dense bf16, NVIDIA datasheets; GH200 is a different board):
# an unknown device gets no MFU rather than a wrong one. A100 is 312 TF in every form factor.
CUDA_NAME_TO_GPU: tuple[tuple[str, str | None], ...] = (
    ("GH200", None), ("H100 PCIe", None), ("H100 NVL", None), ("H200 NVL", None),
    ("H100", "H100-80GB"), ("H200", "H200-141GB"), ("A100", "A100-80GB"),
)


def peak_memory_gib(device) -> tuple[float, str]:
    """(peak, what it measures): CUDA allocator peak on GPU, the process's peak RSS on CPU."""
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30, "cuda_max_allocated"
    try:  # VmHWM is the peak RSS that a resident worker resets per trial (proc(5): clear_refs "5")
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024 / 2**30, "cpu_peak_rss"  # kB
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30, "cpu_peak_rss"  # KiB on Linux


def peak_reserved_gib(device) -> float | None:
    """The CUDA caching allocator's peak reserved memory (allocated + cached blocks); None on CPU."""
    import torch

    return torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else None


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc), else since this module's import."""
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat[stat.rfind(")") + 2:].split()[19])  # field 22, starttime (proc(5))
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _IMPORT_S


def peak_flops_for(device_name: str) -> tuple[str | None, float | None]:
    """(helper GPU name, dense bf16 peak FLOP/s) of a CUDA device name; (None, None) if unknown.

    Example:
        >>> peak_flops_for("NVIDIA H100 80GB HBM3"), peak_flops_for("NVIDIA H100 PCIe")
        (('H100-80GB', 989000000000000.0), (None, None))
    """
    from helper.gpus import get_gpu

    for pattern, gpu in CUDA_NAME_TO_GPU:
        if pattern.lower() in device_name.lower():
            return (gpu, get_gpu(gpu).peak_flops) if gpu else (None, None)
    return None, None


def model_flops_per_token(hf_config, n_params: int, seq_len: int) -> float:
    """Model FLOPs per trained token, via helper.throughput.flops_per_token (6 N_matmul +
    12 L H T; recomputation from checkpointing not counted, as MFU is defined)."""
    from helper.presets import ModelArch
    from helper.sizes import ModelShape
    from helper.throughput import flops_per_token

    c = hf_config
    arch = ModelArch(name="trial", n_layers=c.num_hidden_layers, hidden=c.hidden_size, n_heads=c.num_attention_heads,
                     n_kv_heads=getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                     intermediate=c.intermediate_size, vocab=c.vocab_size, max_seq_len=seq_len)
    return flops_per_token(ModelShape(n_params=float(n_params), arch=arch, label="trial", note=""), seq_len)
