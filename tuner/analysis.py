"""Statistics of a finished study: pure functions, plain data in, numbers out.

How each number is made (and why):

- **Per-trial CI of tokens/s/GPU.** Step values are autocorrelated (data-loader hiccups,
  communication contention), so an i.i.d. interval is too narrow (about 70% coverage for
  AR(1) with phi = 0.5, tests/test_analysis.py). We use non-overlapping batch means with a
  t-quantile (Law & Kelton, *Simulation Modeling and Analysis*, 5th ed., sec. 9.5.3): about
  sqrt(n) batches of sqrt(n) steps, the interval of tuner.measurement that adaptive
  measurement stops on; batch means of consecutive steps are close to independent.
  bench/ci_coverage.py measures its coverage (docs/benchmarks.md).
- **Speedup vs baseline.** Ratio of the two means; its CI by the delta method on the log
  ratio with each mean's batch-means standard error, Welch-Satterthwaite degrees of freedom.
- **Winner's curse.** The largest of many noisy means is biased upward. When the study ran
  its ablation, the best config was measured again after the search, and that independent
  re-measurement (not the search trial that won) gives the best's throughput and speedup.
- **Importance.** fANOVA (Hutter et al., ICML 2014; `optuna.importance.
  FanovaImportanceEvaluator`, not Optuna 5's PedANOVA default) over `ok` trials only, with a
  CI per knob from a bootstrap over trials. fANOVA silently drops a parameter missing from
  any trial, so every knob is rebuilt as a categorical over its observed levels plus
  `n/a` where it does not apply (`prefetch_factor` when `num_workers = 0`): a conditional
  knob is then judged on what it does where it exists, and its absence is a level.
- **Marginal effects** per knob level: mean over ok trials with a t-interval across trials,
  and failures per level.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from tuner.budget import charged_gpu_seconds
from tuner.measurement import batch_means_ci
from tuner.record import StudyRecord, TrialRecord, study_record

__all__ = [
    "mean_ci", "ratio_ci", "fanova_importance", "marginal_effects", "ablation_effects",
    "analyze_record", "analyze_study", "write_analysis", "format_summary", "startup_share", "NA_LEVEL",
]

NA_LEVEL = "n/a"
CONFIDENCE = 0.95


# ------------------------------------------------------------------------ per-trial CI

def mean_ci(values: Sequence[float]) -> dict[str, Any] | None:
    """{"mean", "ci95": [lo, hi], "se", "df"} of a step series; None if < 4 steps.

    The batch-means interval of tuner.measurement, the same one adaptive measurement stops on.
    """
    ci = batch_means_ci(values)
    if ci is None:
        return None
    return {"mean": ci.mean, "ci95": [ci.low, ci.high], "se": ci.se, "df": ci.df}


def ratio_ci(num: dict[str, Any] | None, den: dict[str, Any] | None) -> dict[str, Any] | None:
    """CI of num.mean / den.mean: delta method on the log ratio, Welch-Satterthwaite df."""
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


# --------------------------------------------------------------------------- importance

def _level(value: Any) -> str:
    return NA_LEVEL if value is None else json.dumps(value)


def fanova_importance(trials: Sequence[TrialRecord], knobs: Sequence[str], *, n_boot: int = 30,
                      seed: int = 0, n_trees: int = 32) -> list[dict[str, Any]]:
    """[{knob, fanova, ci95}] sorted largest first, over ok trials (see the module doc).

    ``n_boot=0`` gives the point estimates only (``ci95`` None), as the coordinator uses to
    order its ablation runs.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.importance import FanovaImportanceEvaluator

    ok = [t for t in trials if t.status == "ok" and t.value is not None]
    knobs = [k for k in knobs if len({_level(t.params.get(k)) for t in ok}) > 1]
    if len(ok) < 4 or not knobs:
        return [{"knob": k, "fanova": None, "ci95": None} for k in knobs]
    dists = {k: CategoricalDistribution(sorted({_level(t.params.get(k)) for t in ok})) for k in knobs}

    def importances(sample: Sequence[TrialRecord], s: int) -> dict[str, float]:
        study = optuna.create_study(direction="maximize")
        study.add_trials([optuna.trial.create_trial(
            params={k: _level(t.params.get(k)) for k in knobs}, distributions=dists, value=t.value)
            for t in sample])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return optuna.importance.get_param_importances(
                    study, evaluator=FanovaImportanceEvaluator(n_trees=n_trees, seed=s), normalize=True)
            except (RuntimeError, ValueError):  # a resample where every value is the same
                return {k: 0.0 for k in knobs}

    point = importances(ok, seed)
    rng = np.random.default_rng(seed)
    boots = defaultdict(list)
    for b in range(n_boot):
        sample = [ok[i] for i in rng.integers(0, len(ok), len(ok))]
        imp = importances(sample, seed + 1 + b)
        for k in knobs:
            boots[k].append(imp.get(k, 0.0))
    out = [{"knob": k, "fanova": float(point.get(k, 0.0)),
            "ci95": ([float(np.percentile(boots[k], 2.5)), float(np.percentile(boots[k], 97.5))]
                     if n_boot > 0 else None)}
           for k in knobs]
    return sorted(out, key=lambda d: -d["fanova"])


# ----------------------------------------------------------------- marginal effects

def marginal_effects(trials: Sequence[TrialRecord], knobs: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Per knob, per level: ok-trial mean with a t-interval across trials, and failures."""
    finished = [t for t in trials if t.state == "COMPLETE" and t.role != "ablation"]
    out: dict[str, list[dict[str, Any]]] = {}
    for k in knobs:
        rows = []
        for level in sorted({_level(t.params.get(k)) for t in finished}):
            at = [t for t in finished if _level(t.params.get(k)) == level]
            values = [t.value for t in at if t.status == "ok"]
            failures = defaultdict(int)
            for t in at:
                if t.status != "ok":
                    failures[t.status] += 1
            ci = None
            if len(values) >= 2:
                m, sd = float(np.mean(values)), float(np.std(values, ddof=1))
                half = float(stats.t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))
                ci = [m - half, m + half]
            rows.append({"level": level, "n_trials": len(at), "n_ok": len(values),
                         "mean": float(np.mean(values)) if values else None, "ci95": ci,
                         "failures": dict(failures),
                         "summary": f"{k}={level}: {sum(failures.values())} of {len(at)} failed"
                                    + (f" ({', '.join(f'{v} {s}' for s, v in failures.items())})" if failures else "")})
        out[k] = rows
    return out


# ------------------------------------------------------------------------- ablation

def ablation_effects(trials: Sequence[TrialRecord], baseline_params: dict[str, Any] | None) -> dict[str, Any] | None:
    """Each knob's impact: re-measured best / best-with-that-knob-at-baseline - 1, with CI."""
    # an extended study plans its ablation again (tuner.study): the latest round counts
    starts = [t.number for t in trials if t.role == "ablation" and t.ablation_knob is None]
    trials = [t for t in trials if t.role != "ablation" or t.number >= max(starts, default=-1)]
    abl = [t for t in trials if t.role == "ablation" and t.status == "ok"]
    best = next((t for t in abl if t.ablation_knob is None), None)
    if best is None:
        return None
    best_ci = mean_ci(best.steps)
    effects = []
    for t in abl:
        if t.ablation_knob is None:
            continue
        r = ratio_ci(best_ci, mean_ci(t.steps))
        if r is None:
            continue
        knob = t.ablation_knob
        effects.append({"knob": knob, "best_value": best.params.get(knob),
                        "baseline_value": (baseline_params or {}).get(knob, t.params.get(knob)),
                        "impact": r["mean"] - 1, "ci95": [r["ci95"][0] - 1, r["ci95"][1] - 1],
                        "trial": t.number})
    failed = [{"knob": t.ablation_knob, "status": t.status, "trial": t.number}
              for t in trials if t.role == "ablation" and t.state == "COMPLETE" and t.status != "ok"]
    return {"best_remeasured": {"trial": best.number, "tokens_per_sec_per_gpu": _public(best_ci)},
            "knobs": sorted(effects, key=lambda e: -e["impact"]), "failed": failed}


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

def analyze_record(record: StudyRecord, *, n_boot: int = 30, seed: int = 0) -> dict[str, Any]:
    """analysis.json (INTERFACES.md schema, extended) of a study record."""
    trials = record.trials
    spec = record.attrs.get("spec", {})
    knobs = list(spec.get("space", {})) or sorted({k for t in trials for k in t.params})
    # queued runs the spent budget never started (status `skipped`) are not trials that ran
    finished = [t for t in trials if t.state in ("COMPLETE", "FAIL") and t.status not in ("skipped", "repeat")]
    ok = [t for t in trials if t.status == "ok"]
    search_ok = [t for t in ok if t.role != "ablation"]

    baseline_t = next((t for t in ok if t.role == "baseline"), None)
    baseline = None
    if baseline_t is not None:
        baseline = {"trial": baseline_t.number, "params": baseline_t.params,
                    "tokens_per_sec_per_gpu": _public(mean_ci(baseline_t.steps))}

    best = None
    ablation = ablation_effects(trials, baseline_t.params if baseline_t else None)
    if search_ok:
        best_t = max(search_ok, key=lambda t: t.value)
        remeasured = next((t for t in ok if t.role == "ablation" and t.ablation_knob is None
                           and t.params == best_t.params), None)
        source = remeasured or best_t
        best_ci = mean_ci(source.steps)
        speedup = ratio_ci(best_ci, mean_ci(baseline_t.steps)) if baseline_t else None
        best = {"trial": best_t.number, "params": best_t.params,
                "tokens_per_sec_per_gpu": _public(best_ci),
                "speedup_vs_baseline": _public(speedup),
                "search_tokens_per_sec_per_gpu": _public(mean_ci(best_t.steps)),
                "winners_curse_adjusted": remeasured is not None,
                "measured_by_trial": source.number}

    importance = fanova_importance(ok, knobs, n_boot=n_boot, seed=seed)
    ranked = [d for d in importance if d["fanova"] is not None]
    used = sum(charged_gpu_seconds(t.state, t.gpu_seconds, t.reserved_gpu_seconds) for t in trials)
    return {
        "study": record.name, "simulated": record.simulated,
        "n_trials": len(finished), "n_ok": len(ok),
        "n_failed": {s: sum(t.status == s for t in finished) for s in ("oom", "timeout", "error", "fail")},
        "n_skipped": sum(t.status == "skipped" for t in trials),
        "n_stopped_by_budget": sum(t.status == "stopped_by_budget" for t in trials),
        "n_repeats_not_run": sum(t.status == "repeat" for t in trials),
        "budget": {"limit_gpu_hours": record.limit_gpu_seconds / 3600, "used_gpu_hours": used / 3600,
                   "startup_share": startup_share(finished)},
        "baseline": baseline, "best": best, "importance": importance,
        "top_knobs": [d["knob"] for d in ranked[:3]],
        "marginal_effects": marginal_effects(trials, knobs), "ablation": ablation,
        "trials": [{"trial": t.number, "params": t.params, "status": t.status, "role": t.role,
                    "ablation_knob": t.ablation_knob, "gpu_seconds": t.gpu_seconds,
                    "startup_share": startup_share([t]),
                    "message": t.message or None,
                    "tokens_per_sec_per_gpu": _public(mean_ci(t.steps)) if t.status == "ok" else None}
                   for t in finished],
        "spec": spec,
        "method": {"trial_ci": "batch means (~sqrt(n) batches of ~sqrt(n) steps), t-quantile",
                   "speedup_ci": "delta method on the log ratio, Welch-Satterthwaite df",
                   "importance": f"fANOVA over ok trials, bootstrap over trials ({n_boot} resamples); "
                                 "conditional knobs carry an explicit 'n/a' level",
                   "winners_curse": "best measured again after the search (ablation) when available"},
    }


def analyze_study(study, *, n_boot: int = 30, seed: int = 0) -> dict[str, Any]:
    """analysis.json of an Optuna study (see analyze_record)."""
    return analyze_record(study_record(study), n_boot=n_boot, seed=seed)


def write_analysis(analysis: dict[str, Any], out_dir: str | Path) -> Path:
    from tuner.output import output_dir, write_atomic  # all or nothing (issue 18)
    return write_atomic(output_dir(out_dir) / "analysis.json", json.dumps(analysis, indent=2))


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
    if analysis["baseline"]:
        base = analysis["baseline"]
        lines.append(f"baseline (trial {base['trial']}): {_fmt_ci(base['tokens_per_sec_per_gpu'])} tokens/s/GPU")
    best = analysis["best"]
    if best:
        if analysis["baseline"] and best["trial"] == analysis["baseline"]["trial"]:
            note = " (the baseline itself)"
        else:
            note = " (re-measured)" if best["winners_curse_adjusted"] else " (search trial; not re-measured)"
        lines.append(f"best (trial {best['trial']}){note}: {_fmt_ci(best['tokens_per_sec_per_gpu'])} tokens/s/GPU")
        if best["speedup_vs_baseline"]:
            lines.append(f"speedup vs baseline: {_fmt_ci(best['speedup_vs_baseline'], fmt='.2f')}x")
    lines.append("knob importance (fANOVA, 95% CI):")
    for d in analysis["importance"]:
        ci = d["ci95"]
        lines.append(f"  {d['knob']:<26} {d['fanova']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"  {d['knob']:<26} -")
    if analysis.get("ablation"):
        lines.append("ablation (best vs that knob at the baseline's value):")
        for e in analysis["ablation"]["knobs"]:
            lines.append(f"  {e['knob']}={e['best_value']}: {e['impact']:+.1%} [{e['ci95'][0]:+.1%}, {e['ci95'][1]:+.1%}]")
    return "\n".join(lines)
