"""Uncertainty at the level of configs: repeated runs pooled, run-to-run variation included.

Two launches of one config differ by more than their steps' noise (placement, clocks, the
state of the network), so a speedup between two configs needs that *run-to-run* variance
tau^2 too. It is estimated from every config the study ran more than once (the baseline and
the top configs are re-measured in interleaved relaunches after the search,
tuner.study), by the method of moments of a one-way random-effects model on log
throughput (DerSimonian & Laird 1986): the spread of one config's run means beyond what
their own CIs explain, pooled over configs.

A config's log throughput is the mean of its runs' log means; its variance
(tau^2 + se_i^2) / m for m runs, with Welch-Satterthwaite degrees of freedom. A speedup is a
ratio of two such estimates (t-interval on the log ratio). The winner's curse: the
recommended config is chosen on its re-measurements only, and its throughput and speedup
come from them, never from the search run that made it look best.

Ablation effects (best config vs. best with one knob set back to the baseline's) are tested
on the log ratio, one-sided (does setting the knob back cost throughput?), with Holm's
step-down correction over the knobs (Holm 1979) before any is called significant.

Example:
    >>> est = config_estimate([{"mean": 100.0, "se": 2.0, "df": 30.0}], tau2=0.0, tau_df=0)
    >>> round(est["mean"], 6), est["n_runs"]
    (100.0, 1)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.stats._failures import config_key
from tuner.stats._record import TrialRecord

__all__ = ["run_to_run_variance", "config_estimate", "ratio_estimate", "holm", "run_groups", "RunCIs", "CONFIDENCE",
           "LaunchVariance", "launch_variance", "run_variance", "TAU_PRIOR_SD", "TAU_PRIOR_DF", "SCALE_PRIOR_DF",
           "SHARED_SE"]

CONFIDENCE = 0.95
TAU_PRIOR_SD = 0.02
"""The stated prior on launch-to-launch variation: a relative sd of 2% between launches of one
config (node placement, clocks, the network's state): what tuner.sim draws and what the
project's re-measured configs showed (docs/statistics.md, section 2). It is worth
:data:`TAU_PRIOR_DF` degrees of freedom, so a study that re-measured nothing still gives a
config run once se^2 + (2%)^2, and a study with tens of re-measurements is ruled by them."""
SCALE_PRIOR_DF = 4
"""The step-noise model's per-run errors are taken as right (a scale of 1) with the weight of
four degrees of freedom, against the re-measurements' V / s2 with theirs: scale = (4 + df V/s2)
/ (4 + df). Unshrunk, a study whose few re-measurements agreed by chance (V / s2 with 4 df is
below 0.46 in a fifth of studies where the errors are right) narrowed every config's interval
with them: 80 of 200 `failures` studies scaled, and their speedups covered 0.90. With four
prior df the speedups cover 0.94-0.97 in every family of bench.stats_families, 200 studies each
(docs/benchmarks.md); stalls, where V / s2 is 0.1-0.2, are read on their steady steps instead
(tuner.stats' stall_corrected)."""

TAU_PRIOR_DF = 2
"""Two, not four: a study's round re-measures with ~9 degrees of freedom, and where launches
vary more than the prior says (4% against 2%) four prior df held the estimate at 3.4% and the
config intervals covered 0.89; with two, 0.91-0.94 on 120 studies, the other families within a
study of where they were (docs/benchmarks.md)."""

RunCIs = dict[int, dict[str, Any]]
"""trial number -> {"mean", "se", "df"} of an ok run (tuner.stats.trial_cis)."""


def run_to_run_variance(groups: Sequence[Sequence[dict[str, Any]]]) -> tuple[float, int]:
    """(tau^2 on the log scale, its degrees of freedom) from configs run more than once.

    Each group is one config's runs, each {"mean", "se"}. (0, 0) when no config repeated.
    """
    v_obs, s2, df = _pooled_spread(groups)
    if df == 0:
        return 0.0, 0
    return max(0.0, v_obs - s2), df


SHARED_SE = "shared_rel_se"
"""A run CI's key for the part of its relative se that every run of the study shares (the
pooled drift fit's error, the pooled stall overhead's: tuner.stats): it does not average
away over a config's runs, does not show in their spread, and cancels where two configs' runs
are compared."""


def _own_rel_var(run: dict[str, Any]) -> float:
    """A run's relative se^2 less the part it shares with the study's other runs (:data:`SHARED_SE`)."""
    return max(0.0, (run["se"] / run["mean"]) ** 2 - float(run.get(SHARED_SE) or 0.0) ** 2)


def _pooled_spread(groups: Sequence[Sequence[dict[str, Any]]]) -> tuple[float, float, int]:
    """(V, s2, df) over the configs run more than once: V the pooled variance of a config's
    log-scale run means about their mean, s2 the runs' mean squared relative error."""
    q, df, within = 0.0, 0, []
    for runs in groups:
        if len(runs) < 2:
            continue
        logs = [math.log(r["mean"]) for r in runs]
        m = sum(logs) / len(logs)
        q += sum((v - m) ** 2 for v in logs)
        df += len(runs) - 1
        within += [_own_rel_var(r) for r in runs]
    if df == 0:
        return 0.0, 0.0, 0
    return q / df, sum(within) / len(within), df


def config_estimate(runs: Sequence[dict[str, Any]], *, tau2: float, tau_df: int,
                    se_scale: float = 1.0, tau2_df: float | None = None) -> dict[str, Any] | None:
    """{"mean", "ci95", "log_mean", "log_var", "df", "n_runs"} of one config from its runs.

    A run's log variance is ``se_scale`` x its own relative se^2 (conditional on its launch) plus
    ``tau2``, the launch-to-launch variance (:func:`launch_variance`). ``tau2`` is known to
    ``tau2_df`` degrees of freedom in the Satterthwaite sum (:attr:`LaunchVariance.tau2_df`;
    default ``tau_df``, which also bounds a scaled se's). The part of the runs' se that every run
    of the study shares (:data:`SHARED_SE`) counts once, undivided by the runs,
    as a known variance (``shared_sd``: :func:`ratio_estimate` cancels it between two configs)."""
    from scipy import stats

    runs = [r for r in runs if r and r["mean"] > 0]
    if not runs:
        return None
    m = len(runs)
    logs = [math.log(r["mean"]) for r in runs]
    rel = [se_scale * _own_rel_var(r) for r in runs]
    shared_sd = sum(float(r.get(SHARED_SE) or 0.0) for r in runs) / m
    log_mean = sum(logs) / m
    # the variance's parts: each run's own se^2 (independent), and two estimates shared by
    # every config read with the same launch variance (the launch part, tau2; the scale on the
    # runs' se, fitted to the same re-measurements), whose errors move every part they enter
    # together: each counts once in the Satterthwaite sum with its own df, here and in a ratio
    # of two configs (:func:`ratio_estimate`). tau2's df is not floored at 1: a small excess
    # over large errors is known to less than one df as a variance of its own, and that brings
    # the sum's df down to V's (:attr:`LaunchVariance.tau2_df`)
    own = [(v / m**2, max(r["df"], 1.0)) for v, r in zip(rel, runs)]
    shared = {}
    if tau2 > 0 and tau_df > 0:
        shared["launch"] = (tau2 / m, max(tau_df, 1.0) if tau2_df is None else max(tau2_df, 1e-9), tau2)
    if se_scale != 1.0:   # a scaled se is known only as well as the scale: the re-measurements' df
        shared["scale"] = (sum(p for p, _ in own), max(tau_df, 1.0), se_scale)
    log_var = sum(p for p, _ in own) + (shared["launch"][0] if "launch" in shared else 0.0) + shared_sd**2
    own_term = sum(p**2 / d for p, d in own)
    df = log_var**2 / (own_term + sum(v**2 / d for v, d, _ in shared.values())) if log_var > 0 else math.inf
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(log_var)
    mean = math.exp(log_mean)
    return {"mean": mean, "ci95": [mean * math.exp(-half), mean * math.exp(half)], "log_mean": log_mean,
            "log_var": log_var, "df": df, "n_runs": m, "shared_sd": shared_sd,
            "parts": {"own_df_term": own_term, "shared": shared}}


def ratio_estimate(num: dict[str, Any] | None, den: dict[str, Any] | None) -> dict[str, Any] | None:
    """num / den with a t-interval on the log ratio (Welch-Satterthwaite df) and a two-sided
    p-value for "no difference".

    Two :func:`config_estimate` results read with the same launch variance share its estimate
    (and the scale on their runs' se): its sampling error moves both variances together, so
    each shared part counts once in the Satterthwaite sum, with its own df. Summed as
    independent, two equal parts would claim twice the df, and the interval be too short where
    launches dominate."""
    from scipy import stats

    if not num or not den:
        return None
    # the study-wide error (SHARED_SE) moves both configs' means: it cancels but for the
    # difference of their runs' shares of it
    var = max(0.0, num["log_var"] + den["log_var"] - 2 * num.get("shared_sd", 0.0) * den.get("shared_sd", 0.0))
    log_ratio = num["log_mean"] - den["log_mean"]
    ratio = math.exp(log_ratio)
    if var <= 0:
        return {"mean": ratio, "ci95": [ratio, ratio], "p_value": 0.0 if log_ratio else 1.0}
    a, b = num.get("parts"), den.get("parts")
    if a and b:   # shared estimates (the same one: same value and df) count once, summed
        term = a["own_df_term"] + b["own_df_term"]
        for name in {*a["shared"], *b["shared"]}:
            pa, pb = a["shared"].get(name), b["shared"].get(name)
            if pa and pb and pa[1:] == pb[1:]:
                term += (pa[0] + pb[0]) ** 2 / pa[1]
            else:
                term += sum(p[0] ** 2 / p[1] for p in (pa, pb) if p)
        df = var**2 / term
    else:
        df = var**2 / (num["log_var"] ** 2 / max(num["df"], 1.0) + den["log_var"] ** 2 / max(den["df"], 1.0))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(var)
    p = float(2 * stats.t.sf(abs(log_ratio) / math.sqrt(var), df))
    return {"mean": ratio, "ci95": [ratio * math.exp(-half), ratio * math.exp(half)], "p_value": p}


def holm(p_values: Sequence[float], alpha: float = 1 - CONFIDENCE) -> list[bool]:
    """Holm's step-down rejections at family-wise level ``alpha``.

    Example:
        >>> holm([0.01, 0.04, 0.03])
        [True, False, False]
    """
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        out[i] = True
    return out


@dataclass(frozen=True)
class LaunchVariance:
    """How far one config's runs scatter beyond their steps' noise, from re-measurements and a
    stated prior (:func:`launch_variance`)."""

    tau2: float
    """Launch-to-launch variance of a run's log mean (the posterior's)."""
    df: float
    """Its degrees of freedom: the re-measurements' plus the prior's."""
    se_scale: float
    """Factor on each run's own se^2: 1, or below 1 where the runs of one config agree better
    than their per-run errors say (the step-noise model overstates them: stalls)."""
    tau2_df: float
    """The degrees of freedom ``tau2`` is known to as a variance (Satterthwaite): 2 tau2^2 over
    its sampling variance. Where the runs' spread exceeds their errors, tau2 = V - s2 carries
    all of V's sampling variance, 2 V^2 / df, and a small excess over large errors is known to
    far fewer than ``df``; elsewhere ``df``. What a config's interval uses for tau2's part."""
    raw_tau2: float
    """DerSimonian-Laird's moment estimate alone (truncated at 0), and its df below."""
    raw_df: int
    spread_ratio: float | None
    """The re-measurements' observed variance of a run's log mean over what the per-run errors
    alone explain (1: the per-run CIs describe a config; None: nothing re-measured)."""

    def as_tuple(self) -> tuple[float, float]:
        return self.tau2, self.df


def launch_variance(groups: Sequence[Sequence[dict[str, Any]]], *, prior_sd: float = TAU_PRIOR_SD,
                    prior_df: float = TAU_PRIOR_DF) -> LaunchVariance:
    """The variance of one run's log mean about its config's, as se^2 x se_scale + tau2.

    From the configs run more than once: V = the pooled within-config variance of their runs'
    log means (q / df), and s2 = the mean of their runs' own relative se^2. A stated prior
    on tau2 (``prior_sd``^2, worth ``prior_df`` degrees of freedom) is combined with the runs'
    excess V - s2 by degrees of freedom, tau2 = (prior_df prior_sd^2 + df max(V - s2, 0)) /
    (prior_df + df) (the DerSimonian-Laird moment, shrunk toward the prior as a conjugate scaled
    inverse chi-square would). Where V falls short of s2 the per-run errors are too wide for
    what the runs show (the step-noise model does not fit: stalls), and they are scaled by
    se_scale = V / s2 shrunk toward 1 (:data:`SCALE_PRIOR_DF`). Groups: each config's
    runs, each {"mean", "se"}.

    Example:
        >>> lv = launch_variance([])
        >>> round(lv.tau2 ** 0.5, 3), lv.df, lv.se_scale
        (0.02, 2, 1.0)
    """
    v_obs, s2, df = _pooled_spread(groups)
    if df == 0:
        return LaunchVariance(tau2=prior_sd**2, df=prior_df, tau2_df=prior_df, se_scale=1.0, raw_tau2=0.0,
                              raw_df=0, spread_ratio=None)
    raw_tau2, raw_df = max(0.0, v_obs - s2), df
    # the prior is on tau2 alone; the runs' own errors are scaled only by what the runs show
    excess = v_obs - s2
    ratio = 1.0 if excess >= 0 or s2 <= 0 else v_obs / s2
    scale = (SCALE_PRIOR_DF + df * ratio) / (SCALE_PRIOR_DF + df)   # shrunk toward the noise model's 1
    w_prior, w_runs = prior_df / (prior_df + df), df / (prior_df + df)
    tau2 = w_prior * prior_sd**2 + w_runs * max(excess, 0.0)
    tau2_df = float(prior_df + df)
    if excess > 0:
        # Satterthwaite on tau2 = w_prior prior + w_runs (V - s2): the prior's scaled chi-square
        # with prior_df, V's with df (s2, an average over many runs' errors, as known)
        var = w_prior**2 * 2 * prior_sd**4 / prior_df + w_runs**2 * 2 * v_obs**2 / df
        tau2_df = min(tau2_df, 2 * tau2**2 / var)
    return LaunchVariance(tau2=tau2, df=prior_df + df, tau2_df=tau2_df, se_scale=scale, raw_tau2=raw_tau2,
                          raw_df=raw_df, spread_ratio=v_obs / s2 if s2 > 0 else None)


def _replication_groups(trials: Sequence[TrialRecord], cis: RunCIs) -> list[list[dict[str, Any]]]:
    """Each config's runs that re-measure it: one-knob reverts are left out, and so is the search
    run of a config that was re-measured (the search's best runs were chosen for reading high;
    their spread about the re-measurements is selection, not launch-to-launch variation)."""
    groups: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in trials:
        if t.number in cis and (t.role != "ablation" or t.ablation_knob is None):
            groups[config_key(t.params)].append(t)
    out = []
    for runs in groups.values():
        remeasured = any(t.role == "ablation" for t in runs)
        out.append([cis[t.number] for t in runs if not remeasured or t.role is not None])
    return out


def run_variance(trials: Sequence[TrialRecord], cis: RunCIs) -> LaunchVariance:
    """The study's :class:`LaunchVariance` from every config run more than once."""
    return launch_variance(_replication_groups(trials, cis))


def run_groups(trials: Sequence[TrialRecord], cis: RunCIs) -> tuple[float, float]:
    """tau^2 (run-to-run, log scale) and its df: :func:`run_variance`'s."""
    return run_variance(trials, cis).as_tuple()
