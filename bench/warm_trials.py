"""Warm (resident) trials against cold launches, side by side, on real and simulated studies.

Real: the quickstart (tiny Llama, FSDP2 on 2 gloo CPU processes under torchrun) run by the
real coordinator and local launcher, once per row, each with the same budget and its own
SQLite file: the quickstart spec as it was before warm trials ("today": seq_len 256, 2+8
steps, micro_batch 2/4/8), that spec with warm trials, and the shipped spec cold and warm.
Each row: trials, ok trials, GPU-s charged, configs (ok trials) per GPU-hour, start-up
share of trial GPU time, median cost of a cold-started and of a warm trial.

Sim: `tuner run --study studies/llama7b-h100x32.toml --launcher sim --budget 40gpuh`
cold and warm (the same coordinator code over SQLite files), with ok configs and start-up
share (worker start-up plus in-place reconfiguration, over trial GPU time).

    nice -n 10 python bench/warm_trials.py                    # all rows (~10 min on 2 cores)
    python bench/warm_trials.py --sim-only                    # the sim rows (~1 min)
    python bench/warm_trials.py --sim-only --check            # and check issue 15's figures

`--check` exits 1 unless, at 40 GPU-h: warm start-up share <= 25% < cold's, more ok trials warm
than cold, >= 60 ok configs warm, the best's speedup CI above 1, and the ablation (when the
budget reached it) measured the top knob. These were tests; they are a benchmark's figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.spec import KnobSpace, load_spec  # noqa: E402
from tuner.study import RunOptions, run_study  # noqa: E402


def today_spec(spec):
    """The quickstart as shipped before warm trials (git history of studies/quickstart.toml)."""
    space = tuple(KnobSpace(name="micro_batch", choices=(2, 4, 8)) if k.name == "micro_batch" else k
                  for k in spec.space)
    return dataclasses.replace(
        spec, model=dataclasses.replace(spec.model, seq_len=256), space=space,
        baseline={**spec.baseline, "micro_batch": 4},
        trial=dataclasses.replace(spec.trial, warmup_steps=2, measure_steps=8, estimate_gpu_seconds=40.0))


def run_row(label: str, spec, *, resident: bool, budget_gpu_seconds: float, work: Path, launcher: str | None = None):
    spec = dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, resident=resident))
    if launcher:
        spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, launcher=launcher))
    db = work / f"{label.replace(' ', '_')}.db"
    t0 = time.monotonic()
    run_study(spec, RunOptions(storage_url=f"sqlite:///{db}", budget_gpu_seconds=budget_gpu_seconds,
                               runs_dir=work / "runs" / label.replace(" ", "_")))
    wall_s = time.monotonic() - t0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=spec.study.name, storage=f"sqlite:///{db}")
    done = [t for t in study.trials if t.user_attrs.get("gpu_seconds") is not None
            and t.user_attrs.get("status") != "skipped"]  # skipped: queued, never run
    ok = [t for t in done if t.user_attrs.get("status") == "ok"]
    used = sum(t.user_attrs["gpu_seconds"] for t in done)
    setup = sum(t.user_attrs.get("startup_seconds", 0.0) * t.user_attrs.get("world_size", 0) for t in done)
    if spec.cluster.launcher == "sim":  # the sim's start-up excludes warm-up: count reconfiguration too
        setup = sum(t.user_attrs.get("setup_gpu_seconds", t.user_attrs.get("startup_seconds", 0.0)
                                     * t.user_attrs.get("world_size", 0)) for t in done)
    cold = [t.user_attrs["gpu_seconds"] for t in done if not t.user_attrs.get("warm")]
    warm = [t.user_attrs["gpu_seconds"] for t in done if t.user_attrs.get("warm")]
    return {"row": label, "trials": len(done), "ok": len(ok), "gpu_s": used,
            "ok_per_gpuh": len(ok) / (used / 3600.0) if used else 0.0,
            "startup_share": setup / used if used else 0.0,
            "cold_trial_gpu_s": statistics.median(cold) if cold else None,
            "warm_trial_gpu_s": statistics.median(warm) if warm else None, "wall_s": wall_s}


def print_table(rows, unit: str) -> None:
    print(f"| run | trials | ok | {unit} charged | ok configs / GPU-h | start-up share | median cold trial "
          f"{unit} | median warm trial {unit} | wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    scale = 3600.0 if unit == "GPU-h" else 1.0
    for r in rows:
        def fmt(v):
            return "-" if v is None else f"{v / scale:.2f}" if unit == "GPU-h" else f"{v:.1f}"
        print(f"| {r['row']} | {r['trials']} | {r['ok']} | {fmt(r['gpu_s'])} | {r['ok_per_gpuh']:.1f} | "
              f"{r['startup_share']:.0%} | {fmt(r['cold_trial_gpu_s'])} | {fmt(r['warm_trial_gpu_s'])} | "
              f"{r['wall_s']:.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-gpu-seconds", type=float, default=288.0, help="per real row (default 0.08 GPU-h)")
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--real-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the sim rows meet issue 15's figures")
    ap.add_argument("--sampler", default=None,
                    help="the sim rows' sampler (default: the spec's, `auto`: the model-guided one for that spec)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="warm-bench-") as tmp:
        work = Path(tmp)
        if not args.sim_only:
            quick = load_spec(ROOT / "studies/quickstart.toml")
            rows = []
            for label, spec, resident in (("today's quickstart, cold", today_spec(quick), False),
                                          ("today's quickstart, warm", today_spec(quick), True),
                                          ("shipped quickstart, cold", quick, False),
                                          ("shipped quickstart, warm", quick, True)):
                rows.append(run_row(label, spec, resident=resident, budget_gpu_seconds=args.budget_gpu_seconds,
                                    work=work))
                print(rows[-1], flush=True)
            print(f"\nreal: quickstart, {args.budget_gpu_seconds:g} GPU-s per row, 2 gloo ranks on CPU\n")
            print_table(rows, "GPU-s")
        if not args.real_only:
            big = load_spec(ROOT / "studies/llama7b-h100x32.toml")
            if args.sampler:
                big = dataclasses.replace(big, study=dataclasses.replace(big.study, sampler=args.sampler))
            rows = [run_row(f"7B x 32 sim, {'warm' if r else 'cold'}", big, resident=r,
                            budget_gpu_seconds=40 * 3600.0, work=work, launcher="sim") for r in (False, True)]
            print(f"\nsim: llama7b-h100x32, 40 GPU-h, sampler {big.study.sampler}\n")
            print_table(rows, "GPU-h")
            if args.check:
                problems = check_sim_rows(rows, big, work)
                print("\ncheck: " + ("ok" if not problems else "FAILED\n  " + "\n  ".join(problems)))
                return 1 if problems else 0
    return 0


def check_sim_rows(rows, spec, work: Path) -> list[str]:
    """Issue 15's figures on the 40 GPU-h sim rows (cold, warm): what fails, one line each."""
    from tuner.stats import analyze_study

    cold, warm = rows
    problems = []
    if not warm["startup_share"] <= 0.25 < cold["startup_share"]:
        problems.append(f"start-up share warm {warm['startup_share']:.0%} cold {cold['startup_share']:.0%}: "
                        "want warm <= 25% < cold")
    if not warm["ok"] > cold["ok"]:
        problems.append(f"ok trials warm {warm['ok']} <= cold {cold['ok']}")
    db = work / f"{warm['row'].replace(' ', '_')}.db"
    study = optuna.load_study(study_name=spec.study.name, storage=f"sqlite:///{db}")
    configs = {str(sorted(t.params.items())) for t in study.trials
               if t.state.name == "COMPLETE" and t.user_attrs.get("status") == "ok"}
    if len(configs) < 60:
        problems.append(f"{len(configs)} ok configs warm: want >= 60")
    analysis = analyze_study(study, n_boot=10)
    if not analysis["best"]["speedup_vs_baseline"]["ci95"][0] > 1.0:
        problems.append(f"best's speedup CI {analysis['best']['speedup_vs_baseline']['ci95']}: want above 1")
    ablated = [k["knob"] for k in (analysis.get("ablation") or {}).get("knobs", [])]
    if ablated and analysis["top_knobs"][0] not in ablated:
        problems.append(f"the ablation measured {ablated}, not the top knob {analysis['top_knobs'][0]}")
    return problems


if __name__ == "__main__":
    raise SystemExit(main())
