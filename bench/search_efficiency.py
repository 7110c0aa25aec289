"""Search efficiency of samplers on simulated clusters, and the budget adaptive measurement saves.

For each simulated cluster/model spec, the true optimum is known exactly: the noiseless
performance model evaluated over the whole grid of the spec's space. Each strategy then
runs the study (baseline first, budget admission with caps, adaptive measurement, failures
as constraints: the coordinator's own functions, over in-memory storage for speed) for 20
seeds; we record the GPU-hours until the config it would recommend (its best measured ok
trial) is within 98% of the optimum, and the fraction of the optimum found at 10, 20 and
40 GPU-hours.

    python bench/search_efficiency.py                  # 3 clusters x 20 seeds x 6 strategies
    python bench/search_efficiency.py --quick          # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner import scheduling  # noqa: E402
from tuner.budget import ledger_from_trials  # noqa: E402
from tuner.coordinator import adaptive_bar, record_result  # noqa: E402
from tuner.launch import TrialRequest  # noqa: E402
from tuner.launch.sim import SimLauncher  # noqa: E402
from tuner.sampling import make_sampler  # noqa: E402
from tuner.space import baseline_params, complete_params, is_active, suggest_params  # noqa: E402
from tuner.spec import load_spec  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")

SPECS = ("studies/llama7b-h100x32.toml", "studies/sim-llama13b-h100x8.toml", "studies/sim-llama1b-a100x16.toml")
CHECKPOINTS_GPUH = (10, 20, 40)
STARTUP_SHARE: list[tuple[float, float]] = []   # (start-up GPU-s, total GPU-s) per trial
TARGET = 0.98


def strategies(spec, seed):
    """name -> sampler factory."""
    grid = {k.name: list(k.values_for_grid()) for k in spec.space}
    return {
        "tpe-default": lambda: optuna.samplers.TPESampler(seed=seed),
        "tpe-mv-group-liar": lambda: optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        # DeepSpeed-autotuner style: walk the full grid, in a seeded shuffled order.
        "grid": lambda: optuna.samplers.GridSampler(grid, seed=seed),
        "tuner-default": lambda: make_sampler(dataclasses.replace(spec, study=dataclasses.replace(spec.study, seed=seed))),
    }


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


def noiseless(spec, launcher, params, cache):
    key = json.dumps(params, sort_keys=True)
    if key not in cache:
        r = launcher.launch(TrialRequest(study_name="truth", number=0, params=complete_params(params, spec),
                                         spec=spec, run_dir=Path("/nonexistent")))
        cache[key] = r.extra.get("noiseless_tokens_per_sec_per_gpu", 0.0) if r.status == "ok" else 0.0
    return cache[key]


def run_one(spec, make, seed, truth_cache, launcher, optimum, limit_s):
    study = optuna.create_study(direction="maximize", sampler=make())
    base = baseline_params(spec)
    if base:
        study.enqueue_trial(base, user_attrs={"role": "baseline"})
    spec_seeded = dataclasses.replace(spec, study=dataclasses.replace(spec.study, seed=seed))
    used, curve = 0.0, []           # (gpu-hours used, fraction of optimum recommended)
    best_value, best_params = -1.0, None
    while True:
        trials = study.get_trials(deepcopy=False)
        # the coordinator's own scheduling core, ablation off (this bench scores the search alone)
        admission = scheduling.next_admission(
            ledger_from_trials(trials, limit_s), first_estimate_gpu_seconds=scheduling.first_estimate(spec),
            search_limit_gpu_seconds=limit_s, ablation=False, ablation_planned=False,
            queued=any(t.state == optuna.trial.TrialState.WAITING for t in trials))
        if admission.action != "launch":
            break
        cap = admission.cap_gpu_seconds
        trial = study.ask()
        params = suggest_params(trial, spec)
        trial.set_user_attr("reserved_gpu_seconds", cap)
        request = TrialRequest(study_name="bench", number=trial.number, params=complete_params(params, spec),
                               spec=spec_seeded, run_dir=Path("/nonexistent"), max_gpu_seconds=cap,
                               stop_below_tokens_per_sec_per_gpu=(None if trial.user_attrs.get("role")
                                                                  else adaptive_bar(study, spec)))
        result = launcher.launch(request)
        record_result(study, trial, result)
        used += result.gpu_seconds
        STARTUP_SHARE.append((result.world_size * (result.startup_seconds or 0.0), result.gpu_seconds))
        if result.tokens_per_sec_per_gpu is not None and result.tokens_per_sec_per_gpu > best_value:
            best_value, best_params = result.tokens_per_sec_per_gpu, params
        found = noiseless(spec, launcher, best_params, truth_cache) / optimum if best_params else 0.0
        curve.append((used / 3600, found))
    return curve, len(study.trials)


def summarize(curves):
    def hours_to_target(curve):
        return next((h for h, f in curve if f >= TARGET), math.inf)

    def found_at(curve, h):
        vals = [f for hh, f in curve if hh <= h]
        return vals[-1] if vals else 0.0

    out = {"gpuh_to_98": [hours_to_target(c) for c, _ in curves],
           "configs": [n for _, n in curves]}
    for h in CHECKPOINTS_GPUH:
        out[f"found_at_{h}"] = [found_at(c, h) for c, _ in curves]
    return out


def mean_ci(xs):
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return "never"
    m = statistics.mean(xs)
    if len(xs) < 2:
        return f"{m:.1f}"
    h = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:.2f} ± {h:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget-gpuh", type=float, default=40.0)
    parser.add_argument("--strategies", default="", help="comma list (default: all)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, one cluster")
    parser.add_argument("--clusters", type=int, default=len(SPECS), help="use the first N cluster specs")
    parser.add_argument("--only", default="", help="comma list of cluster names (e.g. sim-llama1b-a100x16)")
    parser.add_argument("--no-adaptive", action="store_true", help="measure every trial fully (spec.trial.adaptive off)")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON")
    args = parser.parse_args()
    seeds = 2 if args.quick else args.seeds
    specs = SPECS[:1] if args.quick else SPECS[: args.clusters]
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if not any(Path(p).stem == w for p in SPECS)]
        if unknown:
            parser.error(f"--only: unknown cluster {', '.join(unknown)}; one of {', '.join(Path(p).stem for p in SPECS)}")
        specs = tuple(p for p in SPECS if Path(p).stem in wanted)
    results = {}
    t0 = time.perf_counter()
    for path in specs:
        spec = load_spec(ROOT / path).with_launcher("sim")
        spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, ablation_share=0.0))
        if args.no_adaptive:
            spec = dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, adaptive=False))
        launcher = SimLauncher(spec)
        cache: dict[str, float] = {}
        configs = list(grid_configs(spec))
        optimum = max(noiseless(spec, launcher, p, cache) for p in configs)
        for name in (args.strategies.split(",") if args.strategies else strategies(spec, 0)):
            curves = []
            for seed in range(seeds):
                make = strategies(spec, seed)[name]
                curves.append(run_one(spec, make, seed, cache, launcher, optimum, args.budget_gpuh * 3600))
                print(f"  {spec.study.name} {name} seed {seed + 1}/{seeds} "
                      f"[{time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)
            results[(spec.study.name, name)] = summarize(curves)
            s = results[(spec.study.name, name)]
            print(f"{spec.study.name:22} {name:18} to98 {mean_ci(s['gpuh_to_98']):>14}  "
                  f"reached {sum(math.isfinite(x) for x in s['gpuh_to_98'])}/{seeds}  "
                  f"found@40 {mean_ci(s['found_at_40'])}  configs {statistics.mean(s['configs']):.0f}  "
                  f"[{time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)
        print(f"{spec.study.name}: {len(configs)} configs in the grid, optimum {optimum:,.0f} tokens/s/GPU",
              file=sys.stderr, flush=True)
    print(f"\n{seeds} seeds per cell; mean ± 95% CI over seeds; GPU-h to 98% counts only seeds that reached it.\n")
    print("| cluster | strategy | GPU-h to 98% of optimum | seeds reaching 98% | found @10 GPU-h | @20 | @40 "
          "| configs / 40 GPU-h |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (cluster, name), s in results.items():
        print(f"| {cluster} | {name} | {mean_ci(s['gpuh_to_98'])} | {sum(math.isfinite(x) for x in s['gpuh_to_98'])}/{seeds} | "
              f"{mean_ci(s['found_at_10'])} | {mean_ci(s['found_at_20'])} | {mean_ci(s['found_at_40'])} | "
              f"{statistics.mean(s['configs']):.0f} |")
    startup = sum(a for a, _ in STARTUP_SHARE) / max(1e-9, sum(b for _, b in STARTUP_SHARE))
    print(f"\nadaptive measurement {'off' if args.no_adaptive else 'on'}: start-up is {startup:.1%} of trial GPU time "
          f"({len(STARTUP_SHARE)} trials)")
    print(f"wall time {time.perf_counter() - t0:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({f"{c}|{n}": s for (c, n), s in results.items()}, default=str, indent=1))


if __name__ == "__main__":
    main()
