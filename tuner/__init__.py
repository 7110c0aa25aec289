"""tuner: a throughput autotuner for distributed LLM fine-tuning.

The library API comes first; `tuner.cli` is a thin layer over it.

Example:
    >>> from tuner import load_spec, run_study, RunOptions          # doctest: +SKIP
    >>> spec = load_spec("studies/quickstart.toml")                   # doctest: +SKIP
    >>> run_study(spec, RunOptions(storage_url="sqlite:///tuner.db"))  # doctest: +SKIP
"""

__version__ = "0.1.0"

from tuner.budget import parse_budget  # noqa: E402
from tuner.coordinator import RunOptions, RunSummary, open_study, run_study, study_status  # noqa: E402
from tuner.spec import SpecError, StudySpec, load_spec  # noqa: E402
from tuner.storage import StorageError, open_storage, resolve_storage_url  # noqa: E402

__all__ = [
    "__version__", "parse_budget", "RunOptions", "RunSummary", "open_study", "run_study",
    "study_status", "SpecError", "StudySpec", "load_spec", "StorageError", "open_storage",
    "resolve_storage_url",
]
