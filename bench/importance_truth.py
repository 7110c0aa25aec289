"""The true total- and first-order indices of a synthetic family (bench/families.py),
what tuner.stats's CIs are judged against.

The truth is the Sobol decomposition of the family's true log tokens/s/GPU over the
distribution its ok search trials are drawn from (each knob's levels uniform and independent,
a favoured level as the family favours it, times the chance the config survives), computed
exactly by enumerating pairs of configs, with tuner.stats's own definitions: a knob is
moved together with the knobs conditional on it (num_workers with prefetch_factor); a
conditional knob is moved only where it applies, its index scaled by that share. A knob
without an effect (the family's placebo knobs, prefetch_factor) has 0 and 0.

    >>> t = true_indices("crossover")
    >>> round(t["nccl_algo"][1], 3), t["grad_accum"]        # a pure crossover: no main effect
    (0.0, (0.0, 0.0))
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from bench.families import FAMILIES
from bench.tuner_api import knob_catalogue


def _distribution(fam: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    space, favour = fam["space"], fam.get("favour")
    p_fail = fam.get("p_fail", lambda p: 0.0)
    out = []
    for combo in itertools.product(*space.values()):
        p = dict(zip(space, combo))
        w = 1.0
        for k, v in p.items():
            if favour and k == favour[0]:
                w *= favour[2] if v == favour[1] else (1 - favour[2]) / (len(space[k]) - 1)
            else:
                w /= len(space[k])
        if "prefetch_factor" in p and p.get("num_workers", 0) == 0:
            del p["prefetch_factor"]
        out.append((p, w * (1.0 - p_fail(p))))
    total = sum(w for _, w in out)
    return [(p, w / total) for p, w in out]


def _block(knob: str, names: list[str]) -> list[str]:
    kids = [k for k in names if k in knob_catalogue.KNOBS and (knob_catalogue.KNOBS[k].active_when or ("",))[0] == knob]
    return [knob, *kids]


@functools.cache
def true_indices(family: str) -> dict[str, tuple[float, float]]:
    """{knob: (total-order, first-order)} of the family's truth (module docstring)."""
    fam = FAMILIES[family]
    dist = _distribution(fam)
    f = np.array([math.log(fam["truth"](p)) for p, _ in dist])
    w = np.array([w for _, w in dist])
    mean = float(w @ f)
    var = float(w @ (f - mean) ** 2)
    names = list(fam["space"])
    out: dict[str, tuple[float, float]] = {}
    no_effect = set(fam["placebo"]) | {k for k in names if k in knob_catalogue.KNOBS
                                       and knob_catalogue.KNOBS[k].active_when is not None}
    for knob in names:
        if knob in no_effect:
            out[knob] = (0.0, 0.0)
            continue
        block = _block(knob, names)
        tot = fst = 0.0
        for (x, wx), fx in zip(dist, f):
            for (z, wz), fz in zip(dist, f):
                xt = {k: v for k, v in x.items() if k not in block}
                xt.update({k: z[k] for k in block if k in z})
                ft = math.log(fam["truth"](xt))
                tot += wx * wz * (fx - ft) ** 2 / 2
                fst += wx * wz * (fz - ft) ** 2 / 2
        out[knob] = (float(tot / var), float(max(var - fst, 0.0) / var))
    return out
