"""The recommendation's choice rule replayed on the same studies: which runs choose.

The analysis holds the later half of each re-measured config's runs out of the choice (they
report its numbers: tuner.stats' ``confirmation_runs``, issue 29's winner's curse). Each study
here runs once through the search benchmark's pipeline (bench/surface_pipeline.py, the
model-guided sampler, as bench/search_surfaces.py runs it) and is then analysed twice from the
same trials: as shipped (``split``) and with every re-measurement choosing (``all``). The
choice is analysis-time only, so the replay is exact: ``split`` equals the pipeline's own score.
Scores are the recommended config's true tokens/s/GPU over the true optimum.

    python bench/choice_replay.py --truths 7b-h100x32,fp:7b-h100x32 --seeds 8 --launcher warm --log LOG
    python bench/choice_replay.py --summarize LOG
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.search_surfaces import make_truth  # noqa: E402
from bench.surface_pipeline import run_strategy  # noqa: E402
from tuner.stats import analyze_study  # noqa: E402

__all__ = ["replay_one", "summarize", "main"]


def replay_one(truth_name: str, seed: int, *, resident: bool, budget_gpuh: float = 40.0,
               cpu_limit_s: float | None = 240.0) -> dict:
    """One study of the model-guided sampler: {"truth", "seed", "bench" (the pipeline's score),
    "split", "all"} (scores under each choice rule)."""
    spec, truth, labels = make_truth(truth_name, seed)
    kept: dict = {}

    def keep(study, truth_of):
        kept.update(study=study, truth_of=truth_of)

    run = run_strategy(spec, truth, "model", labels["optimum_tokens_per_sec_per_gpu"], labels["optimum"],
                       seed=seed, resident=resident, budget_gpuh=budget_gpuh, cpu_limit_s=cpu_limit_s, on_study=keep)
    opt = labels["optimum_tokens_per_sec_per_gpu"]
    out = {"truth": truth_name, "seed": seed, "launcher": "warm" if resident else "cold", "bench": run["share"]}
    for name, hold_out in (("split", True), ("all", False)):
        best = analyze_study(kept["study"], n_boot=0, hold_out=hold_out).get("best")
        out[name] = kept["truth_of"](best["params"]) / opt if best else 0.0
    return out


def summarize(rows: list[dict]) -> str:
    """Studies reaching 99% of the optimum under each rule, and the studies the rules split."""
    lines = [f"{len(rows)} studies: >= 99% of the optimum with the later half held out (as shipped) "
             f"{sum(r['split'] >= 0.99 for r in rows)}, with every run choosing {sum(r['all'] >= 0.99 for r in rows)}"]
    for r in rows:
        if abs(r["split"] - r["all"]) > 1e-9:
            lines.append(f"  {r['truth']} {r['launcher']} seed {r['seed']}: {r['split']:.4f} -> {r['all']:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="7b-h100x32,7b-a100x16,fp:7b-h100x32,fp:1b-a100x16",
                        help="comma list of KIND or fp:KIND (bench/search_surfaces.py)")
    parser.add_argument("--seeds", type=int, default=8, help="seeds 0 .. N-1 per truth")
    parser.add_argument("--launcher", choices=("cold", "warm"), default="warm")
    parser.add_argument("--cpu-limit-s", type=float, default=240.0)
    parser.add_argument("--log", type=Path, help="append each study's scores here as a JSON line")
    parser.add_argument("--summarize", nargs="+", type=Path, help="only summarise these logs")
    args = parser.parse_args(argv)
    if args.summarize:
        print(summarize([json.loads(line) for p in args.summarize for line in p.read_text().splitlines() if line]))
        return
    rows = []
    for seed in range(args.seeds):
        for truth_name in args.truths.split(","):
            row = replay_one(truth_name, seed, resident=args.launcher == "warm", cpu_limit_s=args.cpu_limit_s)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.log:
                with args.log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(summarize(rows))


if __name__ == "__main__":
    main()
