"""The runoff: the ablation's finalists measured again, until one run's noise no longer decides.

A search runs hundreds of configs once each, and near its optimum they differ by about one run's
noise: a full-length run varies by about 2% around its config's mean, a short adaptive search
run by 3-4% (tuner.sim's noise, as on real clusters). The search's surrogate
(tuner.stats) pools those runs, but it is a second-order model: where the cluster has a
higher-order interaction (micro-batch 8 with activation checkpointing and no DataLoader workers,
on one mismatched 13B cluster) it rated a config above each of its runs, 8.7% over its truth;
the ablation re-measured it twice, beside two candidates that were no better, and recommended
it at 0.963 of the optimum (docs/benchmarks.md).

So where the ablation share affords it, the ablation round re-measures more candidates
(tuner.study), and once those runs are in, the runoff re-measures the :data:`FINALISTS` best
of them again, up to :data:`MAX_ROUNDS` more runs each, on what the ablation share left (in the
order that rebuilds least: tuner.study's ``plan_runoff``). The recommendation is then the finalist with the highest
:func:`posterior` log throughput: its re-measurements' mean shrunk toward the surrogate's value,
weighted by how far the surrogate has been from the re-measurements of this study
(:func:`surrogate_spread`), so a surrogate that was wrong about the re-measured configs weighs
little, and one that was right keeps a run's luck from deciding.

Pure functions over TrialRecords and run-level CIs, and the one planning function the admission
calls (tuner.study's ``plan_runoff``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.stats._configs import config_estimate, run_variance
from tuner.stats._drift import run_cis
from tuner.stats._failures import attempts_by_config, config_failure, config_key, failure_model, level_failures

__all__ = ["FINALISTS", "MAX_ROUNDS", "MIN_SURROGATE_SD", "RUNOFF", "posterior", "surrogate_spread",
           "ranked_remeasured", "pick_finalists", "runoff_rounds", "round_estimates"]

FINALISTS = 2
"""The runoff measures again the FINALISTS best re-measured configs by :func:`ranked_remeasured`,
and the FINALISTS best by their re-measurements alone (:func:`pick_finalists`)."""
MAX_ROUNDS = 3
"""Runoff rounds at most: with the ablation's own run, four full-length runs per finalist put
a finalist's mean within about 1% (one run: about 2%), and the rest of the budget goes back to
the search."""
MIN_SURROGATE_SD = 0.03
"""Floor on the surrogate's log error at a re-measured config (:func:`surrogate_spread`): about
one full run's noise (2-2.2% on the sims). Four to seven re-measured configs, each read with
that noise, can agree with the surrogate by chance where it is wrong about the one it ranks
first (by 8.7% on one 13B cluster, 4.8% on one 7B cluster, where the others were 1.5-3% off):
at a 1% floor the runoff kept that favourite on 2 of 26 captured studies, at 3% on none
(docs/benchmarks.md)."""
RUNOFF = "runoff"
"""The ``remeasure`` user attr of a runoff run."""


def posterior(prior_log: float | None, prior_var: float, runs_log_mean: float, runs_log_var: float) -> float:
    """Precision-weighted log throughput of a config: its re-measurements' log mean
    (variance ``runs_log_var``: tuner.stats.config_estimate's, run-to-run variation included)
    and the surrogate's log value (variance ``prior_var``); the runs alone without a prior.

    Example:
        >>> round(posterior(0.0, 1.0, 1.0, 1.0), 3), posterior(None, 1.0, 1.0, 1.0)
        (0.5, 1.0)
    """
    if prior_log is None or prior_var <= 0:
        return runs_log_mean
    w_prior, w_runs = 1.0 / prior_var, 1.0 / max(runs_log_var, 1e-12)
    return (w_prior * prior_log + w_runs * runs_log_mean) / (w_prior + w_runs)


def surrogate_spread(pairs: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(offset, variance) of the surrogate's log error, from (surrogate log value, re-measured
    log mean, that mean's variance) of each re-measured config: the offset is the mean of
    (re-measured - surrogate) (the surrogate's top configs read high: they were picked for it),
    the variance is what the differences spread beyond the re-measurements' own noise, at
    least MIN_SURROGATE_SD squared. With fewer than 3 configs: no offset, the floor.

    Example:
        >>> off, var = surrogate_spread([(0.0, -0.05, 1e-4), (0.0, -0.01, 1e-4), (0.0, -0.09, 1e-4)])
        >>> round(off, 3), round(math.sqrt(var), 3)
        (-0.05, 0.039)
    """
    floor = MIN_SURROGATE_SD**2
    if len(pairs) < 3:
        return 0.0, floor
    diffs = [m - s for s, m, _ in pairs]
    offset = sum(diffs) / len(diffs)
    spread = sum((d - offset) ** 2 for d in diffs) / (len(diffs) - 1)
    noise = sum(v for _, _, v in pairs) / len(pairs)
    return offset, max(floor, spread - noise)


def ranked_remeasured(estimates: Mapping[str, dict[str, Any]], surrogate: Mapping[str, float]) -> list[tuple[str, float]]:
    """(config key, posterior log throughput) of each re-measured config, best first.

    ``estimates``: config key -> its re-measurements' tuner.stats.config_estimate;
    ``surrogate``: config key -> the search's smoothed tokens/s/GPU (tuner.stats), the prior.

    Example:
        >>> est = {"a": {"log_mean": 0.0, "log_var": 1e-4}, "b": {"log_mean": 0.02, "log_var": 1e-4}}
        >>> [k for k, _ in ranked_remeasured(est, {"a": 1.30, "b": 1.0})]
        ['a', 'b']
        >>> [k for k, _ in ranked_remeasured(est, {})]
        ['b', 'a']
    """
    # the configs are compared: an error every run of the study shares (tuner.stats.SHARED_SE)
    # moves them all alike and separates none
    var = {k: max(e["log_var"] - e.get("shared_sd", 0.0) ** 2, 1e-12) for k, e in estimates.items()}
    pairs = {k: (math.log(surrogate[k]), e["log_mean"], var[k]) for k, e in estimates.items()
             if surrogate.get(k, 0.0) > 0}
    offset, prior_var = surrogate_spread(list(pairs.values()))
    scores = {k: posterior(pairs[k][0] + offset if k in pairs else None, prior_var, e["log_mean"], var[k])
              for k, e in estimates.items()}
    return sorted(scores.items(), key=lambda kv: -kv[1])


def pick_finalists(estimates: Mapping[str, dict[str, Any]], surrogate: Mapping[str, float]) -> list[str]:
    """Config keys the runoff measures again: the FINALISTS best by :func:`ranked_remeasured`,
    then those of the FINALISTS best by their re-measurements alone not already in. After the
    ablation's runs a config has one or two, and the surrogate's error is estimated from a
    handful of configs, so the shrunk ranking can keep the surrogate's favourite however it
    re-measured (13B seed 5: a config the surrogate rated 8.7% above its truth, against
    configs within 0.2% of the optimum); where the two rankings disagree, the runoff's
    runs settle it.

    Example:
        >>> est = {k: {"log_mean": m, "log_var": 4e-3} for k, m in [("a", 0.0), ("b", 0.03), ("c", 0.02), ("d", 0.01)]}
        >>> pick_finalists(est, {"a": 1.05, "b": 1.04, "c": 1.03, "d": 1.02})
        ['a', 'b', 'c']
    """
    by_posterior = [k for k, _ in ranked_remeasured(estimates, surrogate)][:FINALISTS]
    by_runs = [k for k, _ in ranked_remeasured(estimates, {})][:FINALISTS]
    return by_posterior + [k for k in by_runs if k not in by_posterior]


def runoff_rounds(budget_gpu_seconds: float, full_run_gpu_seconds: float, finalists: int) -> int:
    """Rounds the budget affords (each finalist once a round), at most MAX_ROUNDS.

    Example:
        >>> runoff_rounds(10_000.0, 1_000.0, 3), runoff_rounds(2_000.0, 1_000.0, 3), runoff_rounds(1e6, 1e3, 3)
        (3, 0, 3)
    """
    if finalists <= 1 or full_run_gpu_seconds <= 0:
        return 0
    return max(0, min(MAX_ROUNDS, int(budget_gpu_seconds // (finalists * full_run_gpu_seconds))))


def round_estimates(trials, knobs: Sequence[str], round_: int, *, cis: Mapping[int, dict[str, Any]] | None = None
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(config key -> config_estimate of the round's re-measurements, config key -> params),
    flaky configs left out. The runs are read as the analysis reads them (drift or stall
    corrected where flagged: tuner.stats' ``run_cis``; ``cis``: those, where the caller has them)."""
    cis = run_cis(trials)[0] if cis is None else cis
    lv = run_variance(trials, cis)
    levels, model = level_failures(trials, knobs), failure_model(trials, knobs)
    attempts = attempts_by_config(trials)
    runs: dict[str, list[dict[str, Any]]] = {}
    params: dict[str, dict[str, Any]] = {}
    for t in trials:
        # every run of the round, reverts included: a revert that reads faster than the best
        # it reverts is a finalist like a candidate
        if t.role == "ablation" and (t.ablation_round or 1) == round_ and t.number in cis:
            runs.setdefault(config_key(t.params), []).append(cis[t.number])
            params[config_key(t.params)] = t.params
    # tau2 at its plain df here (not lv.tau2_df, which the reported intervals use): the finalists
    # are chosen as the search benchmark measured them (docs/benchmarks.md)
    estimates = {k: e for k, r in runs.items()
                 if (e := config_estimate(r, tau2=lv.tau2, tau_df=lv.df, se_scale=lv.se_scale)) is not None
                 and not config_failure(params[k], trials, levels, model, attempts=attempts)["flaky"]}
    return estimates, params
