"""The sampler a study uses, by name.

`auto` is tuner's default: the model-guided sampler (tuner.search: helper's model,
refitted to the study online, expected improvement) whenever helper knows the spec's model
and cluster (a preset on a helper GPU over NCCL); otherwise TPE with multivariate + group
(knobs interact: micro_batch and grad_accum trade off; prefetch_factor only exists with
workers) and constant_liar (parallel coordinators do not get identical suggestions,
optuna/optuna#3626). `model` names the model-guided sampler. Evidence:
bench/search_efficiency.py (docs/benchmarks.md).

TPE and GP learn from screening: a config tuner.search pruned is stored as a FAIL trial
(it never ran), which Optuna's samplers ignore, so they proposed the screened region again
and again (a 20-seed bench did not finish one seed in 17 minutes). They read the study
through a view (:class:`LearnsFromScreening`) in which each pruned trial is the failure it
stands for: COMPLETE, value 0, the constraint ``failed`` violated (tuner.search.
as_sampler_sees_it). TPE puts infeasible trials in its "above" group; GP models the
constraint and weighs expected improvement by the probability of feasibility.
"""

from __future__ import annotations

import itertools
import warnings

import optuna

from tuner.errors import SpecError
from tuner.model import model_knows
from tuner.search._model_sampler import ModelGuidedSampler
from tuner.search._screening import as_sampler_sees_it
from tuner.spec import StudySpec
from tuner.storage import StudyView

__all__ = ["make_sampler", "LearnsFromScreening", "ScreeningAwareTPESampler", "ScreeningAwareGPSampler"]


class LearnsFromScreening:
    """A mixin for an Optuna sampler: it samples from a view of the study in which a screened
    (pruned) trial is a failed one (tuner.search.as_sampler_sees_it)."""

    def infer_relative_search_space(self, study, trial):
        return super().infer_relative_search_space(StudyView(study, as_sampler_sees_it), trial)

    def sample_relative(self, study, trial, search_space):
        return super().sample_relative(StudyView(study, as_sampler_sees_it), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return super().sample_independent(StudyView(study, as_sampler_sees_it), trial, param_name,
                                          param_distribution)


class ScreeningAwareTPESampler(LearnsFromScreening, optuna.samplers.TPESampler):
    """Optuna's TPE, with screened configs among its infeasible ("above") trials."""


class ScreeningAwareGPSampler(LearnsFromScreening, optuna.samplers.GPSampler):
    """Optuna's GP sampler, with screened configs as infeasible observations."""


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid without the ``study.stop()`` it calls once every point has run: stop()
    only works inside ``study.optimize()``, and tuner's coordinator drives ask/tell itself
    (the grid's last tell raised RuntimeError). The study ends on its budget (or
    ``--max-trials``); past the grid's end Optuna samples its points again."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_sampler(spec: StudySpec, *, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with ``seed`` (default: the spec's; each coordinator of a
    study gets its own, tuner.search.coordinator_seed)."""
    name = spec.study.sampler
    seed = spec.study.seed if seed is None else seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "tpe":
            return ScreeningAwareTPESampler(seed=seed, n_startup_trials=_startup(spec))
        if name == "model" or (name == "auto" and model_knows(spec)):
            if not model_knows(spec):
                raise SpecError(f"study.sampler: `model` needs a [model] preset on a GPU helper knows over NCCL "
                                f"(got preset {spec.model.preset!r}, gpu {spec.cluster.gpu!r}, "
                                f"backend {spec.cluster.backend!r}); use `auto` or `tpe`")
            return ModelGuidedSampler(spec, seed=seed)
        if name in ("auto", "tpe-multivariate"):
            return ScreeningAwareTPESampler(seed=seed, multivariate=True, group=True,
                                            constant_liar=True, n_startup_trials=_startup(spec))
        if name == "gp":
            return ScreeningAwareGPSampler(seed=seed, n_startup_trials=_startup(spec))
        if name == "grid":
            grid = {k.name: list(k.values_for_grid()) for k in spec.space}
            return AskTellGridSampler(grid, seed=seed)
    raise ValueError(f"unknown sampler {name!r}")


def _startup(spec: StudySpec) -> int:
    """Random trials before TPE (and GP) model the space: ~one per knob, 5..10 (Optuna's default 10
    wastes a small budget; Bergstra et al. 2011 use a handful)."""
    return max(5, min(10, len(spec.space) + 2))


def grid_size(spec: StudySpec) -> int:
    return len(list(itertools.product(*(k.values_for_grid() for k in spec.space))))
