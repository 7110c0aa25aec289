"""How often tuner's 95% intervals cover the truth, on step series with known means.

    python bench/ci_coverage.py                 # the table of docs/benchmarks.md
    python bench/ci_coverage.py --reps 500      # quicker, coarser

Step-to-step variation of a training job is autocorrelated (data-loader hiccups, contention
that lasts a few steps), so each series here is AR(1) around a known mean with a 5% marginal
standard deviation. For each autocorrelation phi and number of measured steps it reports the
coverage of the per-trial CI (`tuner.analysis.mean_ci`, batch means), of the speedup CI
(`ratio_ci`, two independent series with a true ratio of 1.5), and, for contrast, of the
i.i.d. t-interval that ignores the autocorrelation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.analysis import mean_ci, ratio_ci  # noqa: E402


def ar1(rng: np.random.Generator, n: int, mean: float, phi: float, rel_sd: float = 0.05) -> np.ndarray:
    """n steps of a stationary AR(1) series with the given mean and marginal relative sd."""
    e = np.empty(n)
    e[0] = rng.normal()
    for t in range(1, n):
        e[t] = phi * e[t - 1] + math.sqrt(1 - phi * phi) * rng.normal()
    return mean * (1 + rel_sd * e)


def iid_covers(x: np.ndarray, truth: float) -> bool:
    half = stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return abs(np.mean(x) - truth) <= half


def coverage(phi: float, steps: int, reps: int, rng: np.random.Generator) -> tuple[float, float, float]:
    mean_hits = ratio_hits = iid_hits = 0
    for _ in range(reps):
        base, fast = ar1(rng, steps, 1000.0, phi), ar1(rng, steps, 1500.0, phi)
        lo, hi = mean_ci(base)["ci95"]
        mean_hits += lo <= 1000.0 <= hi
        lo, hi = ratio_ci(mean_ci(fast), mean_ci(base))["ci95"]
        ratio_hits += lo <= 1.5 <= hi
        iid_hits += iid_covers(base, 1000.0)
    return mean_hits / reps, ratio_hits / reps, iid_hits / reps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="series per cell (default 2000)")
    parser.add_argument("--phis", default="0,0.5,0.8", help="AR(1) coefficients, comma list")
    parser.add_argument("--steps", default="8,16,40", help="measured steps per trial, comma list")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    print(f"{args.reps} series per cell; nominal coverage 95%; Monte Carlo sd about "
          f"{math.sqrt(0.95 * 0.05 / args.reps):.1%}\n")
    print("| AR(1) phi | measured steps | per-trial CI (batch means) | speedup CI (delta method) | i.i.d. t-interval |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for phi in (float(p) for p in args.phis.split(",")):
        for steps in (int(s) for s in args.steps.split(",")):
            m, r, i = coverage(phi, steps, args.reps, rng)
            print(f"| {phi:g} | {steps} | {m:.3f} | {r:.3f} | {i:.3f} |")
    print(f"\nwall time {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
