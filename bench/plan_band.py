"""The plan's throughput band from held-out error, per GPU kind and scale (helper.band).

    python bench/plan_band.py            # print the held-out table
    python bench/plan_band.py --write    # also store it as quality.held_out in helper/default_calibration.json

Two held-out sets, pooled: every calibration figure predicted by a refit without it (the same
fit as ``bench/validate_model.py --write-default``, leave-one-out), and every published figure
the default calibration never saw (``role="validation"`` in helper/published.py), predicted
with the shipped constants. The shipped constants are left as they are; only
``quality.held_out`` (and a provenance note) is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validate_model import _KNOBS, build_default_calibration  # noqa: E402

from helper import load_calibration, predict_throughput  # noqa: E402
from helper.band import SCALES, held_out_summary  # noqa: E402
from helper.calibration import DEFAULT_CALIBRATION_PATH  # noqa: E402
from helper.gpus import get_gpu  # noqa: E402
from helper.published import PUBLISHED  # noqa: E402

COMMAND = "python bench/plan_band.py --write"


def validation_errors(cal: dict) -> list[tuple[str, int, float]]:
    """(gpu, gpu_count, % error) of every held-out published figure under ``cal``."""
    out = []
    for r in (r for r in PUBLISHED if r["role"] == "validation"):
        kw = {k: r[k] for k in _KNOBS if k in r}
        pred = float(predict_throughput(r.get("model_size", r.get("preset")), r["gpu_count"], calibration=cal, **kw))
        out.append((get_gpu(r["gpu"]).name, r["gpu_count"], 100 * (pred / r["tokens_per_sec_per_gpu"] - 1)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"store quality.held_out in {DEFAULT_CALIBRATION_PATH.name}")
    args = parser.parse_args(argv)
    started = time.monotonic()
    shipped = load_calibration()
    refit = build_default_calibration()  # leave-one-out errors of the calibration figures
    loo = [(g, int(n), float(e)) for g, n, e in refit["quality"]["loo_errors"]]
    val = validation_errors(shipped)
    held = held_out_summary(loo + val)
    print(f"{len(loo)} leave-one-out + {len(val)} held-out published figures ({time.monotonic() - started:.0f} s)\n")
    print("| GPU | scale (GPUs) | n | median abs % | p90 abs % | max abs % |\n|---|---|---:|---:|---:|---:|")
    for gpu, rows in held.items():
        for scale in ["all", *(name for name, _ in SCALES)]:
            if scale in rows:
                r = rows[scale]
                print(f"| {gpu} | {scale} | {r['n']} | {r['median_abs_pct_error']} | {r['p90_abs_pct_error']} "
                      f"| {r['max_abs_pct_error']} |")
    if args.write:
        cal = json.loads(DEFAULT_CALIBRATION_PATH.read_text())
        cal["quality"]["held_out"] = held
        cal["provenance"].setdefault("notes", {})["held_out"] = (
            f"quality.held_out: {len(loo)} leave-one-out predictions of the calibration figures pooled with "
            f"{len(val)} published figures held out of the fit (helper/published.py role 'validation'), per "
            f"GPU kind and scale; the plan's band (helper.band). Command: {COMMAND}")
        DEFAULT_CALIBRATION_PATH.write_text(json.dumps(cal, indent=2) + "\n")
        print(f"\nwrote quality.held_out into {DEFAULT_CALIBRATION_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
