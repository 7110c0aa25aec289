"""The one place that turns knob values into a trial's environment.

`default` means "leave it to NCCL": the variable is removed, even if the coordinator's own
shell set it, so the default really is NCCL's default. Other values pass through verbatim,
including NCCL >= 2.24's per-collective syntax (`allgather:ring;reducescatter:ring`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_KNOBS", "trial_environment"]

# knob -> environment variable (NCCL reads these at communicator creation; docs.nvidia.com/
# deeplearning/nccl/user-guide/docs/env.html)
ENV_KNOBS = {"nccl_algo": "NCCL_ALGO", "nccl_proto": "NCCL_PROTO"}


def trial_environment(params: Mapping[str, Any], base: Mapping[str, str], *,
                      config_path: str, result_path: str) -> dict[str, str]:
    env = dict(base)
    for knob, var in ENV_KNOBS.items():
        value = params.get(knob, "default")
        if value is None or str(value).lower() == "default":
            env.pop(var, None)
        else:
            env[var] = str(value)
    env["TUNER_TRIAL_CONFIG"] = config_path
    env["TUNER_RESULT_FILE"] = result_path
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
