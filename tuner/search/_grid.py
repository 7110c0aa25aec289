"""The model-guided sampler's grid: the spec's configs over the knobs helper's model knows,
with what each config needs that does not change from trial to trial (codes for the
surrogate's distance, predicted memory, NCCL verdicts, step plans, what a switch to it
needs of a resident worker, tokens per step). Used by tuner.search only.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from tuner import budget, knobs, model
from tuner.search._screening import memory_region, nccl_problem, predicted_memory_gb
from tuner.spec import StudySpec, complete_params

__all__ = ["ModelGrid", "MODEL_KNOBS", "knobs_active"]

MODEL_KNOBS = ("nccl_algo", "nccl_proto", "num_workers", "prefetch_factor", "grad_accum", "micro_batch",
               "padding", "activation_checkpointing", "sharding")
"""Knobs helper's model predicts (prefetch_factor has no steady-state effect in it)."""


class ModelGrid:
    """The spec's grid over the knobs the model knows, with what does not change per trial."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        self.names = [k.name for k in spec.space if k.name in MODEL_KNOBS and _finite(k)]
        values = [spec.knob(n).values_for_grid() for n in self.names]
        self.configs: list[dict[str, Any]] = []
        seen = set()
        for combo in itertools.product(*values):
            params = dict(zip(self.names, combo))
            if not knobs_active(params):
                params.pop("prefetch_factor", None)
            key = self.key(params)
            if key not in seen:
                seen.add(key)
                self.configs.append(params)
        self.codes = np.array([[self._code(i, c.get(n)) for i, n in enumerate(self.names)] for c in self.configs])
        self.full = [complete_params(c, spec) for c in self.configs]
        mem_cache: dict[tuple, float] = {}
        self.mem_gb = np.array([mem_cache.setdefault(_mem_key(f), predicted_memory_gb(spec, f) or 0.0)
                                for f in self.full])
        nccl = {}
        for f in self.full:
            pair = (str(f.get("nccl_algo", "default")), str(f.get("nccl_proto", "default")))
            if pair not in nccl:
                nccl[pair] = nccl_problem(spec, *pair)
        self.nccl_pairs = [(str(f.get("nccl_algo", "default")), str(f.get("nccl_proto", "default"))) for f in self.full]
        self.nccl = [nccl[pair] for pair in self.nccl_pairs]
        self.index = {self.key(c): i for i, c in enumerate(self.configs)}
        self.nccl_twin = self._nccl_twins(nccl)
        """For a config one of helper's NCCL rules says cannot run (on every NCCL version, or on
        the version helper assumes), the same config with the first NCCL setting that runs: its
        prediction stands in until the cluster says, else -1. Without it a config behind a
        version-dependent rule had no prediction and was never proposed (docs/benchmarks.md)."""
        self.levels = np.array([knobs.RECONFIGURE.index(knobs.KNOBS[n].reconfigure) if n in knobs.KNOBS else 0
                                for n in self.names])  # what a change of each knob needs of a worker
        self.memory_traits = (np.array([int(f["micro_batch"]) for f in self.full]),
                              np.array([bool(f["activation_checkpointing"]) for f in self.full]),
                              np.array([int(f["grad_accum"]) > 1 for f in self.full]),
                              np.array([str(f["padding"]) for f in self.full]))
        # configs by (padding, micro_batch): what a row of data and a micro-batch hold depend on them alone
        firsts: dict[tuple, int] = {}
        keys = [(f["padding"], int(f["micro_batch"])) for f in self.full]
        for i, key in enumerate(keys):
            firsts.setdefault(key, i)
        slot = {key: j for j, key in enumerate(firsts)}
        self._row_of = np.array([slot[key] for key in keys], dtype=int)
        self._row_first = list(firsts.values())
        """Each config's (padding, micro_batch) group, and each group's first config."""
        self._grad_accum = np.array([int(f["grad_accum"]) for f in self.full], dtype=float)
        self.row_len = np.array([model.spec_model_inputs(self.full[i], spec).seq_len for i in self._row_first])[self._row_of]
        """Each config's computed row length (screening's OOM rule compares them)."""
        names = sorted({memory_region(f) for f in self.full})
        self.regions = np.array([names.index(memory_region(f)) for f in self.full])
        """Each config's memory region (tuner.search.memory_region), as an index."""
        self._plans: dict[Any, Any] = {}
        self._plan_of: dict[tuple[int, float], tuple[Any, float] | None] = {}
        self.pairs = sorted(nccl)
        self.pair_problems = [nccl[pair] for pair in self.pairs]
        index = {pair: j for j, pair in enumerate(self.pairs)}
        self.pair_of = np.array([index[pair] for pair in self.nccl_pairs], dtype=int)
        """The grid's NCCL (algo, proto) settings, and each config's, as an index into them."""
        self.nccl_ruled = np.array([p is not None for p in self.nccl])
        """Where one of helper's NCCL rules speaks of a config (it may or may never run)."""
        self.nccl_may_run = np.array([p is None or not p[1] or twin >= 0 for p, twin in zip(self.nccl, self.nccl_twin)])
        """Configs the sampler may propose before any trial: helper's rules let them run, or a
        twin with a setting that runs stands in (GridModel.predict)."""

    def _nccl_twins(self, nccl: dict[tuple[str, str], Any]) -> np.ndarray:
        out = np.full(len(self.configs), -1)
        runs = [pair for pair, problem in nccl.items() if problem is None]
        if not runs or ("nccl_algo" not in self.names and "nccl_proto" not in self.names):
            return out
        for i, (c, p) in enumerate(zip(self.configs, self.nccl)):
            if p is None:  # a version-dependent rule too: helper has no prediction for either
                continue
            for algo, proto in runs:
                twin = {**c, **({"nccl_algo": algo} if "nccl_algo" in c else {}),
                        **({"nccl_proto": proto} if "nccl_proto" in c else {})}
                j = self.index.get(self.key(twin))
                if j is not None and self.nccl[j] is None:
                    out[i] = j
                    break
        return out

    def with_pairs(self, pairs: Any) -> np.ndarray:
        """For every config, whether its NCCL (algo, proto) setting is one of ``pairs``."""
        return np.isin(self.pair_of, [j for j, pair in enumerate(self.pairs) if pair in pairs])

    def _code(self, i: int, value: Any) -> int:
        if value is None:
            return -1
        return list(self.spec.knob(self.names[i]).values_for_grid()).index(value)

    def key(self, params: dict[str, Any]) -> tuple:
        return tuple(params.get(n) for n in self.names if n in params or n != "prefetch_factor")

    def key_of_trial(self, params: dict[str, Any]) -> tuple | None:
        p = {n: params[n] for n in self.names if n in params}
        if not knobs_active(p):
            p.pop("prefetch_factor", None)
        return self.key(p) if len(p) >= len(self.names) - 1 else None

    def switch_levels(self, worker: budget.Worker | None) -> np.ndarray:
        """For every config, what running it next needs of ``worker`` (index into
        tuner.knobs.RECONFIGURE; budget.switch_level over the grid at once)."""
        if worker is None:
            return np.full(len(self.configs), knobs.RECONFIGURE.index("process"))
        i = self.index.get(self.key_of_trial(worker.params))
        if i is not None:
            mine = self.codes[i]
        else:  # a config off the grid (a baseline outside the space): compare value by value
            values = [list(self.spec.knob(n).values_for_grid()) for n in self.names]
            mine = np.array([vs.index(worker.params[n]) if worker.params.get(n) in vs else -2
                             for n, vs in zip(self.names, values)])
        levels = np.where(self.codes != mine, self.levels, 0).max(axis=1, initial=0)
        if worker.failed:
            levels = np.maximum(levels, knobs.RECONFIGURE.index("communicators"))
        return levels

    def tokens_per_gpu_step(self, mean_tokens: float) -> np.ndarray:
        """Non-padding tokens one GPU processes per optimizer step, for every config."""
        rows = np.empty(len(self._row_first))
        for j, i in enumerate(self._row_first):
            inp = model.spec_model_inputs(self.full[i], self.spec, mean_tokens=mean_tokens)
            rows[j] = inp.seq_len * inp.padding_efficiency * int(self.full[i]["micro_batch"])
        return rows[self._row_of] * self._grad_accum

    def plan(self, i: int, mean_tokens: float) -> tuple[Any, float] | None:
        """(helper StepPlan, padding efficiency) of candidate i, or None when NCCL cannot run it.
        Made once per (candidate, mean example length): the sampler asks for every candidate at
        every proposal."""
        if (i, mean_tokens) not in self._plan_of:
            inp = model.spec_model_inputs(self.full[i], self.spec, mean_tokens=mean_tokens)
            key = dataclasses.replace(inp, prefetch_factor=None)  # no steady-state effect in the model
            if key not in self._plans:
                self._plans[key] = model.step_plan(inp)
            plan = self._plans[key]
            self._plan_of[(i, mean_tokens)] = None if plan is None else (plan, inp.padding_efficiency)
        return self._plan_of[(i, mean_tokens)]


def knobs_active(params: dict[str, Any]) -> bool:
    """Whether prefetch_factor applies (tuner.knobs' rule: only with workers)."""
    return knobs.is_active("prefetch_factor", params) if "num_workers" in params else True


def _finite(k: Any) -> bool:
    try:
        return len(k.values_for_grid()) > 0
    except ValueError:
        return False


def _mem_key(f: dict[str, Any]) -> tuple:
    return (f["micro_batch"], f["grad_accum"], f["activation_checkpointing"], f["padding"], f.get("sharding"))
