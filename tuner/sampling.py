"""The sampler a study uses, by name.

`auto` is tuner's default: TPE with multivariate + group (knobs interact: micro_batch and
grad_accum trade off; prefetch_factor only exists with workers) and constant_liar (parallel
coordinators do not get identical suggestions, optuna/optuna#3626). The choice is revisited
with evidence from bench/search_efficiency.py (docs/benchmarks.md).
"""

from __future__ import annotations

import itertools
import warnings

import optuna

from tuner.spec import StudySpec

__all__ = ["make_sampler"]


def make_sampler(spec: StudySpec, *, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with ``seed`` (default: the spec's; each coordinator of a
    study gets its own, tuner.repeats.coordinator_seed)."""
    name = spec.study.sampler
    seed = spec.study.seed if seed is None else seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=_startup(spec))
        if name in ("auto", "tpe-multivariate"):
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                              constant_liar=True, n_startup_trials=_startup(spec))
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        if name == "grid":
            grid = {k.name: list(k.values_for_grid()) for k in spec.space}
            return optuna.samplers.GridSampler(grid, seed=seed)
    raise ValueError(f"unknown sampler {name!r}")


def _startup(spec: StudySpec) -> int:
    """Random trials before TPE models the space: ~one per knob, 5..10 (Optuna's default 10
    wastes a small budget; Bergstra et al. 2011 use a handful)."""
    return max(5, min(10, len(spec.space) + 2))


def grid_size(spec: StudySpec) -> int:
    return len(list(itertools.product(*(k.values_for_grid() for k in spec.space))))
