"""The statistics benchmark's families and their known truth.

A family is a knob space, the team's baseline config, each config's true long-run
tokens/s/GPU (``truth``: the estimand, the rate of a full job, over launches), each config's
true failure probability, the knobs without any effect, and the noise its runs carry
(bench/stats_noise.py; rotated over a family's studies where it lists several).

The *standard* truth (families ``ar1``, ``launch-variance``, ``stalls``, ``drift``,
``no-warmup``): micro_batch 1/2/4 x 1.00/1.12/1.25, num_workers 0/2/4 x 1.00/1.12/1.14,
packed padding x 1.05; prefetch_factor (conditional on num_workers > 0), nccl_proto and
grad_accum have no effect. Families:

- ``ar1`` (plain control): AR(1) step noise, 5% sd, phi 0 / 0.5 / 0.8 rotated; launches 2% sd.
- ``launch-variance``: launches 4% sd (node placement), steps 1% sd (phi 0.5).
- ``stalls``: every 4th-6th step 2-3x slower (bench/stats_noise.py), steps 2% sd.
- ``drift``: throughput falls 5-10% over the measured steps towards its plateau, steps 2% sd.
- ``no-warmup``: AR(1) 5% sd, phi 0.5 / 0.8 / 0.9, and no warm-up in the measured steps:
  every step MSER drops is a false positive.
- ``three-way``: +35% only at micro_batch 4 with activation checkpointing and no DataLoader
  workers (one corner); small main effects beside it (micro_batch +5%/+8%, checkpointing
  -3%, packed +4%); nccl_proto and grad_accum without effect. AR(1) 3% sd.
- ``concentrated-failures``: micro_batch 1/2/4/8 x 1.00/1.10/1.20/1.50, checkpointing x 0.95,
  num_workers > 0 x 1.12, packed x 1.05, nccl_proto without effect; micro_batch 8 fails 50% of
  its runs with checkpointing, 100% without. The fastest reliable config is micro_batch 4
  without checkpointing; micro_batch 8 with checkpointing is 19% faster and fails half its
  runs. AR(1) 3% sd.
- ``crossover``, ``conditional``, ``small``, ``failures``: bench/families.py, their steps
  from bench/noise_families.py's families rotated over studies, launches 2% sd.

Every family searches 60 trials (``small``: 12) after the baseline.

Example:
    >>> fam = FAMILIES["three-way"]
    >>> effects = one_knob_effects(fam)
    >>> sorted(k for k, e in effects.items() if e >= 0.10), effects["nccl_proto"]
    (['activation_checkpointing', 'micro_batch', 'num_workers'], 0.0)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import families as legacy
from bench.noise_families import FAMILIES as LEGACY_NOISES
from bench.stats_noise import Noise
from bench.tuner_api import FLAKY_FAILURE_RATE, config_key, knob_catalogue

__all__ = ["Family", "FAMILIES", "configs", "active", "optimum", "one_knob_effects", "EFFECT_THRESHOLD"]

EFFECT_THRESHOLD = 0.10
"""A knob whose one-knob change at the optimum moves throughput by this much must be in What
matters (issue 29)."""


def _never(params: dict[str, Any]) -> float:
    return 0.0


@dataclass(frozen=True, kw_only=True, eq=False)   # compared and cached by identity
class Family:
    name: str
    space: dict[str, list[Any]]
    baseline: dict[str, Any]
    truth: Callable[[dict[str, Any]], float]
    """params -> true long-run tokens/s/GPU."""
    placebo: frozenset[str]
    """Knobs on which the truth does not depend at all."""
    noises: tuple[Noise, ...]
    """Rotated over the family's studies."""
    n_search: int = 60
    p_fail: Callable[[dict[str, Any]], float] = _never
    """params -> the probability that a run of it fails (oom)."""
    favour: tuple[str, Any, float] | None = None
    """(knob, level, probability): random draws pick that level with that probability."""

    def noise(self, study: int) -> Noise:
        return self.noises[study % len(self.noises)]


def active(params: dict[str, Any], space: dict[str, list[Any]]) -> dict[str, Any]:
    """``params`` with conditional knobs that do not apply dropped and those that now apply set
    to their first level (tuner.knobs' rules)."""
    out = dict(params)
    for name in knob_catalogue.ordered(list(space)):
        if not knob_catalogue.is_active(name, out):
            out.pop(name, None)
        elif name not in out:
            out[name] = space[name][0]
    return {k: out[k] for k in space if k in out}


@functools.cache
def _configs(fam: Family) -> tuple[dict[str, Any], ...]:
    space = fam.space
    seen: dict[str, dict[str, Any]] = {}
    for combo in itertools.product(*space.values()):
        p = active(dict(zip(space, combo)), space)
        seen.setdefault(config_key(p), p)
    return tuple(seen.values())


def configs(fam: Family) -> list[dict[str, Any]]:
    """Every distinct config of the family's space (conditional knobs only where they apply)."""
    return [dict(p) for p in _configs(fam)]


def optimum(fam: Family) -> dict[str, Any]:
    """The config with the highest true rate among those that fail less than tuner's flaky
    threshold (25%): what a study should recommend."""
    return max((p for p in configs(fam) if fam.p_fail(p) < FLAKY_FAILURE_RATE), key=fam.truth)


def one_knob_effects(fam: Family) -> dict[str, float]:
    """knob -> the largest |truth(optimum with that knob changed) / truth(optimum) - 1| over
    the knob's other levels (0 for a conditional knob that does not apply at the optimum)."""
    best = optimum(fam)
    out = {}
    for knob, levels in fam.space.items():
        moves = [abs(fam.truth(active({**best, knob: v}, fam.space)) / fam.truth(best) - 1.0)
                 for v in levels if knob in best and v != best[knob]]
        out[knob] = max(moves, default=0.0)
    return out


# ------------------------------------------------------------------------------ families

_STANDARD_SPACE = {"micro_batch": [1, 2, 4], "num_workers": [0, 2, 4], "prefetch_factor": [2, 4],
                   "padding": ["max_length", "packed"], "nccl_proto": ["default", "Simple", "LL"],
                   "grad_accum": [1, 2, 4, 8]}
_STANDARD_BASELINE = {"micro_batch": 1, "num_workers": 0, "padding": "max_length", "nccl_proto": "default",
                      "grad_accum": 1}
_STANDARD_PLACEBO = frozenset({"prefetch_factor", "nccl_proto", "grad_accum"})


def _standard(p: dict[str, Any]) -> float:
    return 1000.0 * {1: 1.0, 2: 1.12, 4: 1.25}[p["micro_batch"]] * {0: 1.0, 2: 1.12, 4: 1.14}[p["num_workers"]] \
        * (1.05 if p["padding"] == "packed" else 1.0)


def _three_way(p: dict[str, Any]) -> float:
    corner = p["micro_batch"] == 4 and p["activation_checkpointing"] and p["num_workers"] == 0
    return 1000.0 * {1: 1.0, 2: 1.05, 4: 1.08}[p["micro_batch"]] * (0.97 if p["activation_checkpointing"] else 1.0) \
        * (1.04 if p["padding"] == "packed" else 1.0) * (1.35 if corner else 1.0)


def _concentrated(p: dict[str, Any]) -> float:
    return 1000.0 * {1: 1.0, 2: 1.10, 4: 1.20, 8: 1.50}[p["micro_batch"]] \
        * (0.95 if p["activation_checkpointing"] else 1.0) * (1.12 if p["num_workers"] > 0 else 1.0) \
        * (1.05 if p["padding"] == "packed" else 1.0)


def _concentrated_fail(p: dict[str, Any]) -> float:
    if p["micro_batch"] != 8:
        return 0.0
    return 0.5 if p["activation_checkpointing"] else 1.0


def _standard_family(name: str, *noises: Noise) -> Family:
    return Family(name=name, space=_STANDARD_SPACE, baseline=_STANDARD_BASELINE, truth=_standard,
                  placebo=_STANDARD_PLACEBO, noises=noises)


def _legacy(name: str) -> Family:
    f = legacy.FAMILIES[name]
    return Family(name=name, space=f["space"], baseline=f["baseline"], truth=f["truth"],
                  placebo=frozenset(f["placebo"]), n_search=f["n_search"], p_fail=f.get("p_fail", _never),
                  favour=f.get("favour"), noises=tuple(Noise(kind="legacy", legacy=n) for n in LEGACY_NOISES))


_QUIET = {"rel_sd": 0.02, "phi": 0.5, "run_to_run_sd": 0.02}
_FAMILIES = [
    _standard_family("ar1", *(Noise(kind="ar1", rel_sd=0.05, phi=phi) for phi in (0.0, 0.5, 0.8))),
    _standard_family("launch-variance", Noise(kind="ar1", rel_sd=0.01, phi=0.5, run_to_run_sd=0.04)),
    _standard_family("stalls", Noise(kind="stalls", **_QUIET)),
    _standard_family("drift", Noise(kind="drift", **_QUIET)),
    _standard_family("no-warmup", *(Noise(kind="ar1", rel_sd=0.05, phi=phi) for phi in (0.5, 0.8, 0.9))),
    Family(name="three-way",
           space={"micro_batch": [1, 2, 4], "activation_checkpointing": [False, True], "num_workers": [0, 2],
                  "padding": ["max_length", "packed"], "nccl_proto": ["default", "Simple", "LL"],
                  "grad_accum": [1, 2, 4, 8]},
           baseline={"micro_batch": 1, "activation_checkpointing": False, "num_workers": 2, "padding": "max_length",
                     "nccl_proto": "default", "grad_accum": 1},
           truth=_three_way, placebo=frozenset({"nccl_proto", "grad_accum"}),
           noises=(Noise(kind="ar1", rel_sd=0.03, phi=0.5),)),
    Family(name="concentrated-failures",
           space={"micro_batch": [1, 2, 4, 8], "activation_checkpointing": [False, True], "num_workers": [0, 2],
                  "padding": ["max_length", "packed"], "nccl_proto": ["default", "Simple", "LL"]},
           baseline={"micro_batch": 1, "activation_checkpointing": True, "num_workers": 0, "padding": "max_length",
                     "nccl_proto": "default"},
           truth=_concentrated, p_fail=_concentrated_fail, placebo=frozenset({"nccl_proto"}),
           noises=(Noise(kind="ar1", rel_sd=0.03, phi=0.5),)),
    *(_legacy(n) for n in ("crossover", "conditional", "small", "failures")),
]
FAMILIES: dict[str, Family] = {f.name: f for f in _FAMILIES}
