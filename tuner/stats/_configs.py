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
on the log ratio, with Holm's step-down correction over the knobs (Holm 1979) before any is
called significant.

Example:
    >>> est = config_estimate([{"mean": 100.0, "se": 2.0, "df": 30.0}], tau2=0.0, tau_df=0)
    >>> round(est["mean"], 6), est["n_runs"]
    (100.0, 1)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tuner.stats._failures import config_key
from tuner.stats._record import TrialRecord

__all__ = ["run_to_run_variance", "config_estimate", "ratio_estimate", "holm", "run_groups", "RunCIs", "CONFIDENCE"]

CONFIDENCE = 0.95

RunCIs = dict[int, dict[str, Any]]
"""trial number -> {"mean", "se", "df"} of an ok run (tuner.stats.trial_cis)."""


def run_to_run_variance(groups: Sequence[Sequence[dict[str, Any]]]) -> tuple[float, int]:
    """(tau^2 on the log scale, its degrees of freedom) from configs run more than once.

    Each group is one config's runs, each {"mean", "se"}. (0, 0) when no config repeated.
    """
    q = 0.0
    df = 0
    within = []
    for runs in groups:
        if len(runs) < 2:
            continue
        logs = [math.log(r["mean"]) for r in runs]
        m = sum(logs) / len(logs)
        q += sum((v - m) ** 2 for v in logs)
        df += len(runs) - 1
        within += [(r["se"] / r["mean"]) ** 2 for r in runs]
    if df == 0:
        return 0.0, 0
    return max(0.0, q / df - sum(within) / len(within)), df


def config_estimate(runs: Sequence[dict[str, Any]], *, tau2: float, tau_df: int) -> dict[str, Any] | None:
    """{"mean", "ci95", "log_mean", "log_var", "df", "n_runs"} of one config from its runs."""
    from scipy import stats

    runs = [r for r in runs if r and r["mean"] > 0]
    if not runs:
        return None
    m = len(runs)
    logs = [math.log(r["mean"]) for r in runs]
    rel = [(r["se"] / r["mean"]) ** 2 for r in runs]
    log_mean = sum(logs) / m
    parts = [(tau2 / m, tau_df)] if tau2 > 0 and tau_df > 0 else []
    parts += [(v / m**2, r["df"]) for v, r in zip(rel, runs)]
    log_var = sum(p for p, _ in parts)
    df = log_var**2 / sum(p**2 / max(d, 1.0) for p, d in parts) if log_var > 0 else math.inf
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(log_var)
    mean = math.exp(log_mean)
    return {"mean": mean, "ci95": [mean * math.exp(-half), mean * math.exp(half)], "log_mean": log_mean,
            "log_var": log_var, "df": df, "n_runs": m}


def ratio_estimate(num: dict[str, Any] | None, den: dict[str, Any] | None) -> dict[str, Any] | None:
    """num / den with a t-interval on the log ratio (Welch-Satterthwaite df) and a two-sided
    p-value for "no difference"."""
    from scipy import stats

    if not num or not den:
        return None
    var = num["log_var"] + den["log_var"]
    log_ratio = num["log_mean"] - den["log_mean"]
    ratio = math.exp(log_ratio)
    if var <= 0:
        return {"mean": ratio, "ci95": [ratio, ratio], "p_value": 0.0 if log_ratio else 1.0}
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


def run_groups(trials: Sequence[TrialRecord], cis: RunCIs) -> tuple[float, int]:
    """tau^2 (run-to-run, log scale) and its df from every config run more than once."""
    groups = defaultdict(list)
    for t in trials:
        if t.number in cis and (t.role != "ablation" or t.ablation_knob is None):
            groups[config_key(t.params)].append(cis[t.number])
    return run_to_run_variance(list(groups.values()))
