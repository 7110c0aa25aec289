"""The surface bench's one door into tuner's internals (and search_efficiency's runner).

Everything bench/search_surfaces.py needs beyond tuner's stable API (``tuner.load_spec``,
``tuner.launch``, ``tuner.measurement``) is imported here and nowhere else, so a move of
tuner's modules is remapped in one place:

- ``search_efficiency.run_one`` and ``recommended``: the coordinator's own admission, repeat,
  screening, ablation and runoff functions over in-memory storage, then tuner.stats's
  choice (what ``run_study`` + ``analyze_study`` do, without the database and the bootstrap);
  ``search_efficiency.Truth``: the sim launcher's noiseless matched physics, i.e. helper's
  own prediction of every config;
- ``tuner.search.top_prediction``: helper's best config with no trial ("model-only");
- ``tuner.search.predicted_memory_gb``, ``nccl_problem``, ``PRIOR_MEMORY_MARGIN``: what
  screening believes (for the labels only);
- ``tuner.search.screening_summary``, ``PROBES_ATTR``: configs screened, probes run and
  contradicted per study;
- ``tuner.search.complete_params``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench.search_efficiency import Truth as HelperTruth
from bench.search_efficiency import recommended, run_one
from bench.surface_launcher import SurfaceLauncher
from bench.surfaces import ClusterKind, HelperView, config_key, grid
from tuner.search import PRIOR_MEMORY_MARGIN, PROBES_ATTR, nccl_problem, predicted_memory_gb, screening_summary, top_prediction
from tuner.spec import complete_params, load_spec

__all__ = ["KINDS", "kind_spec", "cluster_kind", "helper_view", "study_spec", "run_strategy", "STRATEGIES",
           "TUNER_INTERNALS"]

ROOT = Path(__file__).resolve().parents[1]

KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "7b-h100x32": ("studies/llama7b-h100x32.toml", {}),
    "13b-h100x8": ("studies/sim-llama13b-h100x8.toml", {}),
    "1b-a100x16": ("studies/sim-llama1b-a100x16.toml", {}),
    # a second 2-node A100 cluster: 7B on 2 x 8 A100-80GB (the 7B spec moved there)
    "7b-a100x16": ("studies/llama7b-h100x32.toml", {"nodes": 2, "gpu": "A100-80GB", "estimate_gpu_seconds": 4800}),
}
"""Cluster kinds: name -> (shipped spec, changes to its cluster and trial)."""

STRATEGIES = {"random": "random", "tpe": "tpe", "model": "auto", "model-only": None}
"""Strategy -> the spec's study.sampler (`auto`: the model-guided sampler on these specs)."""

TUNER_INTERNALS = ("search_efficiency.run_one", "search_efficiency.recommended", "search_efficiency.Truth",
                   "tuner.search.top_prediction", "tuner.search.predicted_memory_gb",
                   "tuner.search.nccl_problem", "tuner.search.PRIOR_MEMORY_MARGIN",
                   "tuner.search.screening_summary", "tuner.search.PROBES_ATTR",
                   "tuner.spec.complete_params", "tuner.spec.load_spec")


def kind_spec(name: str):
    """A cluster kind's spec on the sim launcher (matched physics: helper's view)."""
    path, changes = KINDS[name]
    spec = load_spec(ROOT / path).with_launcher("sim")
    cluster = {k: v for k, v in changes.items() if k in ("nodes", "gpu")}
    trial = {k: v for k, v in changes.items() if k == "estimate_gpu_seconds"}
    study = dataclasses.replace(spec.study, name=f"surface-{name}")
    return dataclasses.replace(spec, study=study, cluster=dataclasses.replace(spec.cluster, **cluster),
                               trial=dataclasses.replace(spec.trial, **trial))


def cluster_kind(name: str, spec) -> ClusterKind:
    c = spec.cluster
    return ClusterKind(name=name, model=spec.model.preset, gpu=c.gpu, world_size=c.world_size,
                       gpus_per_node=c.gpus_per_node, seq_len=spec.model.seq_len,
                       levels={k.name: tuple(k.values_for_grid()) for k in spec.space})


def helper_view(spec, levels: dict[str, tuple]) -> HelperView:
    """helper's predictions over the grid, through the functions screening and the sim use."""
    from helper import get_gpu

    truth = HelperTruth(spec)
    memory, logs = {}, {}
    for p in grid(levels):
        key = config_key(p)
        memory[key] = float(predicted_memory_gb(spec, complete_params(p, spec)) or 0.0)
        tps = truth(p)
        if tps > 0:
            logs[key] = (p, math.log(tps))
    main = {}
    for knob, values in levels.items():
        main[knob] = {v: float(np.mean([lg for p, lg in logs.values() if p.get(knob) == v]))
                      for v in values if any(p.get(knob) == v for p, _ in logs.values())}
    algos, protos = levels.get("nccl_algo", ("default",)), levels.get("nccl_proto", ("default",))
    nccl = {(a, p): nccl_problem(spec, a, p) for a in algos for p in protos}
    return HelperView(capacity_gb=float(get_gpu(spec.cluster.gpu).memory_gb), prior_margin=PRIOR_MEMORY_MARGIN,
                      memory_gb=memory, nccl=nccl, main=main)


def study_spec(spec, *, seed: int, sampler: str, resident: bool):
    """The kind's spec with a strategy's sampler, a seed, and cold or warm trials."""
    return dataclasses.replace(spec, study=dataclasses.replace(spec.study, seed=seed, sampler=sampler),
                               trial=dataclasses.replace(spec.trial, resident=resident))


def _truth_of(truth, names: list[str]):
    """Noiseless tokens/s/GPU of a config's searched knobs (0 unless ok), memoised."""
    cache: dict[tuple, float] = {}

    def truth_of(params: dict) -> float:
        key = config_key({k: v for k, v in params.items() if k in names})
        if key not in cache:
            o = truth.evaluate(params)
            cache[key] = o.tokens_per_sec_per_gpu if o.status == "ok" else 0.0
        return cache[key]
    return truth_of


def run_strategy(spec, truth, strategy: str, optimum_tps: float, optimum: dict, *, seed: int, resident: bool,
                 budget_gpuh: float, cpu_limit_s: float | None, on_study=None) -> dict[str, Any]:
    """One strategy's study on a truth: {"share", "at" (share as the budget passes 10 and 20
    GPU-h), "counts" (trials, failures, prunes, diagnostics of what the search saw)}.
    ``on_study(study, truth_of)``: called with the finished study and the noiseless truth of a
    config (bench/choice_replay.py reads the study again under other choice rules)."""
    names = [k.name for k in spec.space]
    truth_of = _truth_of(truth, names)
    if STRATEGIES[strategy] is None:  # helper's top prediction, no trial
        share = truth_of(top_prediction(spec)) / optimum_tps
        return {"share": share, "at": {10: share, 20: share}, "counts": {"trials": 0}}
    s = study_spec(spec, seed=seed, sampler=STRATEGIES[strategy], resident=resident)

    def inspect(study) -> dict[str, Any]:
        if on_study is not None:
            on_study(study, truth_of)
        return {**diagnose(study, names, truth_of, optimum_tps, optimum),
                **screening_summary(study.trials, s, study.user_attrs.get(PROBES_ATTR) or [])}

    final, at, counts = run_one(s, truth_of, optimum_tps, budget_gpuh * 3600, cpu_limit_s=cpu_limit_s,
                                launcher=SurfaceLauncher(s, truth), inspect=inspect)
    return {"share": final, "at": at, "counts": counts}


def diagnose(study, names: list[str], truth_of, optimum_tps: float, optimum: dict) -> dict[str, Any]:
    """What the search saw: the optimum's fate (`ok` when launched and run, else how its runs
    ended, `pruned: memory|nccl`, or `never proposed`), the best share among the configs it ran
    ok (search vs selection), prunes by rule, how many distinct pruned configs were truly
    better than everything it ran, and the configs within 1% of the optimum pruned or run."""
    want = config_key(optimum)
    ends: dict[tuple, set[str]] = {}
    shares: dict[tuple, float] = {}
    prunes = Counter()
    for t in study.trials:
        if any(n not in t.params for n in names if n != "prefetch_factor"):
            continue  # asked but never given a config (the budget ran out first)
        status = str(t.user_attrs.get("status", "unknown"))
        key = config_key({k: v for k, v in t.params.items() if k in names})
        if status == "pruned":
            rule = "nccl" if "NCCL" in str(t.user_attrs.get("message", "")) else "memory"
            prunes[rule] += 1
            status = f"pruned: {rule}"
        ends.setdefault(key, set()).add(status)
        shares[key] = truth_of(t.params) / optimum_tps
    ran_ok = [k for k, e in ends.items() if "ok" in e]
    best_ok = max((shares[k] for k in ran_ok), default=0.0)
    pruned_only = [k for k, e in ends.items() if all(x.startswith("pruned") for x in e)]
    fate = ends.get(want, {"never proposed"})
    return {"optimum_fate": "ok" if "ok" in fate else ",".join(sorted(fate)), "best_launched_share": best_ok,
            "pruned_memory": prunes["memory"], "pruned_nccl": prunes["nccl"],
            "pruned_beat_best_launched": sum(shares[k] > best_ok for k in pruned_only),
            "pruned_within_1pct": sum(shares[k] >= 0.99 for k in pruned_only),
            "launched_within_1pct": sum(shares[k] >= 0.99 for k in ran_ok), "distinct_configs": len(ends),
            "recommended": recommended(study)}
