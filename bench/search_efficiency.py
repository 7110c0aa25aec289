"""Search efficiency: what the full pipeline recommends, as a share of the true optimum.

For each simulated cluster (7B x 32 H100, 13B x 8 H100, 1B x 16 A100) and each physics,

- ``matched``: the sim is helper's own model;
- ``mismatched``: ``sim_physics = "perturbed:SEED"`` (tuner.sim), one different
  cluster per seed: every constant perturbed 30-50%, another activation-memory formula,
  interactions helper does not model, a slow node, a version-dependent NCCL rule,

the true optimum is brute-forced over the spec's whole grid with the sim's noiseless physics.
Each strategy then runs the study as ``tuner run`` does (baseline first, budget admission with
caps, adaptive measurement, no exact repeats, screening before launch, then the ablation round
that re-measures the best and the next candidates: the coordinator's own functions, over
in-memory storage for speed) and is scored by its recommendation: analysis.json's ``best``
(tuner.stats), as a share of that optimum, at the end of the budget and as the budget
passes 10 and 20 GPU-h. ``--no-ablation`` scores the search alone. "model-only" is helper's top
prediction, no trial run.

    nice -n 10 python bench/search_efficiency.py --seeds 20          # all strategies
    python bench/search_efficiency.py --quick                        # a smoke run
    OMP_NUM_THREADS=1 nice -n 10 python bench/search_efficiency.py --seeds 20 --physics mismatched \
        --jobs 2 --cpu-limit-s 600 2> LOG                              # one process per seed
    python bench/search_efficiency.py --from-logs LOG...             # the table, seeds lost to random

Per-seed lines carry each strategy's CPU seconds (on a shared machine wall time says little);
``--cpu-limit-s`` stops one strategy's study there (flagged TIMED-OUT, scored on what it found).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner import budget
from tuner.budget import ledger_from_trials
from tuner.knobs import is_active
from tuner.launch import TrialRequest
from tuner.model import spec_model_inputs
from tuner.search import is_deliberate, make_sampler, screen, screen_repeat, suggest_params
from tuner.sim import SimLauncher, physics_for, truth
from tuner.spec import baseline_params, complete_params, load_spec
from tuner.stats import level_failures, recommend, run_groups, study_record, trial_cis
from tuner.study import (
    MAX_PRUNED_IN_A_ROW,
    adaptive_bar,
    end_unrun,
    last_run_params,
    plan_ablation_once,
    record_result,
)

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")

SPECS = ("studies/llama7b-h100x32.toml", "studies/sim-llama13b-h100x8.toml", "studies/sim-llama1b-a100x16.toml")
STRATEGIES = ("random", "tpe", "gp", "model", "model-only", "auto", "tpe-multivariate", "grid")
ALIASES = {"tuner-default": "auto", "tpe-mv-group-liar": "tpe-multivariate", "tpe-default": "tpe"}
"""Names earlier rounds of this bench used."""
CHECKPOINTS_GPUH = (10, 20)
TARGET = 0.99


def with_(spec, *, seed: int, physics: str, sampler: str | None = None):
    study = dataclasses.replace(spec.study, seed=seed, **({"sampler": sampler} if sampler else {}))
    return dataclasses.replace(spec, study=study, cluster=dataclasses.replace(spec.cluster, sim_physics=physics))


def grid_configs(spec):
    names = [k.name for k in spec.space]
    for values in itertools.product(*(k.values_for_grid() for k in spec.space)):
        params = dict(zip(names, values))
        inactive = [k for k in params if not is_active(k, params)]
        if any(params[k] != spec.knob(k).values_for_grid()[0] for k in inactive):
            continue  # one representative of the configs where a conditional knob does not apply
        for k in inactive:
            params.pop(k)
        yield params


class Truth:
    """Noiseless tokens/s/GPU of a config under one spec's physics (0 when it fails)."""

    def __init__(self, spec):
        self.spec, self.cache = spec, {}
        self.physics = physics_for(spec.cluster.sim_physics, spec.cluster.gpu)
        self.launcher = SimLauncher(spec)

    def __call__(self, params) -> float:
        full = complete_params(params, self.spec)
        # prefetch_factor changes neither physics (no steady-state effect): one key for its values
        key = json.dumps({k: v for k, v in full.items() if k != "prefetch_factor"}, sort_keys=True)
        if key not in self.cache:
            if self.physics.matched:
                r = self.launcher.launch(TrialRequest(study_name="truth", number=0, params=full, spec=self.spec,
                                                      run_dir=Path("/nonexistent")))
                self.cache[key] = r.extra.get("noiseless_tokens_per_sec_per_gpu", 0.0) if r.status == "ok" else 0.0
            else:
                t = truth(self.physics, spec_model_inputs(full, self.spec, mean_tokens=self.physics.mean_tokens()))
                self.cache[key] = t.tokens_per_sec_per_gpu if t.status == "ok" else 0.0
        return self.cache[key]

    def optimum(self) -> float:
        return max(self(p) for p in grid_configs(self.spec))


def run_one(spec, truth_of, optimum, limit_s, *, cpu_limit_s: float | None = None, launcher=None, inspect=None):
    """One study with spec's sampler, as ``tuner run`` drives it; (final share, {gpuh: share},
    counts). The coordinator's own admission, repeat and screening functions, the ablation round
    when the spec keeps a share for it (re-measuring the best and the next candidates: the product
    default), scored by analysis's recommendation. ``cpu_limit_s``: stop a sampler that has used
    this much CPU time (counts["timed_out"] = 1; it is scored on what it found), so one slow seed
    cannot hold up a whole table. ``launcher``: the truth's trials (default: the sim launcher of
    the spec's physics; bench/search_surfaces.py passes its own); ``inspect(study) -> dict``:
    diagnostics of the finished study, merged into counts. BLAS runs on one thread, as
    ``tuner run``'s coordinator runs it: ``cpu_limit_s`` counts every thread's CPU time, and two
    BLAS threads spinning beside another run timed out warm studies that finish in about 30 CPU
    seconds on one (docs/benchmarks.md)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _run_one(spec, truth_of, optimum, limit_s, cpu_limit_s=cpu_limit_s, launcher=launcher, inspect=inspect)


def _run_one(spec, truth_of, optimum, limit_s, *, cpu_limit_s, launcher, inspect):
    started = time.process_time()
    launcher = SimLauncher(spec) if launcher is None else launcher
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    study.set_user_attr("spec", {"space": {k.name: None for k in spec.space}})
    base = baseline_params(spec)
    if base:
        study.enqueue_trial(base, user_attrs={"role": "baseline"})
    ablation = spec.study.ablation_share > 0
    search_limit = budget.search_limit(limit_s, spec.study.ablation_share, ablation=ablation)
    first_estimate = spec.first_estimate_gpu_seconds
    used, at, pruned_in_a_row = 0.0, {}, 0
    counts = {"trials": 0, "launched_failed": 0, "launched_nccl_error": 0, "pruned": 0, "timed_out": 0,
              "ablation_runs": 0}
    while True:
        if cpu_limit_s is not None and time.process_time() - started > cpu_limit_s:
            counts["timed_out"] = 1
            break
        trials = study.get_trials(deepcopy=False)
        admission = budget.next_admission(
            ledger_from_trials(trials, limit_s), first_estimate_gpu_seconds=first_estimate,
            search_limit_gpu_seconds=search_limit, ablation=ablation,
            ablation_planned=bool(study.user_attrs.get("ablation_planned")),
            queued=any(t.state == optuna.trial.TrialState.WAITING for t in trials),
            search_exhausted=bool(study.user_attrs.get("search_exhausted")),
            estimate_gpu_seconds=budget.estimate_from_trials(
                trials, first_estimate_gpu_seconds=first_estimate, warm=launcher.warm()),
            costliest_ok_gpu_seconds=budget.cap_basis(trials, first_estimate_gpu_seconds=first_estimate))
        if admission.action == "plan_ablation":
            if not plan_ablation_once(study, spec, trials, limit_gpu_seconds=limit_s,
                                      worker_params=last_run_params(trials) if launcher.warm() else None):
                break
            continue
        if pruned_in_a_row >= MAX_PRUNED_IN_A_ROW and not study.user_attrs.get("search_exhausted"):
            # the coordinator's rule: a sampler that proposes only screened-out configs ends the
            # search; the ablation round still runs on what the budget left
            study.set_user_attr("search_exhausted", True)
            continue
        if admission.action != "launch":
            break
        trial = study.ask()
        params = suggest_params(trial, spec)
        if screen_repeat(study, spec, trial, params, trials):  # an exact repeat: never launched
            continue
        counts["trials"] += 1
        verdict = None if is_deliberate(trial.user_attrs) else screen(  # as the coordinator: never the baseline
            study, spec, complete_params(params, spec), launcher=launcher)
        if verdict is not None:
            end_unrun(study, trial, "pruned", verdict.reason)
            counts["pruned"] += 1
            pruned_in_a_row += 1
            continue
        pruned_in_a_row = 0
        counts["ablation_runs"] += trial.user_attrs.get("role") == "ablation"
        trial.set_user_attr("reserved_gpu_seconds", admission.cap_gpu_seconds)
        request = TrialRequest(study_name="bench", number=trial.number, params=complete_params(params, spec),
                               spec=spec, run_dir=Path("/nonexistent"), max_gpu_seconds=admission.cap_gpu_seconds,
                               stop_below_tokens_per_sec_per_gpu=adaptive_bar(study, spec, run=trial.user_attrs))
        result = launcher.launch(request)
        record_result(study, trial, result)
        counts["launched_failed"] += result.status in ("oom", "error")
        counts["launched_nccl_error"] += result.status == "error"
        used += result.gpu_seconds
        for h in CHECKPOINTS_GPUH:
            if h not in at and used / 3600 >= h:  # the recommendation as the budget passes h
                at[h] = recommended_share(study, truth_of, optimum)
    final = recommended_share(study, truth_of, optimum)
    for h in CHECKPOINTS_GPUH:
        at.setdefault(h, final)
    if inspect is not None:
        counts.update(inspect(study))
    return final, at, counts


def recommended(study) -> dict | None:
    """analysis.json's ``best`` params (tuner.stats over the run-level CIs, as analyze_study
    computes it, without the importance bootstrap), or None when no trial ran ok."""
    trials = study_record(study).trials
    cis, _ = trial_cis(trials)
    tau2, tau_df = run_groups(trials, cis)
    knob_names = list(study.user_attrs.get("spec", {}).get("space", {}))
    baseline = next((t for t in trials if t.status == "ok" and t.role == "baseline"), None)
    best = recommend(trials, cis, tau2=tau2, tau_df=tau_df, levels=level_failures(trials, knob_names),
                     baseline=baseline)
    return None if best is None else best["params"]


def recommended_share(study, truth_of, optimum) -> float:
    """analysis's recommended config (``best``), as a share of the optimum."""
    params = recommended(study)
    return 0.0 if params is None else truth_of(params) / optimum


def _counts(name: str, c: dict, seconds: float) -> str:
    return (f"{name} trials={c['trials']} failed={c['launched_failed']} (nccl {c['launched_nccl_error']}) "
            f"pruned={c['pruned']}" + (" TIMED-OUT" if c.get("timed_out") else "") + f" {seconds:.0f}s")


def summary(runs) -> dict:
    final = [r[0] for r in runs]
    return {"n": len(final), "share_ge_99": sum(f >= TARGET for f in final) / len(final),
            "median": statistics.median(final), "p10": float(np.percentile(final, 10)),
            "min": min(final), "at10": statistics.median(r[1][10] for r in runs),
            "at20": statistics.median(r[1][20] for r in runs),
            "trials": statistics.mean(r[2]["trials"] for r in runs),
            "launched_failed": statistics.mean(r[2]["launched_failed"] for r in runs),
            "pruned": statistics.mean(r[2]["pruned"] for r in runs),
            "timed_out": sum(r[2].get("timed_out", 0) for r in runs),
            "seconds": statistics.mean(r[3] for r in runs), "final": final}


_LINE = r"\s+(\S+) (\S+) seed (\d+)/\d+: (.*?)(?: \[| \|)"
"""A per-seed line: cluster, physics, seed (1-based), then `strategy share` pairs."""


def summarize_logs(paths) -> str:
    """The table from the per-seed lines of one or more logs (a cell split over processes); a
    seed logged twice keeps the later file's value, and each strategy is compared with random
    seed by seed (same seed = same mismatched cluster), naming the seeds it lost by > 0.5%."""
    import re

    finals: dict[tuple[str, str, str], dict[int, float]] = {}
    seconds: dict[tuple[str, str, str], dict[int, float]] = {}
    timed_out: dict[tuple[str, str, str], set[int]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            m = re.match(_LINE, line)
            if not m:
                continue
            cluster, kind, seed = m.group(1), m.group(2), int(m.group(3))
            for name, value in re.findall(r"(\S+) (\d\.\d+)", m.group(4)):
                finals.setdefault((cluster, kind, name), {})[seed] = float(value)
            for name, rest, secs in re.findall(r"(\S+) trials=\d+ ([^|\[]*?)(\d+)s(?= |$)", line[m.end(4):]):
                seconds.setdefault((cluster, kind, name), {})[seed] = float(secs)
                if "TIMED-OUT" in rest:
                    timed_out.setdefault((cluster, kind, name), set()).add(seed)
    rows = ["| cluster | physics | strategy | runs | runs >= 99% | median | worst tenth | min | CPU s/seed | timed out |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, by_seed in sorted(finals.items()):
        cluster, kind, name = key
        f = list(by_seed.values())
        secs = seconds.get(key, {})
        rows.append(f"| {cluster} | {kind} | {name} | {len(f)} | {sum(x >= TARGET for x in f) / len(f):.0%} | "
                    f"{statistics.median(f):.3f} | {float(np.percentile(f, 10)):.3f} | {min(f):.3f} | "
                    + (f"{statistics.mean(secs.values()):.0f}" if secs else "-") + f" | {len(timed_out.get(key, ()))} |")
    rows.append("")
    for (cluster, kind, name), by_seed in sorted(finals.items()):
        rand = finals.get((cluster, kind, "random"), {})
        common = sorted(set(by_seed) & set(rand))
        if name != "random" and common:
            below = sum(by_seed[k] < rand[k] for k in common)
            worse = [k for k in common if by_seed[k] < rand[k] - 0.005]
            rows.append(f"{cluster} {kind} {name}: below random on {below} of {len(common)} common seeds "
                        f"(by more than 0.5% on {len(worse)}" + (f": seeds {', '.join(map(str, worse))}"
                                                                  if worse else "") + ")")
    return "\n".join(rows)


def base_spec(path: str, *, adaptive: bool = True, ablation: bool = True):
    """A shipped cluster's spec on the sim launcher; ``ablation=False``: no ablation share (the
    search alone, scored on its search runs)."""
    spec = load_spec(ROOT / path).with_launcher("sim")
    if not ablation:
        spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, ablation_share=0.0))
    if not adaptive:
        spec = dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, adaptive=False))
    return spec


_TRUTHS: dict[tuple[str, str, bool], tuple[Truth, float]] = {}
"""A process's truths: matched physics is one truth for every seed."""


def run_seed(task: dict) -> dict:
    """Every strategy on one (cluster, physics, seed): {"cluster", "kind", "seed", "runs":
    {strategy: (share, {gpuh: share}, counts, cpu_seconds)}, "truth_seconds"} (CPU seconds of
    this process: on a shared machine they say what a run costs, wall seconds do not)."""
    spec0 = base_spec(task["path"], adaptive=task["adaptive"], ablation=task.get("ablation", True))
    seed, kind = task["seed"], task["kind"]
    spec = with_(spec0, seed=seed, physics="matched" if kind == "matched" else f"perturbed:{seed}")
    t0 = time.process_time()
    key = (task["path"], spec.cluster.sim_physics, task["adaptive"])
    if key not in _TRUTHS:
        truth_of = Truth(spec)
        _TRUTHS[key] = (truth_of, truth_of.optimum())
    truth_of, optimum = _TRUTHS[key]
    out = {"cluster": spec0.study.name, "kind": kind, "seed": seed, "runs": {},
           "truth_seconds": time.process_time() - t0}
    for name in task["strategies"]:
        t0 = time.process_time()
        if name == "model-only":
            from tuner.search import top_prediction
            share = truth_of(top_prediction(spec)) / optimum
            run = (share, dict.fromkeys(CHECKPOINTS_GPUH, share), dict.fromkeys(
                ("trials", "launched_failed", "launched_nccl_error", "pruned", "timed_out"), 0))
        else:
            run = run_one(with_(spec, seed=seed, physics=spec.cluster.sim_physics, sampler=name),
                          truth_of, optimum, task["budget_gpuh"] * 3600, cpu_limit_s=task["cpu_limit_s"])
        out["runs"][name] = (*run, time.process_time() - t0)
    return out


def seed_line(r: dict, last_seed: int, strategies, elapsed_s: float) -> str:
    """The per-seed line --from-logs reads."""
    runs = r["runs"]
    return (f"  {r['cluster']} {r['kind']} seed {r['seed'] + 1}/{last_seed}: "
            + " ".join(f"{n} {runs[n][0]:.4f}" for n in strategies)  # 4 places: --from-logs counts >= 0.99 exactly
            + " | " + " | ".join(_counts(n, runs[n][2], runs[n][3]) for n in strategies)
            + f" | truth {r['truth_seconds']:.0f}s (CPU s) [{elapsed_s:.0f}s wall]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget-gpuh", type=float, default=40.0)
    parser.add_argument("--strategies", default="random,tpe,gp,model,model-only",
                        help=f"comma list of {', '.join(STRATEGIES)} (`auto`: tuner's default sampler)")
    parser.add_argument("--no-adaptive", action="store_true", help="measure every trial fully (spec.trial.adaptive off)")
    parser.add_argument("--no-ablation", action="store_true",
                        help="no ablation round (the search alone, scored on its search runs)")
    parser.add_argument("--physics", default="matched,mismatched", help="comma list: matched, mismatched")
    parser.add_argument("--only", default="", help="comma list of cluster names (e.g. sim-llama1b-a100x16)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1 "
                        "(split one cell over processes; summarize their logs with --from-logs)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, one (cluster, physics, seed) each")
    parser.add_argument("--cpu-limit-s", type=float, default=None,
                        help="stop one strategy's study after this many CPU seconds (flagged TIMED-OUT)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, one cluster")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON (rewritten after every seed)")
    parser.add_argument("--from-logs", nargs="+", type=Path, help="only summarise the per-seed lines of these logs")
    args = parser.parse_args()
    if args.from_logs:
        print(summarize_logs(args.from_logs))
        return
    seeds = 2 if args.quick else args.seeds
    specs = SPECS[:1] if args.quick else SPECS
    if args.only:
        wanted = args.only.split(",")
        if unknown := [w for w in wanted if not any(Path(p).stem == w for p in SPECS)]:
            parser.error(f"--only: unknown cluster {', '.join(unknown)}; one of {', '.join(Path(p).stem for p in SPECS)}")
        specs = tuple(p for p in SPECS if Path(p).stem in wanted)
    strategies = [ALIASES.get(s, s) for s in args.strategies.split(",")]
    if bad := [s for s in strategies if s not in STRATEGIES]:
        parser.error(f"--strategies: unknown {', '.join(bad)}; one of {', '.join(STRATEGIES)}")
    last_seed = args.first_seed + seeds
    tasks = [{"path": path, "kind": kind, "seed": seed, "strategies": strategies,
              "adaptive": not args.no_adaptive, "ablation": not args.no_ablation,
              "budget_gpuh": args.budget_gpuh, "cpu_limit_s": args.cpu_limit_s}
             for path in specs for kind in args.physics.split(",") for seed in range(args.first_seed, last_seed)]
    t0 = time.perf_counter()
    by_cell: dict[tuple[str, str], dict[int, dict]] = {}
    if args.jobs > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=1)
        results = pool.imap_unordered(run_seed, tasks)
    else:
        pool, results = None, map(run_seed, tasks)
    for r in results:
        print(seed_line(r, last_seed, strategies, time.perf_counter() - t0), file=sys.stderr, flush=True)
        by_cell.setdefault((r["cluster"], r["kind"]), {})[r["seed"]] = r
        if args.out:
            args.out.write_text(json.dumps({f"{c}|{k}": {s: r["runs"] for s, r in cell.items()}
                                            for (c, k), cell in by_cell.items()}, indent=1))
    if pool is not None:
        pool.close()
    print(f"\n{seeds} seeds per cell; a run's score is the true throughput of the recommended config / the "
          "true optimum (noiseless physics, brute-forced over the grid).\n")
    print("| cluster | physics | strategy | runs >= 99% | median | worst tenth | min | median @10 GPU-h | @20 "
          "| trials | launched & failed | pruned | CPU s/seed | timed out |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (cluster, kind), cell in by_cell.items():
        for name in strategies:
            s = summary([cell[k]["runs"][name] for k in sorted(cell)])
            print(f"| {cluster} | {kind} | {name} | {s['share_ge_99']:.0%} | {s['median']:.3f} | {s['p10']:.3f} | "
                  f"{s['min']:.3f} | {s['at10']:.3f} | {s['at20']:.3f} | {s['trials']:.0f} | "
                  f"{s['launched_failed']:.1f} | {s['pruned']:.1f} | {s['seconds']:.0f} | {s['timed_out']} |")
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
