"""Random throughput surfaces whose structure is not helper's: a seeded effect program.

A surface is a made-up cluster for one cluster kind (model, GPU, world size, the spec's grid of
knob levels). Its log tokens/s/GPU is a sum drawn at random, never from helper:

    log tps = log base + sum of main effects + pairwise interactions + three-way corners

- **which knobs matter**: each knob of the space matters with probability :data:`P_MATTERS`;
- **main effects**: a knob's size (the log-range over its levels) is log-uniform in
  :data:`MAIN_SIZE`; an ordered knob's shape is linear, saturating or peaked at a random
  interior level, its direction a coin flip; a categorical knob's levels are independent;
- **interactions**: 1-4 pairs of knobs with a random table of log effects (double-centred, so
  no main effect leaks in), and with probability :data:`P_CORNER` a three-way corner: one
  level each of three knobs, together, faster or slower by 3-15%;
- **memory**: peak GiB = static + accumulation buffer (grad_accum > 1: none, bf16 or fp32
  gradients of every parameter, at random) + activations x micro_batch^e x row(padding) x
  (checkpointed share when activation_checkpointing) (+ a few GiB for one level of a random
  knob, like NVLS's buffers). Its activation coefficient is solved so that a random share of
  the grid's (micro_batch, grad_accum, checkpointing, padding) cells run out of memory: the
  boundary is placed by the draw, looser or tighter than helper's as it falls;
- **NCCL rules**: a forced algorithm fails for every protocol, or for some protocols, at
  random (`error` at the first collective, after start-up);
- **start-up and reconfiguration**: seconds of a cold start and of each of tuner.knobs'
  RECONFIGURE levels for a resident worker.

Two scenarios: `generic` (all of the above) and, with probability :data:`P_BIG_BATCH`,
`big_batch` (large micro-batches and accumulation pay, checkpointing costs, memory is loose):
the kind of cluster where the optimum sits beyond helper's predicted OOM line on the 7B and
13B kinds (issue 28: bf16 accumulation). Which surfaces actually put the optimum beyond
helper's boundary, which knobs helper calls neutral or opposite, is measured after drawing by
:func:`label` against a :class:`HelperView`; that view never shapes a surface.

Pure and seeded: ``draw_surface(kind, seed)`` is the same surface on every machine.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.first_principles_cluster import GPU_SHEETS, SHAPES
from bench.surface_truth import Outcome

__all__ = ["ClusterKind", "Surface", "HelperView", "draw_surface", "grid", "config_key", "optimum", "label",
           "P_MATTERS", "P_CORNER", "P_BIG_BATCH", "MAIN_SIZE"]

P_MATTERS = 0.65
"""Probability that a knob has a main effect."""
MAIN_SIZE = (0.01, 0.35)
"""Log-range of a main effect over its levels (1% to 42% between the best and worst level)."""
P_CORNER = 0.35
"""Probability of a three-way corner."""
P_BIG_BATCH = 0.35
"""Probability of the `big_batch` scenario."""
ORDERED = ("num_workers", "prefetch_factor", "grad_accum", "micro_batch")
GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class ClusterKind:
    """What a surface is drawn for (plain data, from a study spec)."""

    name: str
    model: str
    """A preset of first_principles_cluster.SHAPES (its parameter count sizes the memory)."""
    gpu: str
    world_size: int
    gpus_per_node: int
    seq_len: int
    levels: dict[str, tuple[Any, ...]]
    """Each searched knob's grid levels (spec.knob(name).values_for_grid())."""


@dataclass(frozen=True, kw_only=True)
class Surface:
    """One drawn surface (a surface_truth.Truth)."""

    kind: ClusterKind
    seed: int
    scenario: str
    base_tokens_per_sec_per_gpu: float
    main: dict[str, dict[Any, float]]
    """knob -> level -> log effect (knobs that do not matter are absent)."""
    pairs: tuple[tuple[str, str, dict[tuple[Any, Any], float]], ...]
    corners: tuple[tuple[dict[str, Any], float], ...]
    memory: dict[str, Any]
    """static_gib, accum_gib, act_gib, mb_exponent, row (padding -> factor), ckpt_share,
    extra (knob, level -> GiB) or None, capacity_gib."""
    nccl_failures: dict[tuple[str, str], str]
    """(nccl_algo, nccl_proto) -> NCCL's message, for the pairs that fail."""
    setup_s: dict[str, float]
    """RECONFIGURE level -> seconds before warm-up (``process``: a cold start)."""
    real_tokens_per_row: dict[str, float]
    """padding -> non-padding tokens per row (step time from throughput)."""

    @property
    def world_size(self) -> int:
        return self.kind.world_size

    def memory_gib(self, p: Mapping[str, Any]) -> float:
        m = self.memory
        act = (m["act_gib"] * int(p["micro_batch"]) ** m["mb_exponent"] * m["row"][p["padding"]]
               * (m["ckpt_share"] if p["activation_checkpointing"] else 1.0))
        extra = m["extra"][1].get(p.get(m["extra"][0]), 0.0) if m["extra"] else 0.0
        return m["static_gib"] + (m["accum_gib"] if int(p["grad_accum"]) > 1 else 0.0) + act + extra

    def log_tokens_per_sec(self, p: Mapping[str, Any]) -> float:
        out = math.log(self.base_tokens_per_sec_per_gpu)
        for knob, effect in self.main.items():
            out += effect.get(p.get(knob), 0.0)
        for a, b, table in self.pairs:
            out += table.get((p.get(a), p.get(b)), 0.0)
        for corner, effect in self.corners:
            if all(p.get(k) == v for k, v in corner.items()):
                out += effect
        return out

    def evaluate(self, params: Mapping[str, Any]) -> Outcome:
        p = _active(params)
        tokens = (int(p["micro_batch"]) * int(p["grad_accum"]) * self.world_size
                  * self.real_tokens_per_row[p["padding"]])
        tps = math.exp(self.log_tokens_per_sec(p))
        step_s = tokens / (tps * self.world_size)
        mem = self.memory_gib(p)
        common = dict(step_time_s=step_s, tokens_per_step=tokens)
        if err := self.nccl_failures.get((str(p["nccl_algo"]), str(p["nccl_proto"]))):
            return Outcome(status="error", tokens_per_sec_per_gpu=0.0, peak_mem_gib=0.0, message=err, **common)
        cap = self.memory["capacity_gib"]
        if mem > cap:
            return Outcome(status="oom", tokens_per_sec_per_gpu=0.0, peak_mem_gib=cap, **common,
                           message=f"CUDA out of memory: needs {mem:.1f} GiB of {cap:.1f} GiB per GPU")
        return Outcome(status="ok", tokens_per_sec_per_gpu=tps, peak_mem_gib=mem, **common)

    def status_tps(self, params: Mapping[str, Any]) -> tuple[str, float]:
        """(status, tokens/s/GPU) of :meth:`evaluate`, fast (brute force over the grid)."""
        p = _active(params)
        if (str(p["nccl_algo"]), str(p["nccl_proto"])) in self.nccl_failures:
            return "error", 0.0
        if self.memory_gib(p) > self.memory["capacity_gib"]:
            return "oom", 0.0
        return "ok", math.exp(self.log_tokens_per_sec(p))

    def preflight_nccl(self, nccl_algo: str, nccl_proto: str) -> str | None:
        return self.nccl_failures.get((nccl_algo, nccl_proto))

    def setup_seconds(self, level: str, params: Mapping[str, Any]) -> float:
        return self.setup_s[level]

    def optimum(self) -> tuple[dict[str, Any], float]:
        return optimum(self, self.kind.levels)


def optimum(truth: Any, levels: Mapping[str, tuple[Any, ...]]) -> tuple[dict[str, Any], float]:
    """The best config of the grid on a truth and its tokens/s/GPU (noiseless, brute force)."""
    best, best_tps = {}, 0.0
    for p in grid(levels):
        status, tps = _status_tps(truth, p)
        if status == "ok" and tps > best_tps:
            best, best_tps = p, tps
    return best, best_tps


def _status_tps(truth: Any, p: Mapping[str, Any]) -> tuple[str, float]:
    if isinstance(truth, Surface):
        return truth.status_tps(p)
    o = truth.evaluate(p)
    return o.status, o.tokens_per_sec_per_gpu


def _active(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` without prefetch_factor when there are no workers (tuner.knobs' rule)."""
    p = dict(params)
    if int(p.get("num_workers", 1)) == 0:
        p.pop("prefetch_factor", None)
    return p


def grid(levels: Mapping[str, tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    """Every config of the grid once (prefetch_factor absent where num_workers is 0)."""
    names = list(levels)
    seen = set()
    for combo in itertools.product(*levels.values()):
        p = _active(dict(zip(names, combo)))
        key = config_key(p)
        if key not in seen:
            seen.add(key)
            yield p


def config_key(params: Mapping[str, Any]) -> tuple:
    """A hashable key of the searched knobs' values (inactive prefetch_factor left out)."""
    return tuple(sorted((k, v) for k, v in _active(params).items()))


# ---- drawing -------------------------------------------------------------------------------
def _shape(rng: np.random.Generator, n: int, ordered: bool) -> np.ndarray:
    """A main effect's shape over n levels: range 1, mean 0."""
    if ordered:
        x = np.linspace(0.0, 1.0, n)
        form = rng.choice(["linear", "saturating", "peaked"])
        f = x if form == "linear" else 1 - np.exp(-4 * x) if form == "saturating" else -(x - rng.uniform(0.2, 0.8)) ** 2
        f = f * rng.choice([-1.0, 1.0])
    else:
        f = rng.normal(size=n)
    f = f - f.mean()
    return f / (np.ptp(f) or 1.0)


def _size(rng: np.random.Generator, lo: float = MAIN_SIZE[0], hi: float = MAIN_SIZE[1]) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _main_effects(rng: np.random.Generator, kind: ClusterKind, big_batch: bool) -> dict[str, dict[Any, float]]:
    main = {}
    for knob, levels in kind.levels.items():
        n = len(levels)
        forced = big_batch and knob in ("micro_batch", "grad_accum", "activation_checkpointing")
        if n < 2 or not (forced or rng.random() < P_MATTERS):
            continue
        if forced and knob == "activation_checkpointing":  # recompute costs: the un-checkpointed level wins
            f = np.array([0.5 if not v else -0.5 for v in levels])
            size = _size(rng, 0.1, 0.3)
        elif forced:  # bigger is better, linear or saturating
            x = np.log2(np.asarray(levels, dtype=float)) / max(1.0, math.log2(max(levels)))
            f = x if rng.random() < 0.5 else 1 - np.exp(-3 * x)
            f = (f - f.mean()) / (np.ptp(f) or 1.0)
            size = _size(rng, 0.1, 0.35) if knob == "micro_batch" else _size(rng, 0.03, 0.15)
        else:
            f, size = _shape(rng, n, knob in ORDERED), _size(rng)
        main[knob] = {v: float(size * e) for v, e in zip(levels, f)}
    return main


def _interactions(rng: np.random.Generator, kind: ClusterKind):
    names = [k for k, v in kind.levels.items() if len(v) > 1]
    pairs = []
    for _ in range(int(rng.integers(1, 5))):
        a, b = rng.choice(len(names), size=2, replace=False)
        la, lb = kind.levels[names[a]], kind.levels[names[b]]
        t = rng.normal(size=(len(la), len(lb)))
        t = t - t.mean(axis=0, keepdims=True) - t.mean(axis=1, keepdims=True) + t.mean()
        t = t / (np.ptp(t) or 1.0) * _size(rng, 0.01, 0.12)
        pairs.append((names[a], names[b], {(x, y): float(t[i, j]) for i, x in enumerate(la) for j, y in enumerate(lb)}))
    corners = []
    if rng.random() < P_CORNER:
        picks = rng.choice(len(names), size=3, replace=False)
        corner = {names[i]: kind.levels[names[i]][int(rng.integers(len(kind.levels[names[i]])))] for i in picks}
        corners.append((corner, float(rng.choice([-1.0, 1.0]) * rng.uniform(0.03, 0.15))))
    return tuple(pairs), tuple(corners)


def _memory(rng: np.random.Generator, kind: ClusterKind, big_batch: bool) -> dict[str, Any]:
    n_params = SHAPES[kind.model].n_params
    capacity = GPU_SHEETS[kind.gpu].capacity_gib
    static = 16 * n_params / kind.world_size / GIB * rng.uniform(0.8, 1.3) + rng.uniform(2.0, 5.0)
    accum_bytes = rng.choice([0, 2]) if big_batch else rng.choice([0, 2, 4], p=[0.2, 0.5, 0.3])
    accum = float(min(accum_bytes * n_params / GIB, 0.8 * (capacity - static)))
    padding = kind.levels.get("padding", ("max_length",))
    row = {pad: (1.0 if pad in ("max_length", "packed") else float(rng.uniform(0.15, 0.5))) for pad in padding}
    m = {"static_gib": static, "accum_gib": accum, "mb_exponent": float(rng.uniform(1.0, 1.15)), "row": row,
         "ckpt_share": float(rng.uniform(0.08, 0.35)), "capacity_gib": capacity, "extra": None}
    # the activation coefficient that puts a drawn share of the grid's memory cells out of memory
    oom_share = rng.uniform(0.02, 0.15) if big_batch else rng.uniform(0.05, 0.5)
    thresholds = []
    for mb, ga, ckpt, pad in itertools.product(kind.levels.get("micro_batch", (1,)), kind.levels.get("grad_accum", (1,)),
                                               kind.levels.get("activation_checkpointing", (False,)), padding):
        unit = mb ** m["mb_exponent"] * row[pad] * (m["ckpt_share"] if ckpt else 1.0)
        thresholds.append((capacity - static - (accum if ga > 1 else 0.0)) / unit)
    # just past the cell at the quantile, so that cell runs out of memory too (cells tie often)
    m["act_gib"] = max(0.05, 1.001 * float(np.quantile(thresholds, oom_share)))
    if rng.random() < 0.3:  # a level of another knob holds buffers (NVLS, pinned staging, ...)
        knob = str(rng.choice([k for k in ("nccl_algo", "nccl_proto", "num_workers") if k in kind.levels]))
        level = kind.levels[knob][int(rng.integers(1, len(kind.levels[knob])))]
        m["extra"] = (knob, {level: float(rng.uniform(1.0, 4.0))})
    return m


def _nccl(rng: np.random.Generator, kind: ClusterKind) -> dict[tuple[str, str], str]:
    algos = [a for a in kind.levels.get("nccl_algo", ()) if a != "default"]
    protos = list(kind.levels.get("nccl_proto", ("default",)))
    out, p_pair = {}, rng.uniform(0.05, 0.3)
    for algo in algos:
        whole = rng.random() < 0.25
        for proto in protos:
            if whole or rng.random() < p_pair:
                out[(algo, proto)] = (f"NCCL WARN Error: no algorithm/protocol available for AllGather with "
                                      f"NCCL_ALGO={algo} NCCL_PROTO={proto} (this cluster's NCCL)")
    return out


def _setup(rng: np.random.Generator, kind: ClusterKind) -> dict[str, float]:
    nodes = math.ceil(kind.world_size / kind.gpus_per_node)
    process = rng.uniform(0.6, 1.6) * (40 + 4 * SHAPES[kind.model].n_params / 1e9 + 3 * nodes)
    data_loader = rng.uniform(1.0, 4.0)
    model = data_loader + rng.uniform(0.15, 0.5) * process
    return {"none": data_loader, "data_loader": data_loader, "model": model,
            "communicators": model + rng.uniform(3.0, 20.0), "process": process}


def draw_surface(kind: ClusterKind, seed: int) -> Surface:
    """The surface number ``seed`` of a cluster kind."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5C0FE, zlib.crc32(kind.name.encode())]))
    big_batch = bool(rng.random() < P_BIG_BATCH)
    shape, sheet = SHAPES[kind.model], GPU_SHEETS[kind.gpu]
    base = sheet.peak_bf16_flops * rng.uniform(0.25, 0.5) / (6 * shape.n_params)  # Kaplan et al. 2020: 6N per token
    main = _main_effects(rng, kind, big_batch)
    pairs, corners = _interactions(rng, kind)
    mean_example = rng.uniform(150.0, 400.0)
    real = {pad: (0.99 * kind.seq_len if pad == "packed" else min(mean_example, kind.seq_len))
            for pad in kind.levels.get("padding", ("max_length",))}
    return Surface(kind=kind, seed=seed, scenario="big_batch" if big_batch else "generic",
                   base_tokens_per_sec_per_gpu=float(base), main=main, pairs=pairs, corners=corners,
                   memory=_memory(rng, kind, big_batch), nccl_failures=_nccl(rng, kind), setup_s=_setup(rng, kind),
                   real_tokens_per_row=real)


# ---- labels (helper's view, after drawing) ---------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class HelperView:
    """What helper (through tuner's screening) says about a cluster kind's grid: plain data."""

    capacity_gb: float
    """helper's GPU memory, GB (1e9 bytes)."""
    prior_margin: float
    """Screening prunes before any measurement when predicted / margin > capacity."""
    memory_gb: dict[tuple, float]
    """config_key -> helper's predicted peak memory per GPU, GB."""
    nccl: dict[tuple[str, str], tuple[str, bool] | None]
    """(nccl_algo, nccl_proto) -> (NCCL's error, certain on every version) or None."""
    main: dict[str, dict[Any, float]]
    """knob -> level -> mean log predicted tokens/s over the configs helper says run."""


def _corr(a: dict[Any, float], b: dict[Any, float]) -> float:
    keys = [k for k in a if k in b]
    x, y = np.array([a[k] for k in keys]), np.array([b[k] for k in keys])
    if len(keys) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def label(truth: Any, levels: Mapping[str, tuple[Any, ...]], view: HelperView) -> dict[str, Any]:
    """How a truth differs from helper's view. Any truth: how often helper's memory verdict is
    wrong over the grid (too tight: helper calls OOM what fits; too loose: the reverse; configs
    the truth refuses for NCCL left out), and where the optimum sits: beyond helper's OOM line,
    beyond screening's prior line, behind an NCCL rule of helper's (certain or version-dependent).
    A :class:`Surface` also: knobs helper calls neutral that matter here (helper's range < 0.5%,
    the surface's >= 2%), knobs whose effect runs opposite to helper's (both ranges >= 1%,
    correlation over the levels < -0.5)."""
    too_tight = too_loose = n = 0
    best, best_tps = {}, 0.0
    for p in grid(levels):
        status, tps = _status_tps(truth, p)
        if status == "ok" and tps > best_tps:
            best, best_tps = p, tps
        pred = view.memory_gb.get(config_key(p))
        if pred is None or status == "error":
            continue
        n += 1
        too_tight += status == "ok" and pred > view.capacity_gb
        too_loose += status == "oom" and pred <= view.capacity_gb
    pred = view.memory_gb.get(config_key(best), 0.0)
    nccl = view.nccl.get((str(best.get("nccl_algo", "default")), str(best.get("nccl_proto", "default"))))
    out = {"helper_memory_too_tight_share": too_tight / max(1, n), "helper_memory_too_loose_share": too_loose / max(1, n),
           "optimum": best, "optimum_tokens_per_sec_per_gpu": best_tps,
           "optimum_beyond_helper_memory": pred > view.capacity_gb,
           "optimum_screened_at_prior": pred / view.prior_margin > view.capacity_gb,
           "optimum_behind_certain_nccl_rule": bool(nccl and nccl[1]), "optimum_behind_nccl_rule": nccl is not None}
    if isinstance(truth, Surface):
        def spread(e: dict[Any, float]) -> float:
            return max(e.values()) - min(e.values()) if e else 0.0

        out["scenario"] = truth.scenario
        out["neutral_matters"] = [k for k in levels if spread(view.main.get(k, {})) < 0.005
                                  and spread(truth.main.get(k, {})) >= 0.02]
        out["opposite"] = [k for k in levels if spread(view.main.get(k, {})) >= 0.01
                           and spread(truth.main.get(k, {})) >= 0.01 and _corr(truth.main[k], view.main[k]) < -0.5]
    return out
