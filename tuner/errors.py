"""tuner's one exception base. Standard library only (the trial workload imports it too).

Every error a user can fix (a bad spec, budget or trial config, an unreachable storage, a
study that conflicts) is a :class:`TunerError`; the CLI prints it as one line and exits 2.
Any other exception is a bug and keeps its traceback.

Each subclass also derives from the built-in it replaced (``ValueError`` or
``RuntimeError``), so code that caught those before keeps working.

Example:
    >>> issubclass(SpecError, TunerError), issubclass(SpecError, ValueError)
    (True, True)
"""

from __future__ import annotations

__all__ = ["TunerError", "SpecError", "BudgetError", "StorageError", "StorageUnreachableError", "StudyConflictError",
           "LauncherError", "TrialConfigError", "PreflightError", "CircuitBreakerError", "OutputError"]


class TunerError(Exception):
    """An error the user can fix; the message is one line that names the problem."""


class SpecError(TunerError, ValueError):
    """A study spec is invalid; the message names file, key and problem."""


class BudgetError(TunerError, ValueError):
    """A budget string is malformed or not positive (`40gpuh`, `90gpum`, `600gpus`)."""


class StorageError(TunerError, RuntimeError):
    """The study storage cannot be used; the message names it (password redacted)."""


class StorageUnreachableError(StorageError):
    """The storage stayed unreachable for longer than an outage is waited out; what was recorded
    before is kept (tuner.storage's retries)."""


class StudyConflictError(TunerError, ValueError):
    """The study exists with another spec, is missing, or lacks what tuner needs."""


class LauncherError(TunerError, ValueError):
    """A launcher cannot run trials here (e.g. Slurm's commands are missing)."""


class TrialConfigError(TunerError, ValueError):
    """A trial config is not something the workload can run; the message names the key."""


class PreflightError(TunerError, ValueError):
    """The data, tokenizer or model cannot serve a trial; found before any trial ran."""


class CircuitBreakerError(TunerError, RuntimeError):
    """The study stopped: several trials in a row failed with the same error."""


class OutputError(TunerError, RuntimeError):
    """An output folder or file cannot be written (a file in the way, read-only, disk full)."""
