"""Search on surfaces helper did not generate: the whole pipeline scored against truths whose
structure is not helper's.

Truths (bench/surface_truth.py):

- ``KIND`` (7b-h100x32, 13b-h100x8, 1b-a100x16, 7b-a100x16): random surfaces of that cluster
  kind (bench/surfaces.py): which knobs matter, their directions and sizes, interactions,
  memory boundary and NCCL rules drawn at random, one surface per seed;
- ``fp:KIND``: the first-principles cluster (bench/first_principles_cluster.py) on that kind,
  its uncertain constants drawn per seed.

For each (truth, seed) and each launcher, ``cold`` (start-up every trial) and ``warm`` (a
resident worker pays only its reconfiguration; bench/surface_launcher.py), every strategy runs
the study as ``tuner run`` does (baseline first, admission under the budget, screening,
ablation and runoff; bench/surface_pipeline.py) and is scored by analysis's recommendation:
its true tokens/s/GPU over the true optimum (brute force over the spec's grid, noiseless).
Strategies: ``random``, ``tpe``, ``model`` (the spec's ``auto``: the model-guided sampler) and
``model-only`` (helper's top prediction, no trial). The same seed is the same truth for every
strategy, so they are compared seed by seed.

    python bench/search_surfaces.py --quick                                  # a smoke run
    OMP_NUM_THREADS=1 nice -n 10 python bench/search_surfaces.py --surfaces 13 --jobs 2 \\
        --cpu-limit-s 600 --log runs/surfaces.jsonl                          # >= 50 surfaces
    python bench/search_surfaces.py --summarize runs/surfaces.jsonl          # the tables again

Each finished (truth, seed, launcher) is one JSON line in ``--log`` (appended: a run split over
processes or resumed is summarised from all its logs) and one readable line on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root

from bench.first_principles_cluster import FirstPrinciplesCluster
from bench.surface_pipeline import KINDS, STRATEGIES, cluster_kind, helper_view, kind_spec, run_strategy
from bench.surfaces import draw_surface, label

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")

TARGET = 0.99
BELOW_RANDOM = 0.005
"""A seed counts as lost to random when the strategy scores more than this below it."""
DEFAULT_TRUTHS = (*KINDS, "fp:7b-h100x32", "fp:1b-a100x16")

_KINDS: dict[str, tuple] = {}
"""A process's (spec, kind) per cluster kind."""
_VIEWS: dict[str, object] = {}
"""A process's helper view per cluster kind (computed before forking)."""


def _kind(name: str):
    if name not in _KINDS:
        spec = kind_spec(name)
        _KINDS[name] = (spec, cluster_kind(name, spec))
    return _KINDS[name]


def _view(name: str):
    if name not in _VIEWS:
        spec, kind = _kind(name)
        _VIEWS[name] = helper_view(spec, kind.levels)
    return _VIEWS[name]


def build_truth(truth_name: str, seed: int):
    """(spec, truth) of ``KIND`` or ``fp:KIND`` at ``seed``."""
    spec, kind = _kind(truth_name.removeprefix("fp:"))
    if truth_name.startswith("fp:"):
        c = spec.cluster
        return spec, FirstPrinciplesCluster(spec.model.preset, gpu=c.gpu, world_size=c.world_size,
                                            gpus_per_node=c.gpus_per_node, seq_len=spec.model.seq_len, seed=seed)
    return spec, draw_surface(kind, seed)


def make_truth(truth_name: str, seed: int):
    """(spec, truth, labels) of ``KIND`` or ``fp:KIND`` at ``seed``."""
    spec, truth = build_truth(truth_name, seed)
    name = truth_name.removeprefix("fp:")
    return spec, truth, label(truth, _kind(name)[1].levels, _view(name))


def run_task(task: dict) -> dict:
    """Every strategy on one (truth, seed, launcher): a JSON-able record. The whole task, truth
    and model-only pick included, runs BLAS on one thread, as each study does
    (bench/search_efficiency.py's ``run_one``: ``--cpu-limit-s`` counts every thread's CPU time)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _run_task(task)


def _run_task(task: dict) -> dict:
    t0 = time.process_time()
    spec, truth, labels = make_truth(task["truth"], task["seed"])
    out = {"truth": task["truth"], "seed": task["seed"], "launcher": task["launcher"], "budget_gpuh": task["budget_gpuh"],
           "labels": labels, "truth_cpu_s": time.process_time() - t0, "runs": {}}
    for name in task["strategies"]:
        t0 = time.process_time()
        run = run_strategy(spec, truth, name, labels["optimum_tokens_per_sec_per_gpu"], labels["optimum"],
                           seed=task["seed"], resident=task["launcher"] == "warm", budget_gpuh=task["budget_gpuh"],
                           cpu_limit_s=task["cpu_limit_s"])
        out["runs"][name] = {**run, "cpu_s": time.process_time() - t0}
    return out


def task_line(r: dict) -> str:
    runs = r["runs"]
    lab = r["labels"]
    flags = [f for f, on in (("beyond-helper-memory", lab["optimum_beyond_helper_memory"]),
                             ("behind-nccl-rule", lab["optimum_behind_nccl_rule"])) if on]
    return (f"  {r['truth']} {r['launcher']} seed {r['seed']}: "
            + " ".join(f"{n} {v['share']:.4f}" for n, v in runs.items())
            + f" [{' '.join(flags) or '-'}] | "
            + " | ".join(_counts(n, v) for n, v in runs.items() if STRATEGIES[n] is not None))


def _counts(name: str, run: dict) -> str:
    c = run["counts"]
    return (f"{name} trials={c.get('trials', 0)} pruned={c.get('pruned', 0)} optimum {c.get('optimum_fate', '-')} "
            f"best-run {c.get('best_launched_share', 0):.3f} {run['cpu_s']:.0f}s" + (" TIMED-OUT" if c.get("timed_out") else ""))


def _ci(k: int, n: int) -> str:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(method="exact")  # Clopper-Pearson
    return f"[{ci.low:.2f}, {ci.high:.2f}]"


def summarize(records: list[dict]) -> str:
    """The tables: per truth and launcher, then per launcher over every truth, each strategy's
    runs >= 99% (Clopper-Pearson 95% CI), median, worst tenth, min, seeds lost to random by more
    than 0.5%, the rate on truths whose optimum lies beyond helper's memory line; then
    :func:`diagnosis`."""
    by: dict[tuple[str, str], dict[int, dict]] = {}
    order = {t: i for i, t in enumerate(DEFAULT_TRUTHS)}
    for r in sorted(records, key=lambda r: (order.get(r["truth"], len(order)), r["truth"], r["launcher"])):
        by.setdefault((r["truth"], r["launcher"]), {})[r["seed"]] = r  # a task logged twice: the later record
    for launcher in sorted({lc for _, lc in by}):
        cells = [(t, cell) for (t, lc), cell in by.items() if lc == launcher]
        by[(f"all ({len(cells)} truths)", launcher)] = {(t, s): r for t, cell in cells for s, r in cell.items()}
    rows = ["| truth | trials | strategy | runs | >= 99% | 95% CI | median | worst tenth | min | below random "
            "| beyond helper's memory: >= 99% | CPU s/study |",
            "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (truth, launcher), cell in by.items():
        recs = list(cell.values())
        names = [n for n in STRATEGIES if all(n in r["runs"] for r in recs)]
        for name in names:
            f = [r["runs"][name]["share"] for r in recs]
            k = sum(x >= TARGET for x in f)
            below = sum(r["runs"][name]["share"] < r["runs"]["random"]["share"] - BELOW_RANDOM
                        for r in recs) if "random" in names and name != "random" else None
            beyond = [r["runs"][name]["share"] >= TARGET for r in recs if r["labels"]["optimum_beyond_helper_memory"]]
            cpu = [r["runs"][name]["cpu_s"] for r in recs]
            rows.append(f"| {truth} | {launcher} | {name} | {len(f)} | {k} ({k / len(f):.0%}) | {_ci(k, len(f))} | "
                        f"{statistics.median(f):.3f} | {float(np.percentile(f, 10)):.3f} | {min(f):.3f} | "
                        + ("-" if below is None else f"{below}") + " | "
                        + (f"{sum(beyond)}/{len(beyond)}" if beyond else "-") + f" | {statistics.mean(cpu):.0f} |")
    return "\n".join(rows + [""] + diagnosis(records))


def diagnosis(records: list[dict]) -> list[str]:
    """Each searching strategy's misses (< 99%) over every truth, per launcher: where the optimum
    lies for helper (beyond its memory line, behind one of its NCCL rules, or inside what it
    calls feasible), what became of it in the study (pruned by screening, never proposed, run
    but not recommended, failed when run), and the best share among the configs the study ran
    (below 0.99: a search miss; above: a selection miss)."""
    rows = ["| trials | strategy | misses | optimum beyond helper's memory | behind helper's NCCL rule | inside helper's "
            "feasible region | optimum pruned | never proposed | run, not chosen | failed when run | best run >= 0.99 "
            "| best run's share (median) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for launcher in sorted({r["launcher"] for r in records}):
        recs = [r for r in records if r["launcher"] == launcher]
        for name in [n for n in STRATEGIES if STRATEGIES[n] is not None and all(n in r["runs"] for r in recs)]:
            misses = [r for r in recs if r["runs"][name]["share"] < TARGET]
            if not misses:
                continue
            lab = [r["labels"] for r in misses]
            beyond = sum(x["optimum_beyond_helper_memory"] for x in lab)
            nccl = sum(x["optimum_behind_nccl_rule"] and not x["optimum_beyond_helper_memory"] for x in lab)
            fates = Counter(str(r["runs"][name]["counts"].get("optimum_fate", "")) for r in misses)
            pruned = sum(v for f, v in fates.items() if f.startswith("pruned"))
            failed = sum(v for f, v in fates.items() if f and not f.startswith(("pruned", "never", "ok")))
            best = [r["runs"][name]["counts"].get("best_launched_share", 0.0) for r in misses]
            rows.append(f"| {launcher} | {name} | {len(misses)} | {beyond} | {nccl} | {len(misses) - beyond - nccl} | "
                        f"{pruned} | {fates['never proposed']} | {fates['ok']} | {failed} | {sum(b >= TARGET for b in best)} | "
                        f"{statistics.median(best):.3f} |")
    return rows + [""] + wrong_knobs(records)


def wrong_knobs(records: list[dict]) -> list[str]:
    """For each strategy's misses, the knobs whose value alone, moved from the recommendation's
    to the optimum's, gains more than 0.5% on the truth, and in how many of those misses helper
    had that knob opposite or neutral (a knob with no effect never counts)."""
    out = []
    for launcher in sorted({r["launcher"] for r in records}):
        for name in [n for n in STRATEGIES if STRATEGIES[n] is not None]:
            misses = [r for r in records if r["launcher"] == launcher and name in r["runs"]
                      and r["runs"][name]["share"] < TARGET]
            costly, against = Counter(), Counter()
            for r in misses:
                chosen = r["runs"][name]["counts"].get("recommended")
                if chosen:
                    for knob in one_knob_gains(r["truth"], r["seed"], chosen, r["labels"]["optimum"]):
                        costly[knob] += 1
                        against[knob] += knob in r["labels"].get("opposite", []) + r["labels"].get("neutral_matters", [])
            if costly:
                out.append(f"{launcher} {name}, knobs that alone gain > 0.5% when moved to the optimum's value, in its "
                           f"{len(misses)} misses (helper opposite or neutral there): "
                           + ", ".join(f"{k} {n} ({against[k]})" for k, n in costly.most_common()))
    return out


def one_knob_gains(truth_name: str, seed: int, chosen: dict, best: dict) -> list[str]:
    """Knobs of ``chosen`` whose move alone to ``best``'s value raises the truth by > 0.5%."""
    _, truth = build_truth(truth_name, seed)
    chosen = {k: v for k, v in chosen.items() if k in _kind(truth_name.removeprefix("fp:"))[1].levels}

    def tps(p: dict) -> float:
        p = {**p, "prefetch_factor": p.get("prefetch_factor", best.get("prefetch_factor", 2))}
        o = truth.evaluate(p)
        return o.tokens_per_sec_per_gpu if o.status == "ok" else 0.0

    base = tps(chosen)
    return [k for k, v in best.items() if chosen.get(k) != v and base > 0 and tps({**chosen, k: v}) > base * 1.005]


def label_table(tasks: list[dict]) -> str:
    """Per truth, how many seeds put the optimum beyond helper's memory line (and beyond
    screening's prior line), behind an NCCL rule of helper's (any; certain on every version),
    have a knob helper calls neutral that matters, a knob opposite to helper's; and the mean
    share of the grid where helper's memory verdict is too tight or too loose."""
    rows = ["| truth | seeds | beyond helper's memory | beyond screening's prior line | behind NCCL rule (certain) "
            "| neutral knob matters | opposite knob | helper too tight | helper too loose | big_batch scenario |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    seeds: dict[str, set[int]] = {}
    for t in tasks:
        seeds.setdefault(t["truth"], set()).add(t["seed"])
    for truth, which in seeds.items():
        lab = [make_truth(truth, s)[2] for s in sorted(which)]
        n = len(lab)
        count = Counter(key for x in lab for key, value in x.items() if value is True or (isinstance(value, list) and value))
        surface = "scenario" in lab[0]
        rows.append(f"| {truth} | {n} | {count['optimum_beyond_helper_memory']} | {count['optimum_screened_at_prior']} | "
                    f"{count['optimum_behind_nccl_rule']} ({count['optimum_behind_certain_nccl_rule']}) | "
                    + (f"{count['neutral_matters']} | {count['opposite']} | " if surface else "- | - | ")
                    + f"{statistics.mean(x['helper_memory_too_tight_share'] for x in lab):.0%} | "
                    f"{statistics.mean(x['helper_memory_too_loose_share'] for x in lab):.0%} | "
                    + (f"{sum(x['scenario'] == 'big_batch' for x in lab)} |" if surface else "- |"))
    return "\n".join(rows)


def _tasks(args) -> list[dict]:
    truths = args.truths.split(",")
    if bad := [t for t in truths if t.removeprefix("fp:") not in KINDS]:
        raise SystemExit(f"--truths: unknown {', '.join(bad)}; one of {', '.join(KINDS)} (or fp:KIND)")
    strategies = args.strategies.split(",")
    if bad := [s for s in strategies if s not in STRATEGIES]:
        raise SystemExit(f"--strategies: unknown {', '.join(bad)}; one of {', '.join(STRATEGIES)}")
    if "random" not in strategies:
        strategies.insert(0, "random")  # every strategy is compared with random, seed by seed
    return [{"truth": t, "seed": s, "launcher": lc, "strategies": strategies, "budget_gpuh": args.budget_gpuh,
             "cpu_limit_s": args.cpu_limit_s}
            for s in range(args.first_seed, args.first_seed + args.surfaces) for t in truths
            for lc in args.launchers.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="A run's score is the true tokens/s/GPU of the recommended config over the true optimum.")
    parser.add_argument("--surfaces", type=int, default=13, help="seeds per truth (13 x 4 kinds = 52 surfaces)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + surfaces - 1")
    parser.add_argument("--truths", default=",".join(DEFAULT_TRUTHS),
                        help=f"comma list of cluster kinds ({', '.join(KINDS)}) for random surfaces, or fp:KIND "
                             "for the first-principles cluster on that kind")
    parser.add_argument("--launchers", default="cold,warm", help="comma list: cold (start-up every trial), "
                        "warm (a resident worker)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help=f"comma list of {', '.join(STRATEGIES)} "
                        "(random always runs: the others are compared with it seed by seed)")
    parser.add_argument("--budget-gpuh", type=float, default=40.0, help="GPU-hours of each study")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, one (truth, seed, launcher) each")
    parser.add_argument("--cpu-limit-s", type=float, default=None,
                        help="stop one strategy's study after this many CPU seconds (flagged TIMED-OUT, scored on "
                             "what it found)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one 7b-h100x32 surface, 8 GPU-h")
    parser.add_argument("--log", type=Path, help="append each finished task as a JSON line here")
    parser.add_argument("--summarize", nargs="+", type=Path, help="only print the tables of these logs")
    parser.add_argument("--labels-only", action="store_true",
                        help="run no study: how the truths differ from helper (bench/surfaces.py's labels), per truth")
    args = parser.parse_args(argv)
    if args.summarize:
        print(summarize([json.loads(line) for p in args.summarize for line in p.read_text().splitlines() if line]))
        return
    if args.quick:
        args.surfaces, args.truths, args.budget_gpuh = 1, "7b-h100x32", min(args.budget_gpuh, 8.0)
    tasks = _tasks(args)
    if args.labels_only:
        print(label_table(tasks))
        return
    for t in dict.fromkeys(task["truth"].removeprefix("fp:") for task in tasks):
        _view(t)  # helper's views once, before the workers fork
    t0, records = time.perf_counter(), []
    if args.jobs > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(args.jobs)
        results = pool.imap_unordered(run_task, tasks)
    else:
        pool, results = None, map(run_task, tasks)
    for r in results:
        records.append(r)
        print(task_line(r) + f" [{time.perf_counter() - t0:.0f}s wall]", file=sys.stderr, flush=True)
        if args.log:
            with args.log.open("a") as f:
                f.write(json.dumps(r, default=str) + "\n")
    if pool is not None:
        pool.close()
    print(summarize(json.loads(json.dumps(records, default=str))))
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
