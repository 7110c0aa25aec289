"""Search efficiency: what the full pipeline recommends, as a share of the true optimum.

For each simulated cluster (7B x 32 H100, 13B x 8 H100, 1B x 16 A100) and each physics,

- ``matched``: the sim is helper's own model;
- ``mismatched``: ``sim_physics = "perturbed:SEED"`` (tuner.launch.sim_physics), one different
  cluster per seed: every constant perturbed 30-50%, another activation-memory formula,
  interactions helper does not model, a slow node, a version-dependent NCCL rule,

the true optimum is brute-forced over the spec's whole grid with the sim's noiseless physics.
Each strategy then runs the study (baseline first, budget admission with caps, adaptive
measurement, screening before launch: the coordinator's own functions, over in-memory
storage for speed) and is scored by its recommendation: ``analyze_study``'s best (the
best ok search trial; no ablation re-runs here), as a share of that optimum, at the end of
the budget and at 10 and 20 GPU-h. "model-only" is helper's top prediction, no trial run.

    nice -n 10 python bench/search_efficiency.py --seeds 20          # all strategies
    python bench/search_efficiency.py --quick                        # a smoke run
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

from tuner import knobs, scheduling  # noqa: E402
from tuner.budget import ledger_from_trials  # noqa: E402
from tuner.coordinator import MAX_PRUNED_IN_A_ROW, adaptive_bar, end_unrun, record_result  # noqa: E402
from tuner.launch import TrialRequest  # noqa: E402
from tuner.launch.sim import SimLauncher  # noqa: E402
from tuner.launch.sim_physics import physics_for, truth  # noqa: E402
from tuner.sampling import make_sampler  # noqa: E402
from tuner.screening import screen  # noqa: E402
from tuner.space import baseline_params, complete_params, is_active, suggest_params  # noqa: E402
from tuner.spec import load_spec  # noqa: E402

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
                c = self.spec.cluster
                t = truth(self.physics, model=self.spec.model.preset, world=c.world_size, gpu=c.gpu,
                          gpus_per_node=c.gpus_per_node, seq_len=self.spec.model.seq_len, params=full,
                          reshard_after_forward=knobs.fsdp_reshard_after_forward(full))
                self.cache[key] = t.tokens_per_sec_per_gpu if t.status == "ok" else 0.0
        return self.cache[key]

    def optimum(self) -> float:
        return max(self(p) for p in grid_configs(self.spec))


def run_one(spec, truth_of, optimum, limit_s):
    """One study with spec's sampler; (final share, {gpuh: share}, counts)."""
    launcher = SimLauncher(spec)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    study.set_user_attr("spec", {"space": {k.name: None for k in spec.space}})
    base = baseline_params(spec)
    if base:
        study.enqueue_trial(base, user_attrs={"role": "baseline"})
    used, at, pruned_in_a_row = 0.0, {}, 0
    counts = {"trials": 0, "launched_failed": 0, "launched_nccl_error": 0, "pruned": 0}
    while True:
        trials = study.get_trials(deepcopy=False)
        admission = scheduling.next_admission(
            ledger_from_trials(trials, limit_s), first_estimate_gpu_seconds=scheduling.first_estimate(spec),
            search_limit_gpu_seconds=limit_s, ablation=False, ablation_planned=False,
            queued=any(t.state == optuna.trial.TrialState.WAITING for t in trials))
        if admission.action != "launch" or pruned_in_a_row >= MAX_PRUNED_IN_A_ROW:
            break  # the coordinator's rule: a sampler that proposes only screened-out configs stops
        trial = study.ask()
        params = suggest_params(trial, spec)
        counts["trials"] += 1
        verdict = screen(study, spec, complete_params(params, spec), launcher=launcher)
        if verdict is not None:
            end_unrun(study, trial, "pruned", verdict.reason)
            counts["pruned"] += 1
            pruned_in_a_row += 1
            continue
        pruned_in_a_row = 0
        trial.set_user_attr("reserved_gpu_seconds", admission.cap_gpu_seconds)
        request = TrialRequest(study_name="bench", number=trial.number, params=complete_params(params, spec),
                               spec=spec, run_dir=Path("/nonexistent"), max_gpu_seconds=admission.cap_gpu_seconds,
                               stop_below_tokens_per_sec_per_gpu=(None if trial.user_attrs.get("role")
                                                                  else adaptive_bar(study, spec)))
        result = launcher.launch(request)
        record_result(study, trial, result)
        counts["launched_failed"] += result.status in ("oom", "error")
        counts["launched_nccl_error"] += result.status == "error"
        used += result.gpu_seconds
        for h in CHECKPOINTS_GPUH:
            if used / 3600 <= h:
                at[h] = recommended_share(study, truth_of, optimum)
    for h in CHECKPOINTS_GPUH:
        at.setdefault(h, 0.0)
    return recommended_share(study, truth_of, optimum), at, counts


def recommended_share(study, truth_of, optimum) -> float:
    """analyze_study's `best` (the best ok search trial by its mean), as a share of the optimum."""
    ok = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
          if t.user_attrs.get("status") == "ok" and t.user_attrs.get("role") != "ablation"]
    if not ok:
        return 0.0
    return truth_of(max(ok, key=lambda t: t.value).params) / optimum


def _counts(name: str, c: dict) -> str:
    return (f"{name} trials={c['trials']} failed={c['launched_failed']} (nccl {c['launched_nccl_error']}) "
            f"pruned={c['pruned']}")


def summary(runs) -> dict:
    final = [r[0] for r in runs]
    return {"n": len(final), "share_ge_99": sum(f >= TARGET for f in final) / len(final),
            "median": statistics.median(final), "p10": float(np.percentile(final, 10)),
            "min": min(final), "at10": statistics.median(r[1][10] for r in runs),
            "at20": statistics.median(r[1][20] for r in runs),
            "trials": statistics.mean(r[2]["trials"] for r in runs),
            "launched_failed": statistics.mean(r[2]["launched_failed"] for r in runs),
            "pruned": statistics.mean(r[2]["pruned"] for r in runs), "final": final}


def summarize_logs(paths) -> str:
    """The table from the per-seed lines of one or more logs (a cell split over processes); a
    seed logged twice keeps the later file's value, and each strategy is compared with random
    seed by seed (same seed = same mismatched cluster)."""
    import re

    finals: dict[tuple[str, str, str], dict[int, float]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            m = re.match(r"\s+(\S+) (\S+) seed (\d+)/\d+: (.*?)(?: \[| \|)", line)
            if not m:
                continue
            cluster, kind, seed = m.group(1), m.group(2), int(m.group(3))
            for name, value in re.findall(r"(\S+) (\d\.\d+)", m.group(4)):
                finals.setdefault((cluster, kind, name), {})[seed] = float(value)
    rows = ["| cluster | physics | strategy | runs | runs >= 99% | median | worst tenth | min |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (cluster, kind, name), by_seed in sorted(finals.items()):
        f = list(by_seed.values())
        rows.append(f"| {cluster} | {kind} | {name} | {len(f)} | {sum(x >= TARGET for x in f) / len(f):.0%} | "
                    f"{statistics.median(f):.3f} | {float(np.percentile(f, 10)):.3f} | {min(f):.3f} |")
    rows.append("")
    for (cluster, kind, name), by_seed in sorted(finals.items()):
        rand = finals.get((cluster, kind, "random"), {})
        common = sorted(set(by_seed) & set(rand))
        if name != "random" and common:
            below = sum(by_seed[k] < rand[k] for k in common)
            worse = sum(by_seed[k] < rand[k] - 0.005 for k in common)
            rows.append(f"{cluster} {kind} {name}: below random on {below} of {len(common)} common seeds "
                        f"(by more than 0.5% on {worse})")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget-gpuh", type=float, default=40.0)
    parser.add_argument("--strategies", default="random,tpe,gp,model,model-only",
                        help=f"comma list of {', '.join(STRATEGIES)} (`auto`: tuner's default sampler)")
    parser.add_argument("--no-adaptive", action="store_true", help="measure every trial fully (spec.trial.adaptive off)")
    parser.add_argument("--physics", default="matched,mismatched", help="comma list: matched, mismatched")
    parser.add_argument("--only", default="", help="comma list of cluster names (e.g. sim-llama1b-a100x16)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1 "
                        "(split one cell over processes; summarize their logs with --from-logs)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, one cluster")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON (rewritten after every cell)")
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
    results: dict[str, dict] = {}
    t0 = time.perf_counter()
    for path in specs:
        spec0 = load_spec(ROOT / path).with_launcher("sim")
        spec0 = dataclasses.replace(spec0, study=dataclasses.replace(spec0.study, ablation_share=0.0))
        if args.no_adaptive:
            spec0 = dataclasses.replace(spec0, trial=dataclasses.replace(spec0.trial, adaptive=False))
        for kind in args.physics.split(","):
            runs: dict[str, list] = {s: [] for s in strategies}
            truths: dict[str, tuple[Truth, float]] = {}
            for seed in range(args.first_seed, args.first_seed + seeds):
                spec = with_(spec0, seed=seed, physics="matched" if kind == "matched" else f"perturbed:{seed}")
                if spec.cluster.sim_physics not in truths:  # matched: one truth for every seed
                    truth_of = Truth(spec)
                    truths[spec.cluster.sim_physics] = (truth_of, truth_of.optimum())
                truth_of, optimum = truths[spec.cluster.sim_physics]
                for name in strategies:
                    if name == "model-only":
                        from tuner.model_sampler import top_prediction
                        share = truth_of(top_prediction(spec)) / optimum
                        runs[name].append((share, dict.fromkeys(CHECKPOINTS_GPUH, share), dict.fromkeys(
                            ("trials", "launched_failed", "launched_nccl_error", "pruned"), 0)))
                        continue
                    runs[name].append(run_one(with_(spec, seed=seed, physics=spec.cluster.sim_physics, sampler=name),
                                              truth_of, optimum, args.budget_gpuh * 3600))
                print(f"  {spec.study.name} {kind} seed {seed + 1}/{args.first_seed + seeds}: "
                      + " ".join(f"{n} {runs[n][-1][0]:.3f}" for n in strategies)
                      + " | " + " ".join(_counts(n, runs[n][-1][2]) for n in strategies if n != "model-only")
                      + f" [{time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)
            for name in strategies:
                results[f"{spec0.study.name}|{kind}|{name}"] = summary(runs[name])
            if args.out:
                args.out.write_text(json.dumps(results, indent=1))
    print(f"\n{seeds} seeds per cell; a run's score is the true throughput of the recommended config / the "
          "true optimum (noiseless physics, brute-forced over the grid).\n")
    print("| cluster | physics | strategy | runs >= 99% | median | worst tenth | min | median @10 GPU-h | @20 "
          "| trials | launched & failed | pruned |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, s in results.items():
        cluster, kind, name = key.split("|")
        print(f"| {cluster} | {kind} | {name} | {s['share_ge_99']:.0%} | {s['median']:.3f} | {s['p10']:.3f} | "
              f"{s['min']:.3f} | {s['at10']:.3f} | {s['at20']:.3f} | {s['trials']:.0f} | "
              f"{s['launched_failed']:.1f} | {s['pruned']:.1f} |")
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
