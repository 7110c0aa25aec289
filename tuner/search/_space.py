"""Knobs -> Optuna distributions, and the suggestion of a trial's knobs in their order.

A conditional knob (tuner.knobs: `prefetch_factor` only when `num_workers > 0`) is suggested
after its parent and only when active, so it is absent from the trial's params when not.

Example:
    >>> from tuner.spec import KnobSpace
    >>> dist = distribution(KnobSpace(name="micro_batch", choices=(1, 2, 4)))
    >>> dist.choices
    (1, 2, 4)
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from tuner import knobs
from tuner.spec import KnobSpace, StudySpec
from tuner.storage import params_in_one_transaction

__all__ = ["distribution", "suggest_params"]


def distribution(knob: KnobSpace) -> BaseDistribution:
    if knob.choices is not None:
        return CategoricalDistribution(knob.choices)
    if knob.is_int:
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log,
                               step=1 if knob.log else int(knob.step or 1))
    return FloatDistribution(float(knob.low), float(knob.high), log=knob.log,
                             step=None if knob.log or knob.step is None else float(knob.step))


def suggest_params(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    """Suggest every active knob on ``trial``, in spec order with each conditional knob after
    its parent (num_workers before prefetch_factor)."""
    params: dict[str, Any] = {}
    by_name = {k.name: k for k in spec.space}
    with params_in_one_transaction(trial):  # one write for all of them, not one per knob
        for knob in (by_name[n] for n in knobs.ordered(by_name)):
            if not knobs.is_active(knob.name, params):
                continue
            dist = distribution(knob)
            if isinstance(dist, CategoricalDistribution):
                params[knob.name] = trial.suggest_categorical(knob.name, dist.choices)
            elif isinstance(dist, IntDistribution):
                params[knob.name] = trial.suggest_int(knob.name, dist.low, dist.high, step=dist.step, log=dist.log)
            else:
                params[knob.name] = trial.suggest_float(knob.name, dist.low, dist.high, step=dist.step, log=dist.log)
    return params
