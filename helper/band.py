"""The throughput band a plan states: held-out error, per GPU kind and job scale.

A band is only honest when it comes from predictions of figures the fit did not see. Two such
sets exist: each calibration figure predicted by a refit without it (leave-one-out,
:func:`helper.fitting.fit_calibration` with ``cross_validate``), and the published figures held
out of the fit altogether (the 7B/13B rows of :mod:`helper.published`). ``bench/plan_band.py``
pools them into the calibration's ``quality.held_out``: per GPU kind and per scale (one node,
up to 64 GPUs, more), the count and the 90th percentile of the absolute error. The in-sample
error is never used: it measures how well the fit remembers, not how well it predicts.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

__all__ = ["SCALES", "MIN_HELD_OUT", "scale_of", "held_out_summary", "band_pct"]

SCALES = (("1-8", 8), ("9-64", 64), ("65+", 10**9))
"""Scale buckets by GPU count: one node, a few to eight nodes, more (NCCL's rings cross more NICs)."""
MIN_HELD_OUT = 5
"""Fewer held-out figures than this in a bucket: the GPU's band over all scales is used, or the
bucket's worst miss if that is wider."""


def scale_of(gpu_count: int) -> str:
    """The scale bucket of a job.

    Example:
        >>> scale_of(8), scale_of(32), scale_of(256)
        ('1-8', '9-64', '65+')
    """
    return next(name for name, top in SCALES if gpu_count <= top)


def _p90(values: list[float]) -> float:
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = 0.9 * (len(s) - 1)
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


def held_out_summary(errors: Iterable[tuple[str, int, float]]) -> dict[str, Any]:
    """``{gpu: {"all": {...}, scale: {...}}}`` from ``(gpu, gpu_count, % error)`` of held-out predictions.

    Each entry holds ``n``, ``p90_abs_pct_error``, ``max_abs_pct_error`` and
    ``median_abs_pct_error``.

    Example:
        >>> s = held_out_summary([("H100-80GB", 8, 2.0), ("H100-80GB", 8, -4.0), ("H100-80GB", 32, 12.0)])
        >>> s["H100-80GB"]["1-8"]["n"], s["H100-80GB"]["all"]["max_abs_pct_error"]
        (2, 12.0)
    """
    by: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for gpu, count, err in errors:
        by[gpu]["all"].append(abs(err))
        by[gpu][scale_of(int(count))].append(abs(err))
    return {gpu: {k: {"n": len(v), "p90_abs_pct_error": round(_p90(v), 2), "max_abs_pct_error": round(max(v), 2),
                      "median_abs_pct_error": round(statistics.median(v), 2)} for k, v in sorted(groups.items())}
            for gpu, groups in sorted(by.items())}


def band_pct(cal: dict[str, Any], gpu: str, gpu_count: int) -> tuple[float, str]:
    """(half-width of the band in %, where it comes from) for a job of ``gpu_count`` x ``gpu``.

    The held-out 90th percentile of the job's GPU kind and scale, or of the GPU kind over all
    scales when that is wider (a scale holds a few figures); when the scale has fewer than
    :data:`MIN_HELD_OUT` figures, the GPU's over all scales or the scale's worst miss, whichever is
    wider; the widest band of any GPU when the GPU has none.

    Example:
        >>> cal = {"quality": {"held_out": held_out_summary([("H100-80GB", 8, e) for e in (1, 2, 3, 4, 10)])}}
        >>> band_pct(cal, "H100-80GB", 8)[0], band_pct(cal, "H100-80GB", 64)[0]
        (7.6, 7.6)
    """
    held = ((cal.get("quality") or {}).get("held_out") or {})
    if not held:
        return 15.0, ("no held-out error in this calibration: +/-15 %, an allowance, not a measurement "
                      "(run bench/plan_band.py)")
    scale = scale_of(gpu_count)
    rows = held.get(gpu)
    if not rows:
        widest = max((r[k]["p90_abs_pct_error"], g, k) for g, r in held.items() for k in r)
        return widest[0], (f"no held-out figure on {gpu}: the widest held-out band measured "
                           f"({widest[1]}, {widest[2]} GPUs)")
    here = rows.get(scale)
    overall = rows["all"]
    if here and here["n"] >= MIN_HELD_OUT:  # never narrower than the GPU's own: a bucket is a few figures
        pct = max(here["p90_abs_pct_error"], overall["p90_abs_pct_error"])
        return pct, (f"90th percentile of held-out {gpu} figures: {here['p90_abs_pct_error']:.1f} % of {here['n']} "
                     f"at {scale} GPUs, {overall['p90_abs_pct_error']:.1f} % of {overall['n']} at all scales; "
                     "the wider")
    worst = here["max_abs_pct_error"] if here else 0.0
    return max(overall["p90_abs_pct_error"], worst), (
        f"90th percentile of {overall['n']} held-out {gpu} figures at all scales"
        + (f" (only {here['n']} at {scale} GPUs, worst {worst:.1f} %)" if here else f" (none at {scale} GPUs)"))
