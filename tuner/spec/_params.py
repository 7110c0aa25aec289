"""The knob values a spec implies: the team's baseline, and every knob's value a trial runs with."""

from __future__ import annotations

from typing import Any

from tuner import knobs
from tuner.spec._spec import StudySpec

__all__ = ["baseline_params", "complete_params"]


def baseline_params(spec: StudySpec) -> dict[str, Any] | None:
    """The team's current config restricted to active knobs, or None when the spec has none."""
    if not spec.baseline:
        return None
    return {k: v for k, v in spec.baseline.items() if knobs.is_active(k, spec.baseline)}


def complete_params(params: dict[str, Any], spec: StudySpec) -> dict[str, Any]:
    """Every knob's value, as the workload receives it: the trial's params, then the spec's
    [model] settings for knobs the space does not search (`activation_checkpointing`), then
    the catalogue's defaults; inactive knobs left out.

    Example:
        >>> from tuner.spec import parse_spec
        >>> spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"},
        ...                    "space": {"micro_batch": [1, 2]}})
        >>> full = complete_params({"micro_batch": 2}, spec)
        >>> full["micro_batch"], full["nccl_algo"], "prefetch_factor" in full
        (2, 'default', False)
    """
    return knobs.resolve(params, {"activation_checkpointing": spec.model.activation_checkpointing})
