"""The search's estimate of each config it ran: the fitted value of the knobs' ANOVA surrogate.

A search runs hundreds of configs once each, and near its optimum many differ by less than one
run's noise (a few % for a short trial). Ranking them by their own run picks the luckiest
(the winner's curse: the largest of many noisy runs is mostly noise), so the config the study
re-measures and recommends was often a few % below the best it had run: on the 1B x 16 A100
sim, a 0.989 config whose one run read 18,618 tokens/s/GPU beat the optimum's group, whose
nine runs (NCCL and prefetch variants that change nothing there) averaged 17,744
(docs/benchmarks.md).

Here every config is ranked by the second-order ANOVA surrogate of tuner.stats (ridge on
one-hot main effects and pairwise joint levels of log tokens/s/GPU, penalty by leave-one-out
error) at that config: a shrinkage estimate (ridge is the posterior mean under a Gaussian prior
on the effects) that pools the runs sharing its main effects and pairs, so a knob with no
effect pools its levels, and a pair's corner (micro-batch 2 with no accumulation) keeps its own
level. Pure functions over TrialRecords.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from tuner.stats._failures import config_key
from tuner.stats._importance import _MIN_TRIALS, _encode, _fit_inputs, _Indices
from tuner.stats._record import TrialRecord

__all__ = ["smoothed_values"]


def smoothed_values(trials: Sequence[TrialRecord], knobs: Sequence[str], *,
                    ablation_runs: bool = False, values: Mapping[int, float] | None = None) -> dict[str, float]:
    """{config_key(params): tokens/s/GPU the surrogate fitted to every ok search run gives that
    config}, for each config with an ok search run; {} with fewer than tuner.stats's
    minimum of ok runs or no knob that varies (rank by the runs themselves then).
    ``ablation_runs``: the fit also takes the ablation's runs (re-measurements and one-knob
    reverts: fresh runs of their configs), and configs that only they ran get a value too.
    ``values``: a run's number as the analysis reads it where that is not its measured window
    (tuner.stats' ``moved_values``: a drifting run's plateau, a stalling run's steady steps).

    Example:
        >>> from tuner.stats import TrialRecord
        >>> runs = [TrialRecord(number=i, state="COMPLETE", status="ok", value=v, steps=(v,), params={"a": a, "b": b})
        ...         for i, (a, b, v) in enumerate([(1, 0, 100), (1, 1, 104), (2, 0, 120), (2, 1, 118),
        ...                                        (1, 0, 98), (2, 0, 121), (1, 1, 101), (2, 1, 119)])]
        >>> est = smoothed_values(runs, ["a", "b"])
        >>> max(est, key=est.get) in (config_key({"a": 2, "b": 0}), config_key({"a": 2, "b": 1}))
        True
    """
    ok, varying = _fit_inputs(trials, knobs, ablation_runs=ablation_runs)
    if len(ok) < _MIN_TRIALS or not varying:
        return {}
    x = _encode(ok, varying)
    y = np.log([(values or {}).get(t.number, t.value) for t in ok])
    with threadpool_limits(1):  # small matrices, as in tuner.stats
        fitted = _Indices(varying, 0, x).fit(x, y).predict(x)
    out: dict[str, list[float]] = {}
    for t, f in zip(ok, fitted):
        out.setdefault(config_key(t.params), []).append(float(f))
    return {key: float(np.exp(np.mean(v))) for key, v in out.items()}
