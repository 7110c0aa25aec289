"""How often tuner's 95% per-trial intervals cover the truth, on studies with known truth.

    python bench/ci_coverage.py                       # the table of docs/statistics.md
    python bench/ci_coverage.py --studies 10          # quicker, coarser

A study here is ``--trials`` trials (true rates spread 500-2,000 tokens/s/GPU) sharing one
noise family (bench/noise_families.py: AR(1) phi 0/0.5/0.8/0.9, t(3), 3% stragglers, a
warm-up leak). The truth is each trial's tokens over time. Side by side:

- **pooled** (today's, tuner.stats): ratio of sums, REML AR(1) noise model pooled over
  the study's trials, moderated variance, MSER warm-up truncation;
- **batch means** (the method before issue 12): mean of per-step rates, ~sqrt(n) batch
  means, t-quantile with batches - 1 df, judged against the same truth.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from noise_families import FAMILIES, step_series  # noqa: E402

from tuner.stats import study_trial_cis  # noqa: E402


def before_ci(values: np.ndarray) -> tuple[float, float] | None:
    """The per-trial CI before issue 12, verbatim in effect: mean of rates over the first
    batches x size steps, ~sqrt(n) batches, t with batches - 1 df."""
    from scipy import stats

    n = len(values)
    if n < 4:
        return None
    size = max(1, int(math.sqrt(n)))
    k = n // size
    batches = values[: k * size].reshape(k, size).mean(axis=1)
    mean = batches.mean()
    half = float(stats.t.ppf(0.975, k - 1)) * batches.std(ddof=1) / math.sqrt(k)
    return mean - half, mean + half


def coverage(family: str, steps: int, studies: int, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """Coverage of both methods and the pooled method's median relative half-width."""
    hits_new = hits_old = total = 0
    widths = []
    for _ in range(studies):
        truths = rng.uniform(500.0, 2000.0, trials)
        series = [step_series(rng, family, steps, t) for t in truths]
        cis = study_trial_cis([r for r, _, _ in series], [s for _, s, _ in series])
        for (rates, _, truth), ci in zip(series, cis):
            total += 1
            hits_new += ci is not None and ci.low <= truth <= ci.high
            if ci is not None:
                widths.append((ci.high - ci.low) / 2 / ci.mean)
            old = before_ci(rates)
            hits_old += old is not None and old[0] <= truth <= old[1]
    return {"new": hits_new / total, "old": hits_old / total, "half_width": float(np.median(widths))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=30, help="studies per cell (default 30)")
    parser.add_argument("--trials", type=int, default=60, help="trials per study (default 60)")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma list of noise families")
    parser.add_argument("--steps", default="8,16,40", help="measured steps per trial, comma list")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    n = args.studies * args.trials
    print(f"{args.studies} studies x {args.trials} trials per cell; nominal 95%; Monte Carlo sd about "
          f"{math.sqrt(0.95 * 0.05 / n):.1%} (more: trials in a study share a noise estimate)\n")
    print("| noise | measured steps | pooled ratio-of-sums CI (now) | median half-width | batch means (before) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for family in args.families.split(","):
        for steps in (int(s) for s in args.steps.split(",")):
            c = coverage(family, steps, args.studies, args.trials, rng)
            print(f"| {family} | {steps} | {c['new']:.3f} | {c['half_width']:.1%} | {c['old']:.3f} |", flush=True)
    print(f"\nwall time {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
