"""Launchers: one interface (:class:`Launcher`: ``launch(request) -> TrialResult``), a registry
by name, and the launcher's side of the trial protocol.

``local`` runs a trial with torchrun on this node, ``slurm`` as a job step inside an
allocation the coordinator holds, ``sim`` against a performance model (tuner.sim). Each is
imported on first use, so ``sim`` never loads what ``slurm`` needs. A custom launcher is a
``Launcher`` subclass passed to ``run_study(..., launcher=...)``.

Example:
    >>> sorted(LAUNCHERS)
    ['local', 'sim', 'slurm']
"""

from __future__ import annotations

import importlib
from typing import Any

from tuner.errors import LauncherError
from tuner.launch._base import STATUSES, Launcher, TrialRequest, TrialResult, wall_limit_reason, wall_limit_s
from tuner.launch._env import trial_environment
from tuner.launch._protocol import classify_log, trial_result, write_trial_config
from tuner.spec import StudySpec

__all__ = ["Launcher", "TrialRequest", "TrialResult", "STATUSES", "LAUNCHERS", "get_launcher",
           "trial_environment", "write_trial_config", "trial_result", "classify_log", "wall_limit_s",
           "wall_limit_reason", "LocalLauncher", "SlurmLauncher", "SlurmError", "client_env",
           "diagnose_slurm_failure", "parse_slurm_duration_s", "run_slurm"]

# name -> "module:Class", imported on first use so `sim` never loads what `slurm` needs.
LAUNCHERS = {
    "local": "tuner.launch._local:LocalLauncher",
    "slurm": "tuner.launch._slurm:SlurmLauncher",
    "sim": "tuner.sim:SimLauncher",
}

# names of the launchers' own modules, loaded on first use like the registry's
_LAZY = {"LocalLauncher": "tuner.launch._local", "SlurmLauncher": "tuner.launch._slurm",
         "SlurmError": "tuner.launch._slurm_commands", "client_env": "tuner.launch._slurm_commands",
         "diagnose_slurm_failure": "tuner.launch._slurm_commands",
         "parse_slurm_duration_s": "tuner.launch._slurm_commands", "run_slurm": "tuner.launch._slurm_commands"}


def get_launcher(spec: StudySpec) -> Launcher:
    """The registry's launcher for the spec's [cluster] launcher."""
    name = spec.cluster.launcher
    if name not in LAUNCHERS:
        raise LauncherError(f"unknown launcher {name!r}; one of {', '.join(LAUNCHERS)}")
    module, cls = LAUNCHERS[name].split(":")
    try:
        launcher_cls = getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        raise LauncherError(f"launcher {name!r} is not available in this version ({exc})") from None
    return launcher_cls(spec)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.launch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
