"""Studies with known truth, analysed as `tuner analyze` would: do tuner's statistics hold?

    python -m bench.synthetic_studies                      # the table of docs/statistics.md
    python -m bench.synthetic_studies --studies 3 --n-boot 50   # quicker, coarser

Each study is built the way the coordinator builds one (tuner.stats.StudyRecord, the input of
tuner.stats.analyze_record): the baseline first, search trials, then the ablation the
coordinator would enqueue (tuner.study.plan_ablation + plan_runs: the best, the baseline
and the next two configs re-measured, interleaved with one-knob reverts). A run's true
throughput is its config's truth times a run-to-run factor (lognormal, 2% sd); its steps come
from a noise family of bench/noise_families.py (rotated over studies); a config may fail
(oom) with a known probability. The families (knob spaces, baselines, truths): bench/families.py.

Reported per family: per-trial CI coverage (the truth: each run's own mean), speedup CI
coverage (the truth: the recommended config's over the baseline's), top 3 right (as a set),
placebo knobs in "What matters", and recommendations of configs that fail >= 50% / >= 25%.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
from scipy.stats import binomtest

from bench.families import FAMILIES
from bench.importance_truth import true_indices
from bench.noise_families import FAMILIES as NOISE_FAMILIES
from bench.noise_families import step_series
from bench.tuner_api import (
    N_CANDIDATES,
    StudyRecord,
    TrialRecord,
    analyze_record,
    config_key,
    parse_spec,
    plan_ablation,
    plan_runs,
    shortlist,
)

__all__ = ["FAMILIES", "build_study", "evaluate", "run_family"]

RUN_TO_RUN_SD = 0.02
STEPS = 8


def _sample(rng: np.random.Generator, fam: dict[str, Any]) -> dict[str, Any]:
    p = {k: v[int(rng.integers(len(v)))] for k, v in fam["space"].items()}
    favour = fam.get("favour")
    if favour:
        knob, level, prob = favour
        if rng.random() < prob:
            p[knob] = level
        else:
            others = [v for v in fam["space"][knob] if v != level]
            p[knob] = others[int(rng.integers(len(others)))]
    if "prefetch_factor" in p and p.get("num_workers", 0) == 0:
        del p["prefetch_factor"]
    return p


def build_study(family: str, seed: int, noise: str) -> tuple[StudyRecord, dict[int, float]]:
    """A StudyRecord of one synthetic study and each ok run's true tokens over time."""
    fam = FAMILIES[family]
    rng = np.random.default_rng(seed)
    truth, p_fail = fam["truth"], fam.get("p_fail", lambda p: 0.0)
    trials: list[TrialRecord] = []
    run_truth: dict[int, float] = {}

    def run(params: dict[str, Any], **attrs: Any) -> TrialRecord:
        n = len(trials)
        if rng.random() < p_fail(params):
            t = TrialRecord(number=n, state="COMPLETE", status="oom", params=params, steps=(), value=0.0,
                            gpu_seconds=10.0, **attrs)
        else:
            true_rate = truth(params) * math.exp(rng.normal(0.0, RUN_TO_RUN_SD))
            rates, secs, _ = step_series(rng, noise, STEPS, true_rate)
            t = TrialRecord(number=n, state="COMPLETE", status="ok", params=params, steps=tuple(rates.tolist()),
                            step_seconds=tuple(secs.tolist()), value=float((rates * secs).sum() / secs.sum()),
                            gpu_seconds=40.0, **attrs)
            run_truth[n] = true_rate
        trials.append(t)
        return t

    run(dict(fam["baseline"]), role="baseline")
    for _ in range(fam["n_search"]):
        run(_sample(rng, fam))
    spec = parse_spec({"study": {"name": family}, "model": {"preset": "tiny"}, "space": fam["space"]})
    reliable = shortlist(trials, list(fam["space"]))   # what tuner.study.plan_ablation_once does
    if reliable:
        best, base_key = reliable[0], config_key(fam["baseline"])
        cands = [p for p in reliable[1:] if config_key(p) != base_key][:N_CANDIDATES]
        reverts = plan_ablation(spec, best, fam["baseline"])
        for params, extra in plan_runs(reverts, dict(fam["baseline"]), cands):
            run(params, role="ablation", ablation_knob=extra.get("ablation_knob"))
    attrs = {"spec": {"space": {k: list(v) for k, v in fam["space"].items()}}, "budget_limit_gpu_seconds": 1e5}
    return StudyRecord(name=f"{family}-{seed}", trials=tuple(trials), attrs=attrs), run_truth


def evaluate(family: str, analysis: dict[str, Any], run_truth: dict[int, float]) -> dict[str, Any]:
    """What held in one analysed study."""
    fam = FAMILIES[family]
    hits = total = 0
    for t in analysis["trials"]:
        tps = t["tokens_per_sec_per_gpu"]
        if tps and t["trial"] in run_truth:
            total += 1
            hits += tps["ci95"][0] <= run_truth[t["trial"]] <= tps["ci95"][1]
    best = analysis["best"]
    speed_hit = None
    if best and best.get("speedup_vs_baseline"):
        true_ratio = fam["truth"](best["params"]) / fam["truth"](fam["baseline"])
        lo, hi = best["speedup_vs_baseline"]["ci95"]
        speed_hit = lo <= true_ratio <= hi
    matters = [r["knob"] for r in analysis.get("what_matters", [])]
    p_fail = fam.get("p_fail", lambda p: 0.0)(best["params"]) if best else 0.0
    # "top 3 right": the ranking's first k are the true first k as a set, k = min(3, knobs with
    # an effect) (fam["top3"] holds them); every family here has at least 3
    return {"trial_hits": hits, "trial_total": total, "speedup_hit": speed_hit,
            "top3_right": set(analysis["top_knobs"][:len(fam["top3"])]) == fam["top3"],
            "top3_beat_placebo": {d["knob"] for d in analysis["importance"] if d["matters"]} >= fam["top3"],
            "what_matters_top3": set(matters[:len(fam["top3"])]) == fam["top3"],
            "placebo_in_what_matters": bool(set(matters) & fam["placebo"]),
            "recommended_fails_half": p_fail >= 0.5, "recommended_fails_quarter": p_fail >= 0.25,
            **_index_coverage(family, analysis), **_ablation_false_positives(fam, analysis)}


def _index_coverage(family: str, analysis: dict[str, Any]) -> dict[str, int]:
    """Counts: importance CIs of knobs with an effect that cover the true total / first-order
    index (bench/importance_truth.py); knobs without one whose total CI starts at 0, whose CI of
    the difference to the placebo covers 0, and that are called ``matters``."""
    truth = true_indices(family)
    c = dict.fromkeys(("eff_n", "eff_total_hit", "eff_first_hit", "null_n", "null_lo_zero", "null_vs_placebo_0",
                       "null_matters"), 0)
    for d in analysis["importance"]:
        if d["total_ci95"] is None or d["knob"] not in truth:
            continue
        total, first = truth[d["knob"]]
        if total > 0:
            c["eff_n"] += 1
            c["eff_total_hit"] += d["total_ci95"][0] <= total <= d["total_ci95"][1]
            c["eff_first_hit"] += d["first_order_ci95"][0] <= first <= d["first_order_ci95"][1]
        else:
            c["null_n"] += 1
            c["null_lo_zero"] += d["total_ci95"][0] <= 0.0
            c["null_vs_placebo_0"] += d["vs_placebo_ci95"][0] <= 0.0 <= d["vs_placebo_ci95"][1]
            c["null_matters"] += bool(d["matters"])
    return c


def _ablation_false_positives(fam: dict[str, Any], analysis: dict[str, Any]) -> dict[str, int]:
    """Ablated knobs without an effect (the family's placebo knobs) and how many of them the
    Holm-corrected ablation called significant; whether any was, per study."""
    nulls = [e for e in (analysis.get("ablation") or {}).get("knobs", []) if e["knob"] in fam["placebo"]]
    sig = sum(bool(e["significant"]) for e in nulls)
    return {"abl_null_n": len(nulls), "abl_null_sig": sig, "abl_null_study": bool(nulls), "abl_null_any": sig > 0}


def run_family(family: str, studies: int, n_boot: int, seed: int = 0) -> dict[str, Any]:
    rows = []
    for i in range(studies):
        noise = NOISE_FAMILIES[i % len(NOISE_FAMILIES)]
        record, run_truth = build_study(family, seed + i, noise)
        rows.append(evaluate(family, analyze_record(record, n_boot=n_boot, seed=seed + i), run_truth))
    speed = [r["speedup_hit"] for r in rows if r["speedup_hit"] is not None]
    tally = {k: sum(r[k] for r in rows) for k in rows[0] if k.startswith(("eff_", "null_", "abl_"))}
    return {"studies": studies, **tally, "top3_hits": sum(r["top3_right"] for r in rows),
            "what_matters_top3": sum(r["what_matters_top3"] for r in rows) / studies,
            "top3_beat_placebo": sum(r["top3_beat_placebo"] for r in rows) / studies,
            "trial_coverage": sum(r["trial_hits"] for r in rows) / max(1, sum(r["trial_total"] for r in rows)),
            "speedup_coverage": sum(speed) / len(speed) if speed else None, "n_speedups": len(speed),
            "top3_right": sum(r["top3_right"] for r in rows) / studies,
            "placebo_in_what_matters": sum(r["placebo_in_what_matters"] for r in rows),
            "recommended_fails_half": sum(r["recommended_fails_half"] for r in rows),
            "recommended_fails_quarter": sum(r["recommended_fails_quarter"] for r in rows)}


def _rate(hits: int, n: int) -> str:
    """hits / n with its exact 95% CI (scipy.stats.binomtest)."""
    if n == 0:
        return "-"
    ci = binomtest(hits, n).proportion_ci()
    return f"{hits / n:.2f} [{ci.low:.2f}, {ci.high:.2f}] ({hits}/{n})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=14, help="studies per family (default 14: 2 per noise family)")
    parser.add_argument("--n-boot", type=int, default=200, help="importance bootstrap resamples (default 200)")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma list")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.monotonic()
    print(f"{args.studies} studies per family, noise families rotated ({', '.join(NOISE_FAMILIES)}), "
          f"{STEPS} measured steps, run-to-run sd {RUN_TO_RUN_SD:.0%}, {args.n_boot} bootstrap resamples; "
          "rates with exact 95% CIs\n")
    results = {}
    print("| family | per-trial coverage | speedup coverage | top 3 right | true top 3 beat the placebo "
          "| What matters' first 3 right "
          "| placebo in What matters | recommended config fails >= 50% | >= 25% |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for family in args.families.split(","):
        r = results[family] = run_family(family, args.studies, args.n_boot, args.seed)
        sp = f"{r['speedup_coverage']:.2f} ({r['n_speedups']})" if r["speedup_coverage"] is not None else "-"
        print(f"| {family} | {r['trial_coverage']:.3f} | {sp} | {_rate(r['top3_hits'], r['studies'])} | "
              f"{r['top3_beat_placebo']:.2f} | {r['what_matters_top3']:.2f} | "
              f"{r['placebo_in_what_matters']} of {r['studies']} | {r['recommended_fails_half']} of {r['studies']} | "
              f"{r['recommended_fails_quarter']} of {r['studies']} |", flush=True)
    print("\nImportance CIs against the true indices (bench/importance_truth.py) and the ablation's false "
          "positives (knobs without an effect called significant after Holm):\n")
    print("| family | effect: total CI covers | effect: first-order CI covers | no effect: total CI starts at 0 "
          "| no effect: CI vs placebo covers 0 | no effect: matters | ablation: no-effect knob significant "
          "| studies with any |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for family, r in results.items():
        print(f"| {family} | {_rate(r['eff_total_hit'], r['eff_n'])} | {_rate(r['eff_first_hit'], r['eff_n'])} | "
              f"{_rate(r['null_lo_zero'], r['null_n'])} | {_rate(r['null_vs_placebo_0'], r['null_n'])} | "
              f"{_rate(r['null_matters'], r['null_n'])} | {_rate(r['abl_null_sig'], r['abl_null_n'])} | "
              f"{_rate(r['abl_null_any'], r['abl_null_study'])} |")
    print(f"\nwall time {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
