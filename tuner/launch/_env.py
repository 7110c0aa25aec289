"""The one place that turns knob values into a trial's environment.

The variables come from the knob catalogue (tuner.knobs: ``NCCL_ALGO``, ``NCCL_PROTO``);
``default`` means "leave it to NCCL": the variable is removed, even if the coordinator's own
shell set it. The trial protocol's two variables say where the config and the result file are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import knobs
from tuner.protocol import CONFIG_ENV, RESULT_ENV

__all__ = ["trial_environment"]


def trial_environment(params: Mapping[str, Any], base: Mapping[str, str], *,
                      config_path: str, result_path: str) -> dict[str, str]:
    """``base`` plus the launch knobs' variables and the trial protocol's two paths."""
    env = knobs.environment(params, base)
    env[CONFIG_ENV] = config_path
    env[RESULT_ENV] = result_path
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
