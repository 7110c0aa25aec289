"""Statistics of a finished study: pure functions, plain data in, numbers out.

What each number is and how it is made (docs/statistics.md has the details, references and
the coverage measured on studies with known truth):

- **A trial's throughput** is tokens over time (sum of tokens / sum of seconds of its
  measured steps), with a CI from a noise model pooled over the study's trials
  (tuner.stats: REML AR(1), moderated variance, MSER warm-up truncation), its effective
  sample size and any warm-up it dropped.
- **A config's throughput** pools its runs; its CI includes run-to-run variation, estimated
  from the configs the study ran more than once (tuner.stats).
- **The recommendation** is chosen on re-measurements (the winner's curse) among configs that
  do not fail often (tuner.stats); a faster but flaky config is shown beside it
  (tuner.stats). Its speedup over the baseline config has a CI with run-to-run variation.
- **Importance**: total- and first-order indices on a second-order surrogate over ok trials,
  conditional knobs within their parent's branch, against a placebo knob; BCa bootstrap
  (tuner.stats). The ``fanova`` key of analysis.json holds the total-order index.
- **Ablation**: each knob's re-measured worth, Holm-corrected (tuner.stats).
- **Marginal effects** per knob level are *survivor means*: means over the trials that
  finished ok. A level whose fast configs ran out of memory looks slower than it is; the
  failure rate beside each level (exact binomial CI) says how much that matters.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from tuner.budget import charged_gpu_seconds
from tuner.measurement import batch_means_ci
from tuner.stats._budget_use import budget_use, budget_use_line
from tuner.stats._configs import TAU_PRIOR_DF, TAU_PRIOR_SD, run_variance
from tuner.stats._diagnostics import noise_diagnostics
from tuner.stats._drift import run_cis
from tuner.stats._failures import FAILURE_STATUSES, level_failures
from tuner.stats._importance import N_BOOT, knob_importance
from tuner.stats._recommend import (
    UNDECIDED_EFFECT,
    ablation_effects,
    recommend,
    undecided_knobs,
    what_matters,
    what_matters_power,
)
from tuner.stats._record import StudyRecord, TrialRecord, study_record
from tuner.stats._trial_ci import trial_cis

__all__ = [
    "mean_ci", "ratio_ci", "importance_list", "marginal_effects", "trial_cis",
    "analyze_record", "analyze_study", "format_summary", "startup_share", "NA_LEVEL",
]

NA_LEVEL = "n/a"
CONFIDENCE = 0.95


# ------------------------------------------------------------------------ per-trial CI

def mean_ci(values: Sequence[float]) -> dict[str, Any] | None:
    """{"mean", "ci95": [lo, hi], "se", "df"} of one step series alone (batch means, the
    interval adaptive measurement stops on); None if < 4 steps. analyze_record uses the
    pooled tuner.stats instead."""
    ci = batch_means_ci(values)
    if ci is None:
        return None
    return {"mean": ci.mean, "ci95": [ci.low, ci.high], "se": ci.se, "df": ci.df}


def ratio_ci(num: dict[str, Any] | None, den: dict[str, Any] | None) -> dict[str, Any] | None:
    """CI of num.mean / den.mean: delta method on the log ratio, Welch-Satterthwaite df
    (two single runs; no run-to-run variation: tuner.stats has the config-level one)."""
    if not num or not den or num["mean"] <= 0 or den["mean"] <= 0:
        return None
    r_num, r_den = num["se"] / num["mean"], den["se"] / den["mean"]
    var = r_num**2 + r_den**2
    ratio = num["mean"] / den["mean"]
    if var == 0:
        return {"mean": ratio, "ci95": [ratio, ratio]}
    df = var**2 / (r_num**4 / num["df"] + r_den**4 / den["df"])
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(var)
    return {"mean": ratio, "ci95": [ratio * math.exp(-half), ratio * math.exp(half)]}


def _public(ci: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if ci is None else {"mean": ci["mean"], "ci95": ci["ci95"]}


def _level(value: Any) -> str:
    return NA_LEVEL if value is None else json.dumps(value)


# --------------------------------------------------------------------------- importance

def importance_list(trials: Sequence[TrialRecord], knobs: Sequence[str], *, n_boot: int = N_BOOT,
                    seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(analysis.json's ``importance`` list, the model's summary); see tuner.stats."""
    res = knob_importance(trials, knobs, n_boot=n_boot, seed=seed)
    rows = [{"knob": d["knob"], "fanova": d["total"], "ci95": d["total_ci95"], **d} for d in res["knobs"]]
    meta = {k: v for k, v in res.items() if k != "knobs"}
    return rows, meta


# ----------------------------------------------------------------- marginal effects

def marginal_effects(trials: Sequence[TrialRecord], knobs: Sequence[str],
                     failure_rates: dict[str, dict[str, dict[str, Any]]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per knob, per level: the survivor mean (ok trials only) with a t-interval across
    trials, failures, and the level's failure rate with an exact binomial CI."""
    finished = [t for t in trials if t.state == "COMPLETE" and t.role != "ablation"]
    out: dict[str, list[dict[str, Any]]] = {}
    for k in knobs:
        rows = []
        for level in sorted({_level(t.params.get(k)) for t in finished}):
            at = [t for t in finished if _level(t.params.get(k)) == level]
            values = [t.value for t in at if t.status == "ok"]
            failures = defaultdict(int)   # failures of the config only: pruned/skipped/... are not
            for t in at:
                if t.status in FAILURE_STATUSES:
                    failures[t.status] += 1
            ci = None
            if len(values) >= 2:
                m, sd = float(np.mean(values)), float(np.std(values, ddof=1))
                half = float(stats.t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))
                ci = [m - half, m + half]
            rows.append({"level": level, "n_trials": len(at), "n_ok": len(values),
                         "mean": float(np.mean(values)) if values else None, "ci95": ci,
                         "kind": "survivor_mean",
                         "failures": dict(failures),
                         "failure_rate": ((failure_rates or {}).get(k) or {}).get(level),
                         "summary": f"{k}={level}: {sum(failures.values())} of {len(at)} failed"
                                    + (f" ({', '.join(f'{v} {s}' for s, v in failures.items())})" if failures else "")})
        out[k] = rows
    return out


# ------------------------------------------------------------------ start-up share

def startup_share(trials: Sequence[TrialRecord]) -> float | None:
    """Share of the trials' GPU time spent before their first step (launch, model build,
    communicator set-up), over the trials that report it; None when none does.

    Example:
        >>> t = TrialRecord(number=0, state="COMPLETE", status="ok", params={}, steps=(), value=1.0,
        ...                 gpu_seconds=100.0, startup_gpu_seconds=25.0)
        >>> startup_share([t])
        0.25
    """
    pairs = [(t.startup_gpu_seconds, t.gpu_seconds) for t in trials
             if t.startup_gpu_seconds is not None and t.gpu_seconds]
    total = sum(g for _, g in pairs)
    return min(1.0, sum(s for s, _ in pairs) / total) if total > 0 else None


# ------------------------------------------------------------------------- the whole

def analyze_record(record: StudyRecord, *, n_boot: int = N_BOOT, seed: int = 0,
                   hold_out: bool = True) -> dict[str, Any]:
    """analysis.json (INTERFACES.md schema, extended) of a study record. ``hold_out``: the
    recommendation's choice holds each config's later re-measurements out to report its
    numbers (tuner.stats' ``recommend``; False only to compare rules: bench/choice_replay.py)."""
    trials = record.trials
    spec = record.attrs.get("spec", {})
    knobs = list(spec.get("space", {})) or sorted({k for t in trials for k in t.params})
    # queued runs the spent budget never started (status `skipped`) are not trials that ran
    finished = [t for t in trials if t.state in ("COMPLETE", "FAIL", "PRUNED") and t.status not in ("skipped", "repeat")]
    ok = [t for t in trials if t.status == "ok"]

    # each run's plateau where the steps drift, its steady steps where it stalls (tuner.stats)
    cis, noise, drift_model, stall_model = run_cis(trials)
    launch = run_variance(trials, cis)
    tau2, tau_df = launch.as_tuple()
    levels = level_failures(trials, knobs)
    baseline_t = next((t for t in ok if t.role == "baseline"), None)
    best = recommend(trials, cis, tau2=tau2, tau_df=tau_df, levels=levels, baseline=baseline_t,
                     se_scale=launch.se_scale, tau2_df=launch.tau2_df, hold_out=hold_out)
    baseline = None
    if baseline_t is not None:
        estimate = (best or {}).get("baseline_estimate") or _public(cis.get(baseline_t.number))
        baseline = {"trial": baseline_t.number, "params": baseline_t.params, "tokens_per_sec_per_gpu": estimate}
    ablation = ablation_effects(trials, cis, tau2=tau2, tau_df=tau_df,
                                baseline_params=baseline_t.params if baseline_t else None, se_scale=launch.se_scale,
                                tau2_df=launch.tau2_df)
    importance, importance_model = importance_list(ok, knobs, n_boot=n_boot, seed=seed)
    used = sum(charged_gpu_seconds(t.state, t.gpu_seconds, t.reserved_gpu_seconds) for t in trials)
    return {
        "study": record.name, "simulated": record.simulated,
        "n_trials": len(finished), "n_ok": len(ok),
        "n_failed": {s: sum(t.status == s for t in finished) for s in ("oom", "timeout", "error", "fail")},
        "n_skipped": sum(t.status == "skipped" for t in trials),
        "n_pruned": sum(t.status == "pruned" for t in trials),
        "n_stopped_by_budget": sum(t.status == "stopped_by_budget" for t in trials),
        "n_repeats_not_run": sum(t.status == "repeat" for t in trials),
        "budget": {"limit_gpu_hours": record.limit_gpu_seconds / 3600, "used_gpu_hours": used / 3600,
                   "startup_share": startup_share(finished)},
        "budget_use": budget_use(trials, probes=record.attrs.get("boundary_probes") or []),
        "baseline": baseline, "best": best, "importance": importance, "importance_model": importance_model,
        # the ranking's first three; whether each beats the placebo is `importance[i].matters`,
        # and RECIPE's "What matters" lists only those that do (`what_matters`)
        "top_knobs": [d["knob"] for d in importance if d["total"] is not None][:3],
        "what_matters": what_matters(importance, ablation),
        "what_matters_note": what_matters_power(importance, ablation, importance_model),
        "undecided": undecided_knobs(importance, ablation),
        "noise_diagnostics": noise_diagnostics(trials, cis, noise, launch, drift_model, stall_model),
        "failure_rates": levels,
        "marginal_effects": marginal_effects(trials, knobs, levels), "ablation": ablation,
        "noise_model": None if noise is None else {
            "phi": noise.phi, "rel_sd": math.sqrt(noise.rel_var),
            "df_prior": noise.df_prior if math.isfinite(noise.df_prior) else None,
            "n_trials": noise.n_trials, "run_to_run_rel_sd": math.sqrt(tau2), "run_to_run_df": tau_df,
            "run_to_run_prior": {"rel_sd": TAU_PRIOR_SD, "df": TAU_PRIOR_DF},
            "run_to_run_measured_df": launch.raw_df,
            "run_to_run_tau2_df": launch.tau2_df, "run_se_scale": launch.se_scale,
            "replication_spread_ratio": launch.spread_ratio},
        "trials": [{"trial": t.number, "params": t.params, "status": t.status, "role": t.role,
                    "ablation_knob": t.ablation_knob, "gpu_seconds": t.gpu_seconds,
                    "startup_share": startup_share([t]),
                    "message": t.message or None,
                    "predicted_tokens_per_sec_per_gpu": t.predicted_tokens_per_sec_per_gpu,
                    # about its launch: a run read on its steady steps keeps its own stalls here
                    "tokens_per_sec_per_gpu": _public((cis.get(t.number) or {}).get("launch") or cis.get(t.number))
                    if t.status == "ok" else None,
                    "n_eff": (cis.get(t.number) or {}).get("n_eff"),
                    "warmup_steps_dropped": (cis.get(t.number) or {}).get("warmup_steps_dropped")}
                   for t in finished],
        "spec": spec,
        "method": {"trial_ci": "conditional on the trial's launch: tokens over time (ratio of sums), t-interval with a "
                               "REML AR(1) noise model pooled over the study's trials, MSER warm-up truncation; it "
                               "leaves out launch-to-launch variation, so it is not a CI of the config",
                   "estimand": "the long-run rate of a full job: the measured steps' tokens over time, or, where the "
                               "drift check flags a rate that falls or rises inside runs, each run's plateau under a "
                               "pooled exponential fit, its CI widened by the settling times the steps cannot tell "
                               "apart (noise_diagnostics.drift.correction); where the stalls check flags steps far "
                               "slower than the rest and they cost every config alike, configs are compared on each "
                               "run's steady steps over the study's pooled stall overhead, which keeps the stalls in "
                               "the long-run rate (noise_diagnostics.stalls.correction; per-trial numbers keep their "
                               "launch's own stalls)",
                   "config_ci": "config-level: a run's log variance is its own se^2 (x run_se_scale) plus the "
                                "launch-to-launch tau^2, from re-measured configs combined with a stated prior "
                                f"({TAU_PRIOR_SD:.0%} sd worth {TAU_PRIOR_DF} df); t-interval on the log mean of the "
                                "config's runs",
                   "speedup_ci": "t-interval on the log ratio of config means, launch-to-launch variation included "
                                 + (f"(from {launch.raw_df} df of re-measurements and the prior)" if launch.raw_df
                                    else "(from the stated prior alone: no config was re-measured)"),
                   "importance": importance_model.get("method", "too few ok trials"),
                   "winners_curse": "best chosen on the search and the first half of each config's re-measurements; "
                                    "its throughput and speedup from the later half (confirmation runs that did not "
                                    "choose it) when it has them (winners_curse_adjusted)",
                   "failures": "oom/timeout/error per run; exact binomial CIs; configs failing >= 25% are not "
                               "recommended",
                   "marginal_effects": "survivor means (ok trials only)"},
    }


def analyze_study(study, *, n_boot: int = N_BOOT, seed: int = 0, trials=None, hold_out: bool = True) -> dict[str, Any]:
    """analysis.json of an Optuna study (see analyze_record); ``trials``: its frozen trials
    where the caller has read them (tuner.report's cache key reads the same ones)."""
    return analyze_record(study_record(study, trials), n_boot=n_boot, seed=seed, hold_out=hold_out)


def _fmt_ci(d: dict[str, Any] | None, scale: float = 1.0, fmt: str = ",.0f") -> str:
    if not d:
        return "-"
    lo, hi = d["ci95"]
    return f"{d['mean'] * scale:{fmt}} [{lo * scale:{fmt}}, {hi * scale:{fmt}}]"


def format_summary(analysis: dict[str, Any]) -> str:
    """The short table `tuner analyze` prints."""
    lines = [f"study {analysis['study']}{' [SIMULATED]' if analysis.get('simulated') else ''}: "
             f"{analysis['n_ok']} ok of {analysis['n_trials']} trials, "
             f"{analysis['budget']['used_gpu_hours']:.3f} of {analysis['budget']['limit_gpu_hours']:.3f} GPU-h"]
    if analysis["budget"].get("startup_share") is not None:
        lines.append(f"start-up (launch, model build, communicators) took {analysis['budget']['startup_share']:.0%} "
                     "of trial GPU time; the rest ran warm-up and measured steps")
    if analysis.get("budget_use"):
        lines.append(analysis["budget_use"].get("summary") or budget_use_line(analysis["budget_use"]))
    if analysis["baseline"]:
        base = analysis["baseline"]
        lines.append(f"baseline (trial {base['trial']}): {_fmt_ci(base['tokens_per_sec_per_gpu'])} tokens/s/GPU")
    best = analysis["best"]
    if best:
        if analysis["baseline"] and best["trial"] == analysis["baseline"]["trial"]:
            note = "; the baseline itself"
        else:
            note = ("; read from confirmation runs, not the runs that chose it" if best["winners_curse_adjusted"]
                    else "; from its one re-measurement, the run that chose it: may read high"
                    if best.get("remeasure_trials") else "; one search run, never re-measured")
        lines.append(f"recommended (trial {best['trial']}): {_fmt_ci(best['tokens_per_sec_per_gpu'])} tokens/s/GPU"
                     f"{note}")
        if best["speedup_vs_baseline"]:
            nm = analysis.get("noise_model") or {}
            basis = ("launch-to-launch variation from re-measurements" if nm.get("run_to_run_measured_df")
                     else "launch-to-launch variation from a stated prior only: no config was re-measured")
            lines.append(f"speedup vs baseline ({basis}): "
                         f"{_fmt_ci(best['speedup_vs_baseline'], fmt='.2f')}x")
        fail = best["failure"]["own"]
        if fail["runs"]:
            lines.append(f"  failed {fail['failures']} of its {fail['runs']} runs")
        flaky = best.get("faster_but_flaky")
        if flaky:
            f = flaky["failure"]
            lines.append(f"faster but flaky (not recommended): trial {flaky['trial']}, "
                         f"{_fmt_ci(flaky['tokens_per_sec_per_gpu'])} tokens/s/GPU, estimated failure rate "
                         f"{f['estimate']:.0%}" + (f" ({f['worst_level']['knob']}={f['worst_level']['level']} failed "
                                                  f"{f['worst_level']['failures']} of {f['worst_level']['runs']})"
                                                  if f.get("worst_level") else ""))
        unverified = best.get("faster_not_remeasured")
        if unverified:
            lines.append(f"faster once but not re-measured (not recommended: one search run, the winner's curse): "
                         f"trial {unverified['trial']}, {_fmt_ci(unverified['tokens_per_sec_per_gpu'])} tokens/s/GPU, "
                         f"{_fmt_ci(unverified['vs_recommended_in_search'], fmt='.2f')}x the recommendation's search run")
    for key, d in (analysis.get("noise_diagnostics") or {}).items():
        if d.get("flagged"):
            lines.append(f"NOISE MODEL MISFIT ({key.replace('_', ' ')}): {d['meaning']}")
    model = analysis.get("importance_model") or {}
    r2 = model.get("oob_r2")
    lines.append("knob importance (total-order index, 95% BCa CI; first-order; beats the placebo?)"
                 + (f", surrogate leave-one-out R^2 {r2:.2f}" if r2 is not None else "") + ":")
    for d in analysis["importance"]:
        ci = d["ci95"]
        if d["fanova"] is None:
            lines.append(f"  {d['knob']:<26} -")
            continue
        lines.append(f"  {d['knob']:<26} {d['fanova']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
                     + f"  first-order {d['first_order']:.3f}  {'matters' if d['matters'] else 'not above placebo'}")
    if model.get("placebo"):
        p = model["placebo"]
        lines.append(f"  {p['knob']:<26} {p['total']:.3f}  (a random {p['levels']}-level knob: the null reference)")
    if analysis.get("what_matters"):
        lines.append("what matters (both channels: ablation at the recommended config / search importance):")
        for r in analysis["what_matters"]:
            a, i = r.get("ablation"), r.get("importance")
            lines.append(f"  {r['knob']:<26} ablation "
                         + (f"{a['impact']:+.1%}{' significant' if a['significant'] else ''}" if a else "not ablated")
                         + " / importance " + (f"{i['total']:.3f}{' above placebo' if i['matters'] else ' not above placebo'}"
                                               if i else "-")
                         + (f" / both together: maximum p {r['combined']['p_value']:.2g} (Holm)"
                            if r["source"] == "both" else ""))
    elif analysis.get("what_matters_note"):
        lines.append(analysis["what_matters_note"])
    if analysis.get("undecided"):
        lines.append(f"undecided (neither channel lists them; the ablation's CI still admits a {UNDECIDED_EFFECT:.0%} "
                     "effect or more: too few runs to tell): " + "; ".join(
                         f"{d['knob']} {d['impact']:+.1%} [{d['ci95'][0]:+.1%}, {d['ci95'][1]:+.1%}]"
                         for d in analysis["undecided"]))
    if analysis.get("ablation"):
        lines.append("ablation (re-measured best vs that knob at the baseline's value, or moved where the best has "
                     "the baseline's; Holm-corrected, one-sided: significant when the revert reads slower):")
        for e in analysis["ablation"]["knobs"]:
            moved = f" vs {e['tested_value']} (moved)" if e.get("move") else ""
            runs = len(e.get("trials") or ())   # a revert measured again (tuner.stats' revert_replicates)
            lines.append(f"  {e['knob']}={e['best_value']}{moved}: {e['impact']:+.1%} [{e['ci95'][0]:+.1%}, "
                         f"{e['ci95'][1]:+.1%}]" + (f" ({runs} runs)" if runs > 1 else "")
                         + ("  significant" if e["significant"] else ""))
        for f in analysis["ablation"]["failed"]:
            lines.append(f"  {'re-measurement' if f['remeasure'] else f['knob']}: trial {f['trial']} {f['status']}")
        for f in analysis["ablation"].get("not_measured") or ():
            lines.append(f"  {f['knob']}: not measured (its revert, trial {f['trial']}, {f['status'].replace('_', ' ')}): "
                         "its effect at the recommended config is unknown")
    return "\n".join(lines)
