"""Launchers: one interface, a registry by name.

Example:
    >>> sorted(LAUNCHERS)            # doctest: +SKIP
    ['local', 'sim', 'slurm']
"""

from __future__ import annotations

import importlib

from tuner.errors import LauncherError
from tuner.launch.base import STATUSES, Launcher, TrialRequest, TrialResult
from tuner.spec import StudySpec

__all__ = ["Launcher", "TrialRequest", "TrialResult", "STATUSES", "LAUNCHERS", "get_launcher"]

# name -> "module:Class", imported on first use so `sim` never loads what `slurm` needs.
LAUNCHERS = {
    "local": "tuner.launch.local:LocalLauncher",
    "slurm": "tuner.launch.slurm:SlurmLauncher",
    "sim": "tuner.launch.sim:SimLauncher",
}


def get_launcher(spec: StudySpec) -> Launcher:
    name = spec.cluster.launcher
    if name not in LAUNCHERS:
        raise LauncherError(f"unknown launcher {name!r}; one of {', '.join(LAUNCHERS)}")
    module, cls = LAUNCHERS[name].split(":")
    try:
        launcher_cls = getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        raise LauncherError(f"launcher {name!r} is not available in this version ({exc})") from None
    return launcher_cls(spec)
