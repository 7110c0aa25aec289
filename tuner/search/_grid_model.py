"""helper's model over the spec's grid, refitted to a study: what the model-guided sampler reads.

:class:`GridModel` keeps the last refit (its constants, and the grid's predictions under them)
until the refit's inputs change. The refit reads only the best FIT_ON_BEST ok trials and the
baseline (tuner.model.calibration_trials) and the mean tokens per example; a trial that does
not enter that set leaves the fit, and every prediction, as they were. On the 13B x 8 H100 sim
study (8 GPU-h, 216 trials) that is 42 refits instead of one per trial (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner import model
from tuner.search._grid import ModelGrid
from tuner.spec import StudySpec

__all__ = ["GridModel", "predict", "top_prediction"]


def predict(grid: ModelGrid, idx: np.ndarray, constants: dict[str, float], mean_tokens: float,
            known: np.ndarray | None = None) -> np.ndarray:
    """Calibrated model tokens/s/GPU for candidates ``idx`` (0 where NCCL cannot run them).

    ``known``: one entry per grid config, NaN where not yet predicted with these constants and
    mean tokens; filled in place and read back."""
    idx = np.asarray(idx, dtype=int)
    out = np.zeros(len(idx)) if known is None else known[idx]
    todo = range(len(idx)) if known is None else np.flatnonzero(np.isnan(out))  # the known are read at once
    memo: dict[int, float] = {}
    for j in todo:
        i = idx[j]
        out[j] = 0.0
        got = grid.plan(int(i), mean_tokens)
        if got is not None:
            plan, _ = got
            if id(plan) not in memo:
                memo[id(plan)] = model.breakdown(plan, constants)["tokens_per_sec_per_gpu"]
            out[j] = memo[id(plan)]
        if known is not None:
            known[i] = out[j]
    return out


class GridModel:
    """The spec's grid under helper's constants refitted to a study's ok trials."""

    def __init__(self, spec: StudySpec, grid: ModelGrid) -> None:
        self._spec, self._grid = spec, grid
        self._calibration: dict[str, Any] | None = None  # the last refit (the next one's warm start)
        self._key: tuple | None = None
        self._constants: dict[str, float] = {}
        self._mean_tokens = 0.0
        self._known = np.full(len(grid.configs), np.nan)
        self.refits = 0
        """Refits so far (one per change of the fit's inputs)."""

    def update(self, ok: list[Any], mean_tokens: float) -> None:
        """Refit to ``ok`` (Optuna trials) if the trials the fit reads, or the mean tokens, changed."""
        key = (round(mean_tokens, 6), tuple((t.number, t.value, t.user_attrs.get("padding_efficiency"))
                                            for t in model.calibration_trials(ok)))
        if key == self._key:
            return
        self._constants, self._calibration = model.calibrated_constants(self._spec, ok, mean_tokens, self._calibration)
        self._key, self._mean_tokens = key, mean_tokens
        self._known = np.full(len(self._grid.configs), np.nan)
        self.refits += 1

    def predict(self, idx: np.ndarray) -> np.ndarray:
        """Tokens/s/GPU of grid configs ``idx`` under the last refit. Where helper's NCCL rules say
        a config cannot run at all, its twin's with a setting that runs (ModelGrid.nccl_twin)
        stands in: the rule may be wrong about the cluster, and the measurements say so; 0 where
        there is no twin."""
        idx = np.asarray(idx, dtype=int)
        out = predict(self._grid, idx, self._constants, self._mean_tokens, self._known)
        twin = self._grid.nccl_twin[idx] if len(idx) else np.zeros(0, dtype=int)
        stand_in = (out == 0) & (twin >= 0)
        if stand_in.any():
            out[stand_in] = predict(self._grid, twin[stand_in], self._constants, self._mean_tokens, self._known)
        return out


def top_prediction(spec: StudySpec) -> dict[str, Any]:
    """helper's best config for the spec with no trial run ("model only"): the highest
    prediction of the shipped calibration among configs it says run and fit (complete params)."""
    grid = ModelGrid(spec)
    idx = np.array([i for i in range(len(grid.configs))
                    if grid.nccl[i] is None and grid.mem_gb[i] <= model.gpu_memory_gb(spec.cluster.gpu)])
    pred = predict(grid, idx, model.default_constants(spec.cluster.gpu), float(model.DEFAULT_MEAN_TOKENS_PER_EXAMPLE))
    return grid.full[int(idx[int(np.argmax(pred))])]
