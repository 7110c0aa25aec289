"""helper's host-dispatch floor against the GPU kit's measurements and the H200 study's trials.

    python bench/host_dispatch.py          # about 2 s; prints both tables

The floor's two constants (helper.stacks: ``dispatch_s_per_layer``, ``dispatch_recompute_share``)
were read from the H100 kit's micro-batch 1 and 2 rows (2026-11-27); the H200 kit (2026-11-28)
and the study on the H200 (studies/llama1b-gpu1.toml) are held out. Each row: measured
tokens/s/GPU over helper's, with the floor and with the same stack without it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helper import estimate_padding_efficiency, predict_throughput  # noqa: E402
from helper.stacks import get_stack  # noqa: E402

KITS = (("docs/gpu_check/2026-11-27-h100-full.json", "H100-80GB", "fit"),
        ("docs/gpu_check/2026-11-27-h100-rest.json", "H100-80GB", "fit"),
        ("docs/gpu_check/2026-11-28-h200.json", "H200-141GB", "held out"))
STUDY = "docs/gpu_check/2026-11-28-h200-study-trials.csv"


def _pair(gpu: str, attention: str | None = None, **kw) -> tuple[float, float]:
    """(with the floor, without it) for llama-1b on one GPU."""
    stack = get_stack("hf-eager" if attention == "eager" else "hf-sdpa")
    off = dataclasses.replace(stack, dispatch_s_per_layer=0.0)
    return tuple(float(predict_throughput("llama-1b", 1, gpu=gpu, seq_len=2048, stack=s, **kw)) for s in (stack, off))


def kit_rows() -> list[dict]:
    rows = []
    for path, gpu, role in KITS:
        for r in json.loads((ROOT / path).read_text())["checks"]["throughput"]["result"]["rows"]:
            if r.get("status") != "ok" or r["params"]["padding"] != "packed":
                continue  # padding rows measure the padding estimate, not the step
            p = r["params"]
            new, old = _pair(gpu, r.get("attention"), micro_batch=p["micro_batch"],
                             activation_checkpointing=p["activation_checkpointing"], num_workers=2, prefetch_factor=2,
                             padding_efficiency=estimate_padding_efficiency("packed", seq_len=2048,
                                                                            micro_batch=p["micro_batch"]))
            rows.append({"gpu": gpu, "role": role, "config": r["name"], "measured": r["tokens_per_sec_per_gpu"],
                         "with": new, "without": old})
    return rows


def study_errors() -> dict[int, tuple[list[float], list[float]]]:
    """Micro-batch -> (% errors with the floor, without), the study's ok packed trials."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    with open(ROOT / STUDY) as f:
        for r in csv.DictReader(f):
            if r["state"] != "ok" or r["padding"] != "packed":
                continue
            w = int(r["num_workers"])
            new, old = _pair("H200-141GB", micro_batch=int(r["micro_batch"]), grad_accum=int(r["grad_accum"]),
                             activation_checkpointing=r["activation_checkpointing"] == "True", num_workers=w,
                             prefetch_factor=2 if w else None)
            m = float(r["tokens_per_sec_per_gpu"])
            e = out.setdefault(int(r["micro_batch"]), ([], []))
            e[0].append(100 * (new / m - 1))
            e[1].append(100 * (old / m - 1))
    return out


def main() -> None:
    print("| GPU | role | config | measured | helper | measured/helper | without the floor | measured/helper |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in kit_rows():
        print(f"| {r['gpu']} | {r['role']} | {r['config']} | {r['measured']:,.0f} | {r['with']:,.0f} | "
              f"{r['measured'] / r['with']:.2f} | {r['without']:,.0f} | {r['measured'] / r['without']:.2f} |")
    errs = study_errors()
    print("\n| micro-batch | trials | median error, with the floor | without | max abs error, with | without |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    every: tuple[list[float], list[float]] = ([], [])
    for mb in sorted(errs):
        new, old = errs[mb]
        every[0].extend(new)
        every[1].extend(old)
        print(f"| {mb} | {len(new)} | {statistics.median(new):+.1f}% | {statistics.median(old):+.1f}% | "
              f"{max(map(abs, new)):.1f}% | {max(map(abs, old)):.1f}% |")
    new, old = every
    print(f"| all | {len(new)} | median abs {statistics.median(map(abs, new)):.1f}% | "
          f"{statistics.median(map(abs, old)):.1f}% | {max(map(abs, new)):.1f}% | {max(map(abs, old)):.1f}% |")
    print(f"\nwithin 10%: {sum(abs(e) <= 10 for e in new)} of {len(new)} with the floor, "
          f"{sum(abs(e) <= 10 for e in old)} without")


if __name__ == "__main__":
    main()
