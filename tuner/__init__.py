"""tuner: a throughput autotuner for distributed LLM fine-tuning.

The library API comes first; `tuner.cli` is a thin layer over it. The top-level modules are
the contract a training rank imports (``tuner.knobs``, ``tuner.protocol``, ``tuner.errors``,
``tuner.measurement``); each concern is a package with a face (docs/architecture.md). Names
here are imported on first use, so the training rank loads neither Optuna nor SQLAlchemy.

Example:
    >>> from tuner import load_spec, run_study, RunOptions          # doctest: +SKIP
    >>> spec = load_spec("studies/quickstart.toml")                   # doctest: +SKIP
    >>> run_study(spec, RunOptions(storage_url="sqlite:///tuner.db"))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

try:
    __version__ = metadata.version("tuner")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# public name -> the module that defines it
_EXPORTS = {
    "parse_budget": "tuner.budget",
    "RunOptions": "tuner.study", "TrialEvent": "tuner.study", "run_study": "tuner.study",
    "RunSummary": "tuner.study", "open_study": "tuner.study", "study_status": "tuner.study",
    "load_existing_study": "tuner.storage",
    "StudySpec": "tuner.spec", "load_spec": "tuner.spec", "parse_spec": "tuner.spec",
    "analyze_study": "tuner.stats",
    "open_storage": "tuner.storage", "resolve_storage_url": "tuner.storage",
    "TunerError": "tuner.errors", "SpecError": "tuner.errors", "StorageError": "tuner.errors",
    "StudyConflictError": "tuner.errors", "BudgetError": "tuner.errors",
    "KNOBS": "tuner.knobs",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
