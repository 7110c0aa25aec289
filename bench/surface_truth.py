"""What a benchmark truth answers for one config, and the interface both truths implement.

A *truth* is a cluster the bench pretends the user has: bench/surfaces.py draws random ones,
bench/first_principles_cluster.py computes one from datasheets. The launcher that serves a
truth with measurement noise (bench/surface_launcher.py) and the harness that scores the
pipeline against it (bench/search_surfaces.py) see only this interface. Pure: no tuner import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Outcome", "Truth", "SETUP_LEVELS"]

SETUP_LEVELS = ("none", "data_loader", "model", "communicators", "process")
"""tuner.knobs.RECONFIGURE, lightest first (repeated here so this module stays pure; the
launcher checks that the two agree)."""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """The noiseless behaviour of one config on one truth."""

    status: str
    """`ok`, `oom` (fails after start-up and one step) or `error` (an NCCL refusal at the first
    collective, after start-up)."""
    tokens_per_sec_per_gpu: float
    """Non-padding tokens per second per GPU at steady state (0 unless ok)."""
    step_time_s: float
    """Seconds of one optimizer step (grad_accum micro-batches); also for an OOM (its one step)."""
    tokens_per_step: float
    """Non-padding tokens of one optimizer step, all ranks together."""
    peak_mem_gib: float
    """Peak allocated memory per GPU, GiB (what torch.cuda.max_memory_allocated would show)."""
    data_wait_frac: float = 0.0
    """Share of the step spent waiting for the data loader."""
    message: str = ""
    """The failure's text (NCCL's or the allocator's)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Diagnostics (a breakdown of the step time, the memory parts)."""


class Truth(Protocol):
    """A cluster the bench measures on: noiseless outcomes, NCCL preflight, start-up costs."""

    world_size: int
    """GPUs of every trial."""

    def evaluate(self, params: Mapping[str, Any]) -> Outcome:
        """The outcome of a complete config (every knob's value)."""

    def preflight_nccl(self, nccl_algo: str, nccl_proto: str) -> str | None:
        """What a seconds-long collective test with this NCCL setting says: its error, or None."""

    def setup_seconds(self, level: str, params: Mapping[str, Any]) -> float:
        """Wall seconds before the first warm-up step: ``process`` a cold start, a lighter
        level (SETUP_LEVELS) the in-place reconfiguration of a resident worker."""
