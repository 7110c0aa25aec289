"""Does `tuner analyze` hold on studies with known truth? One table over the statistics families.

    OMP_NUM_THREADS=1 nice -n 10 python -m bench.stats_families                 # 40 studies per family
    python -m bench.stats_families --quick                                      # 3 per family, 50 resamples
    python -m bench.stats_families --families stalls,drift --studies 20 --jobs 2
    python -m bench.stats_families --families three-way --explore 1   # a uniform random search
    python -m bench.stats_families --save /tmp/studies.jsonl      # keep what each study's analysis said;
                                                                  # run again: resumes where it stopped
    python -m bench.stats_families --rescore /tmp/studies.jsonl   # the table again from it, no re-analysis

Each study is built as the coordinator builds one (bench/stats_study.py: baseline, a search
biased toward good configs, tuner's own ablation round and runoff) from a family with known
truth (bench/stats_truth.py, bench/stats_noise.py) and read with tuner's ``analyze_record``;
bench/stats_score.py says what each column measures. Columns:

- *per-trial CI covers launch / config*: ok runs whose 95% CI holds their launch's long-run
  rate / their config's;
- *rec. >= 99% of optimum*: studies whose recommendation's true rate is within 1% of the
  optimum's (the fastest config failing < 25%), and the lowest ratio;
- *rec. / baseline CI covers*: studies whose config-level 95% CI of the recommended config /
  the baseline holds that config's true long-run rate; *rec. bias (se)*: the mean log error of
  the recommended config's estimate, in %, with its standard error;
- *half-width (oracle)*: median relative half-width of those CIs, beside the oracle's
  (bench/stats_score.py: the noise model and run-to-run sd known, same runs);
- *speedup bias (se)*: mean log(estimated / true speedup) of the recommendation over the
  baseline, in %, with its standard error; *speedup covers*: its 95% CI holds the truth;
- *top k right*: ``top_knobs``' first k are the true k largest one-knob effects;
- *What matters, >= 10% knobs*: (knob, study) pairs listed, for knobs whose one-knob change at
  the optimum moves throughput >= 10%, and the worst such knob, and of the pairs not listed
  how many analysis.json names ``undecided`` (its ablation CI still reaches 10%); *no-effect
  knobs*: pairs listed, studies with any, and pairs named undecided;
- *rec. fails >= 25%*: studies recommending a config whose true failure rate is >= 25%, and
  how many of them analysis.json flags at the top; *risk flag*: studies (of all) whose
  recommendation carries ``best.failure.risk_flagged`` (false alarms where nothing fails);
- *phi at bound*: studies whose pooled phi is at the top of tuner.stats's grid;
- *warm-up dropped*: share of ok runs that lost leading steps to MSER, their mean log error
  against the launch (%), their coverage;
- *flags*: share of studies that analysis.json's ``noise_diagnostics`` flags for phi at a
  bound / drift / stalls / replication spread (n/a: no such key);
- *winners_curse_adjusted*: studies whose recommendation's numbers come from confirmation runs
  that did not choose it (analysis.json ``best.winners_curse_adjusted``);
- *CPU s/study*: process CPU time to build and analyse one study.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import time
from typing import Any

from bench.stats_score import FLAG_KEYS, score, summarize
from bench.stats_study import EXPLORE, build
from bench.stats_truth import FAMILIES
from bench.tuner_api import analyze_record

__all__ = ["run_study", "main"]

N_BOOT = 200
"""tuner analyze's default bootstrap resamples (tuner.stats.N_BOOT)."""


_KEPT = ("best", "baseline", "what_matters", "top_knobs", "noise_model", "noise_diagnostics", "ablation",
         "failure_rates", "undecided")
_KEPT_IMPORTANCE = ("knob", "total", "first_order", "matters", "vs_placebo_ci95", "p_vs_placebo")
_KEPT_TRIAL = ("trial", "params", "status", "ablation_knob", "tokens_per_sec_per_gpu", "warmup_steps_dropped")


def run_study(task: tuple[str, int, int, int, float]) -> dict[str, Any]:
    """Study ``i`` of ``family`` built and analysed: what scoring needs (analysis.json's parts
    that bench.stats_score reads, each ok run's launch rate) and the CPU time it took."""
    family, i, seed, n_boot, explore = task
    t0 = time.process_time()
    built = build(family, i, seed, explore)
    analysis = analyze_record(built.record, n_boot=n_boot, seed=seed + i)
    kept = {k: analysis[k] for k in _KEPT if k in analysis}
    kept["trials"] = [{k: t.get(k) for k in _KEPT_TRIAL} for t in analysis["trials"]]
    kept["importance"] = [{k: d.get(k) for k in _KEPT_IMPORTANCE} for d in analysis["importance"]]
    return {"family": family, "study": i, "seed": seed, "n_boot": n_boot, "explore": explore,
            "launch_rate": built.launch_rate,
            "analysis": kept, "cpu_s": time.process_time() - t0}


def _score(study: dict[str, Any]) -> dict[str, Any]:
    fam = FAMILIES[study["family"]]
    rates = {int(k): v for k, v in study["launch_rate"].items()}   # JSON keys are strings
    return {**score(fam, fam.noise(study["study"]), rates, study["analysis"]), "cpu_s": study["cpu_s"]}


def _frac(pair: tuple[int, int] | None, digits: int = 2) -> str:
    if not pair or not pair[1]:
        return "n/a"
    h, n = pair
    return f"{h / n:.{digits}f} ({h}/{n})"


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _bias(mean: float | None, se: float | None) -> str:
    if mean is None:
        return "-"
    return f"{100 * mean:+.2f}% ({100 * se:.2f})" if se else f"{100 * mean:+.2f}%"


def _row(family: str, s: dict[str, Any]) -> str:
    n_trials = s["trials"] or 1
    big = s["big_listed"]
    hits, total = sum(h for h, _ in big.values()), sum(n for _, n in big.values())
    worst = min(big.items(), key=lambda kv: kv[1][0] / kv[1][1]) if big else None
    bias, rec_bias = _bias(s["speed_bias"], s["speed_bias_se"]), _bias(s["rec_bias"], s["rec_bias_se"])
    dropped = f"{s['dropped'] / n_trials:.1%}"
    if s["dropped"]:
        dropped += f" ({100 * s['dropped_log_err']:+.1f}%, {s['dropped_cover'] / s['dropped']:.2f})"
    flags = " / ".join("n/a" if s["flags"][k] is None else f"{s['flags'][k][0]}/{s['flags'][k][1]}" for k in FLAG_KEYS)
    fails = s["rec_fail_flagged"]
    return " | ".join([
        f"| {family}", str(s["studies"]),
        f"{s['trial_cover_launch'] / n_trials:.3f} / {s['trial_cover_config'] / n_trials:.3f}",
        f"{_frac(s['rec_near_optimum'])}; min {s['rec_vs_optimum_min']:.2f}",
        _frac(s["rec_cover"]), rec_bias, _frac(s["base_cover"]),
        f"{_pct(s['rec_hw'])} ({_pct(s['rec_oracle_hw'])})", f"{_pct(s['base_hw'])} ({_pct(s['base_oracle_hw'])})",
        bias, _frac(s["speed_cover"]), _frac(s["top_right"]),
        (f"{hits / total:.2f}; worst {worst[0]} {worst[1][0]}/{worst[1][1]}" if worst else "-")
        + (f"; misses undecided {s['undecided'][0]}/{s['undecided'][1]}" if s.get("undecided") else ""),
        f"{_frac(s['null_listed'])}; {s['null_listed_studies']} studies"
        + (f"; undecided {s['undecided'][2]}/{s['undecided'][3]}" if s.get("undecided") else ""),
        f"{fails[1]} ({fails[0]} flagged); risk flag {s.get('risk_flagged', 0)}/{s['studies']}",
        f"{s['phi_at_bound'][0]}/{s['phi_at_bound'][1]}",
        dropped, flags, f"{s.get('winners_curse_adjusted', 0)}/{s['studies']}", f"{s['cpu_s']:.1f} |"])


HEADER = ("| family | studies | per-trial CI covers launch / config | rec. >= 99% of optimum | rec. CI covers "
          "| rec. bias (se) | baseline CI covers "
          "| half-width rec. (oracle) | half-width baseline (oracle) | speedup bias (se) | speedup covers "
          "| top k right | What matters: >= 10% knobs | What matters: no-effect knobs | rec. fails >= 25% "
          "| phi at bound | warm-up dropped (bias, covers) | flags: phi / drift / stalls / spread "
          "| winners_curse_adjusted | CPU s/study |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: | ---: |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=40, help="studies per family (default 40)")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma list (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--n-boot", type=int, default=N_BOOT, help=f"importance bootstrap resamples (default {N_BOOT})")
    parser.add_argument("--explore", type=float, default=EXPLORE,
                        help=f"the search's share of random configs (default {EXPLORE}; 1: uniform random search)")
    parser.add_argument("--quick", action="store_true", help="3 studies per family, 50 resamples: a smoke run")
    parser.add_argument("--save", metavar="FILE", help="append each study's scored parts to FILE as a JSON line; "
                        "studies already there (same seed and resamples) are read back, not run again")
    parser.add_argument("--rescore", metavar="FILE", help="score the studies a --save wrote; build and analyse none")
    args = parser.parse_args(argv)
    studies, n_boot = (3, 50) if args.quick else (args.studies, args.n_boot)
    families = args.families.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    t0 = time.monotonic()
    rows: dict[str, list[dict[str, Any]]] = {f: [] for f in families}
    if args.rescore:
        for study in _read(args.rescore):
            if study["family"] in rows:
                rows[study["family"]].append(_score(study))
        print(f"rescored {args.rescore}\n")
    else:
        # study by study across the families, so that a run stopped early is balanced
        tasks = [(f, i, args.seed, n_boot, args.explore) for i in range(studies) for f in families]
        if args.save and os.path.exists(args.save):
            for study in _read(args.save):
                task = (study["family"], study["study"], study["seed"], study.get("n_boot"), study.get("explore", EXPLORE))
                if task in tasks:
                    tasks.remove(task)
                    rows[study["family"]].append(_score(study))
        pool = multiprocessing.get_context("fork").Pool(args.jobs) if args.jobs > 1 else _Serial()
        with pool, open(args.save, "a") if args.save else contextlib.nullcontext() as out:
            for done, study in enumerate(pool.imap_unordered(run_study, tasks), 1):
                rows[study["family"]].append(_score(study))
                if out:
                    out.write(json.dumps(study) + "\n")
                    out.flush()
                if done % len(families) == 0 or done == len(tasks):
                    print(f"[{done}/{len(tasks)}] {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        print(f"{studies} studies per family, seed {args.seed}, {n_boot} bootstrap resamples, search explore "
              f"{args.explore:g}, "
              f"{args.jobs} job(s); wall time {time.monotonic() - t0:.0f} s\n")
    print(HEADER)
    for family in families:
        if rows[family]:
            print(_row(family, summarize(rows[family])))
    return 0


def _read(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class _Serial:
    """Pool's imap_unordered in this process (``--jobs 1``)."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def imap_unordered(self, fn, tasks):
        return map(fn, tasks)


if __name__ == "__main__":
    raise SystemExit(main())
