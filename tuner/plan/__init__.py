"""`tuner plan` and `tuner distill`: a training plan (layouts, batch, throughput, checkpoint
cadence) validated on a proxy study, its runbook, and helper's calibration fitted to studies.

Names are imported on first use: ``tuner plan`` answers in a fraction of a second and loads
neither Optuna nor torch unless it validates on a proxy or reads a tuning study.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the private module that defines it
_EXPORTS = {
    "BatchScript": "tuner.plan._runbook_script",
    "batch_script": "tuner.plan._runbook_script",
    "plan_batch_script": "tuner.plan._runbook_script",
    "DEFAULT_TIME_LIMIT_HOURS": "tuner.plan._runbook_script",
    "LLAMA3_FAILURES_PER_GPU_HOUR": "tuner.plan._planning",
    "distill": "tuner.plan._distill",
    "format_plan": "tuner.plan._planning",
    "format_validation": "tuner.plan._planning",
    "layout_rows": "tuner.plan._proxy",
    "proxy_layout_knobs": "tuner.plan._proxy",
    "proxy_spec": "tuner.plan._planning",
    "render_runbook": "tuner.plan._runbook",
    "run_plan": "tuner.plan._planning",
    "study_measurements": "tuner.plan._distill",
    "suggest": "tuner.plan._planning",
    "tuning_settings": "tuner.plan._runbook",
    "validate_plan": "tuner.plan._planning",
    "write_runbook": "tuner.plan._runbook",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.plan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
