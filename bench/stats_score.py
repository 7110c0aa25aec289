"""What held in one analysed synthetic study, against its known truth; and over many.

Per study (:func:`score`), from analysis.json (``tuner analyze``'s dict) and the truth
(bench/stats_truth.py, bench/stats_noise.py):

- **per-trial CIs** against the launch's own long-run rate (what they claim to cover) and
  against the config's rate (what a reader takes them for, when launches differ);
- **the recommendation's true rate over the optimum's** (stats_truth.optimum);
- **config-level CIs** (and the log error of the estimate) of the recommended config (``best.tokens_per_sec_per_gpu``) and the
  baseline (``baseline.tokens_per_sec_per_gpu``) against the config's true rate, and their
  relative half-widths beside the **oracle's**: an interval that knows the noise model and
  the run-to-run sd, so a run's log tokens over time has the known variance v (bench.stats_noise.run_log_var:
  the spread of simulated runs about their own mean, run-to-run included, a model's bias not
  counted), and the config's m pooled runs give mean x exp(+-1.96 sqrt(v / m)); its relative
  half-width is sinh(1.96 sqrt(v / m)), as tuner's is sinh of its log half-width. m is the
  runs tuner pooled: ``best.n_runs``; for the baseline, its config's ok runs that are not
  one-knob reverts (tuner.stats's);
- **the recommended speedup**'s log error log(estimate / truth) and whether its CI covers;
- **What matters**: which knobs whose one-knob change at the optimum moves throughput by
  >= 10% (stats_truth.one_knob_effects) it lists, and which no-effect knobs;
  **top k right**: ``top_knobs``' first k are the k largest true effects, k = min(3, knobs >= 10%);
- **failures**: whether the recommended config's true failure probability is >= 25%, and
  whether analysis.json says so at the top (``best.reliable`` false or ``best.failure.estimate``
  >= 25%);
- **misfit signs**: the pooled phi at the top of tuner.stats's grid (>= 0.965; the grid
  ends at 0.97), trials that lost leading steps to warm-up detection (their log error and
  coverage against the launch), and the flags of ``analysis["noise_diagnostics"]`` under
  :data:`FLAG_KEYS` (a key absent: None, printed n/a; a value counts as flagged when it is
  true, or a dict whose ``flagged`` is true).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bench.stats_noise import Noise, run_log_var
from bench.stats_truth import EFFECT_THRESHOLD, Family, one_knob_effects, optimum
from bench.tuner_api import FLAKY_FAILURE_RATE, config_key

__all__ = ["FLAG_KEYS", "PHI_BOUND", "score", "summarize", "oracle_half_width", "half_width", "covers"]

FLAG_KEYS = ("phi_at_bound", "drift", "stalls", "replication_spread")
"""The misfit flags issue 29 asks for, as keys of analysis.json's ``noise_diagnostics``."""
PHI_BOUND = 0.965
NEAR_OPTIMUM = 0.99
"""A recommendation within 1% of the optimum's true rate counts as found."""
Z95 = 1.959964


def covers(ci: Sequence[float], truth: float) -> bool:
    return ci[0] <= truth <= ci[1]


def half_width(estimate: dict[str, Any]) -> float:
    """Relative half-width of a {"mean", "ci95"} estimate."""
    lo, hi = estimate["ci95"]
    return (hi - lo) / 2.0 / estimate["mean"]


def oracle_half_width(log_var_per_run: float, runs: int) -> float:
    """sinh(1.96 sqrt(v / m)): the module doc's oracle.

    Example:
        >>> round(oracle_half_width(0.02 ** 2, 4), 4)
        0.0196
    """
    return math.sinh(Z95 * math.sqrt(log_var_per_run / runs))


def _flag(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value.get("flagged"))
    return bool(value)


def score(fam: Family, noise: Noise, launch_rate: dict[int, float], analysis: dict[str, Any]) -> dict[str, Any]:
    """One study's row (module doc). ``launch_rate``: ok trial number -> its launch's true
    long-run rate (bench.stats_study.BuiltStudy)."""
    row: dict[str, Any] = {"trials": 0, "trial_cover_launch": 0, "trial_cover_config": 0, "dropped": 0,
                           "dropped_cover": 0, "dropped_log_err": []}
    for t in analysis["trials"]:
        tps, rate = t["tokens_per_sec_per_gpu"], launch_rate.get(t["trial"])
        if not tps or rate is None:
            continue
        row["trials"] += 1
        row["trial_cover_launch"] += covers(tps["ci95"], rate)
        row["trial_cover_config"] += covers(tps["ci95"], fam.truth(t["params"]))
        if t.get("warmup_steps_dropped"):
            row["dropped"] += 1
            row["dropped_cover"] += covers(tps["ci95"], rate)
            row["dropped_log_err"].append(math.log(tps["mean"] / rate))
    v = run_log_var(noise)
    best, base = analysis["best"], analysis["baseline"]
    row.update(dict.fromkeys(("rec_cover", "rec_vs_optimum", "rec_log_err", "rec_hw", "rec_oracle_hw", "base_cover", "base_hw",
                              "base_oracle_hw", "speed_log_err", "speed_cover", "rec_fail", "rec_fail_flagged")))
    if best and best["tokens_per_sec_per_gpu"]:
        est = best["tokens_per_sec_per_gpu"]
        row.update(rec_cover=covers(est["ci95"], fam.truth(best["params"])), rec_hw=half_width(est),
                   rec_vs_optimum=fam.truth(best["params"]) / fam.truth(optimum(fam)),
                   rec_log_err=math.log(est["mean"] / fam.truth(best["params"])),
                   rec_oracle_hw=oracle_half_width(v, best["n_runs"]), winners_curse_adjusted=best["winners_curse_adjusted"])
        p_fail = fam.p_fail(best["params"])
        row["rec_fail"] = p_fail >= FLAKY_FAILURE_RATE
        row["rec_fail_flagged"] = ((not best["reliable"]) or best["failure"]["estimate"] >= FLAKY_FAILURE_RATE
                                   or bool(best["failure"].get("risk_flagged")))
        row["rec_risk_flagged"] = bool(best["failure"].get("risk_flagged"))
        row["rec_fail_estimate"] = best["failure"]["estimate"]
        if best["speedup_vs_baseline"] and base:
            truth = fam.truth(best["params"]) / fam.truth(base["params"])
            row["speed_log_err"] = math.log(best["speedup_vs_baseline"]["mean"] / truth)
            row["speed_cover"] = covers(best["speedup_vs_baseline"]["ci95"], truth)
    if base and base["tokens_per_sec_per_gpu"]:
        key = config_key(base["params"])
        m = sum(t["status"] == "ok" and t["ablation_knob"] is None and config_key(t["params"]) == key
                for t in analysis["trials"])
        row.update(base_cover=covers(base["tokens_per_sec_per_gpu"]["ci95"], fam.truth(base["params"])),
                   base_hw=half_width(base["tokens_per_sec_per_gpu"]), base_oracle_hw=oracle_half_width(v, max(m, 1)))
    effects = one_knob_effects(fam)
    listed = {r["knob"] for r in analysis.get("what_matters") or []}
    big = sorted((k for k, e in effects.items() if e >= EFFECT_THRESHOLD), key=lambda k: -effects[k])
    row["big_listed"] = {k: k in listed for k in big}
    row["null_listed"] = {k: k in listed for k in sorted(fam.placebo)}
    if "undecided" in analysis:   # knobs neither channel lists whose ablation CI reaches 10%
        undecided = {d["knob"] for d in analysis["undecided"]}
        missed = [k for k in big if k not in listed]
        nulls = [k for k in sorted(fam.placebo) if k not in listed]
        row["undecided"] = (sum(k in undecided for k in missed), len(missed),
                            sum(k in undecided for k in nulls), len(fam.placebo))
    k = min(3, len(big))
    row["top_right"] = set(analysis["top_knobs"][:k]) == set(big[:k]) if k else None
    noise_model = analysis.get("noise_model") or {}
    row["phi"] = noise_model.get("phi")
    row["phi_at_bound"] = row["phi"] is not None and row["phi"] >= PHI_BOUND
    diagnostics = analysis.get("noise_diagnostics")
    row["flags"] = {key: None if not isinstance(diagnostics, dict) or key not in diagnostics else _flag(diagnostics[key])
                    for key in FLAG_KEYS}
    return row


def _mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None)


def _rate(rows: list[dict[str, Any]], key: str) -> tuple[int, int]:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return sum(bool(v) for v in vals), len(vals)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A family's totals over its studies' rows."""
    out: dict[str, Any] = {"studies": len(rows)}
    for key in ("trials", "trial_cover_launch", "trial_cover_config", "dropped", "dropped_cover"):
        out[key] = sum(r[key] for r in rows)
    out["dropped_log_err"] = _mean_se([e for r in rows for e in r["dropped_log_err"]])[0]
    for key in ("rec_cover", "base_cover", "speed_cover", "top_right", "rec_fail", "phi_at_bound"):
        out[key] = _rate(rows, key)
    out["rec_fail_flagged"] = (sum(bool(r["rec_fail"] and r["rec_fail_flagged"]) for r in rows),
                               sum(bool(r["rec_fail"]) for r in rows))
    out["rec_fail_estimates"] = [r["rec_fail_estimate"] for r in rows if r["rec_fail"]]
    for which in ("rec", "base"):
        pairs = [(r[f"{which}_hw"], r[f"{which}_oracle_hw"]) for r in rows if r[f"{which}_hw"] is not None]
        out[f"{which}_hw"] = statistics.median(h for h, _ in pairs) if pairs else None
        out[f"{which}_oracle_hw"] = statistics.median(o for _, o in pairs) if pairs else None
    near = [r["rec_vs_optimum"] for r in rows if r["rec_vs_optimum"] is not None]
    out["rec_near_optimum"] = (sum(x >= NEAR_OPTIMUM for x in near), len(near))
    out["rec_vs_optimum_min"] = min(near, default=None)
    out["rec_bias"], out["rec_bias_se"] = _mean_se([r["rec_log_err"] for r in rows if r["rec_log_err"] is not None])
    out["speed_bias"], out["speed_bias_se"] = _mean_se([r["speed_log_err"] for r in rows if r["speed_log_err"] is not None])
    by_knob: dict[str, list[bool]] = {}
    for r in rows:
        for knob, hit in r["big_listed"].items():
            by_knob.setdefault(knob, []).append(hit)
    out["big_listed"] = {k: (sum(v), len(v)) for k, v in by_knob.items()}
    out["null_listed"] = (sum(sum(r["null_listed"].values()) for r in rows), sum(len(r["null_listed"]) for r in rows))
    out["null_listed_studies"] = sum(any(r["null_listed"].values()) for r in rows)
    und = [r["undecided"] for r in rows if r.get("undecided") is not None]
    out["undecided"] = tuple(sum(u[i] for u in und) for i in range(4)) if und else None
    out["flags"] = {}
    for key in FLAG_KEYS:
        vals = [r["flags"][key] for r in rows if r["flags"][key] is not None]
        out["flags"][key] = (sum(vals), len(vals)) if vals else None
    out["winners_curse_adjusted"] = sum(bool(r.get("winners_curse_adjusted")) for r in rows)
    out["risk_flagged"] = sum(bool(r.get("rec_risk_flagged")) for r in rows)
    out["cpu_s"] = statistics.fmean(r["cpu_s"] for r in rows) if rows and "cpu_s" in rows[0] else None
    return out
