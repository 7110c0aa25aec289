"""Which knobs matter: total-order indices on a second-order ANOVA surrogate, against a placebo.

How (and why):

- **Valid configs only.** The surrogate is fitted to log tokens/s/GPU of `ok` trials (not
  ablation runs); a failed trial has no throughput.
- **Surrogate.** A second-order ANOVA model: ridge regression (Hoerl & Kennard 1970; penalty
  chosen by closed-form leave-one-out error) on one-hot main effects and one-hot pairwise joint levels; a conditional
  knob that does not apply is its own level. A random forest was tried first and misses pure
  crossovers (no single split gains), the case that matters. Its leave-one-out R^2 (reported
  as ``oob_r2``: every trial predicted by a fit without it) says how much of the variation
  the knobs explain at all.
- **Interactions visible.** For each knob, the total-order index (Jansen's estimator,
  Saltelli et al. 2010, *Comput. Phys. Commun.* 181) -- the share of the surrogate's
  variance that changing that knob alone moves, interactions included -- and the first-order
  index (its main effect). Total minus first is its interaction share. A crossover (algorithm
  x protocol) has small first-order and large total indices.
- **Conditional knobs within their parent's branch.** A conditional knob (prefetch_factor
  needs num_workers > 0) is resampled only among trials where it applies, and only there;
  its index is that effect times the share of trials where it applies. A parent is resampled
  together with its children, so it keeps its own credit.
- **Null reference.** A placebo knob with 6 levels drawn at random for each trial goes
  through the same fit. A knob "matters" only when its total index beats the placebo's: the
  CI of the difference lies above 0 at 1 - 5%/knobs (Bonferroni: every knob is tested at
  once, so the chance that any knob without an effect is called one stays <= 5%);
  ``vs_placebo_ci95`` is the plain 95% interval, and ``p_vs_placebo`` the one-sided BCa p of
  the knob's index not beating the placebo's (tuner.stats' ``bca_p_values``), which
  tuner.stats' ``what_matters`` combines with the ablation's.
- **CIs.** ``scipy.stats.bootstrap`` over trials (BCa, 200 resamples by default; Efron 1987),
  refitting the surrogate each time (with the penalty the full data chose). The resamples
  and one jackknife serve both levels (95% and the Bonferroni one) through tuner.stats'
  ``bca_limits``, scipy's formulas: scipy would refit the jackknife for each level.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.stats._bootstrap import bca_limits, bca_p_values, grouped_jackknife
from tuner.stats._record import TrialRecord
from tuner.stats._surrogate import ALPHAS, Surrogate, code_table

__all__ = ["knob_importance", "PLACEBO", "N_BOOT"]

PLACEBO = "(placebo)"
N_BOOT = 200
CONFIDENCE = 0.95
_PLACEBO_LEVELS = 6
_N_PERMS = 8
_MIN_TRIALS = 6
JACKKNIFE_EXACT_MAX, JACKKNIFE_GROUPS = 300, 50
"""Above 300 ok trials BCa's acceleration comes from a jackknife of 50 groups, not one refit per
trial (tuner.stats' bootstrap helpers): a 10,000-trial study refits 50 times, not 10,000."""


def _parent(knob: str, knobs: Sequence[str]) -> str | None:
    from tuner.knobs import KNOBS

    rule = KNOBS[knob].active_when if knob in KNOBS else None
    return rule[0] if rule is not None and rule[0] in knobs else None


def _encode(trials: Sequence[TrialRecord], knobs: Sequence[str]) -> np.ndarray:
    cols = []
    for k in knobs:
        levels = sorted({json.dumps(t.params[k]) for t in trials if t.params.get(k) is not None})
        index = {lv: i for i, lv in enumerate(levels)}
        cols.append([index[json.dumps(t.params[k])] if t.params.get(k) is not None else -1 for t in trials])
    return np.array(cols, float).T.reshape(len(trials), len(knobs))


class _Indices:
    """Total- and first-order indices of every knob on one fitted surrogate."""

    def __init__(self, knobs: Sequence[str], seed: int, x_all: np.ndarray) -> None:
        self.knobs = list(knobs)
        self.x_all = x_all
        self.cats: list[np.ndarray] | None = None
        self.table: tuple[np.ndarray, ...] | None = None
        self.alphas: Sequence[float] = ALPHAS
        self.seed = seed
        kids: dict[str, list[int]] = {k: [] for k in knobs}
        for j, k in enumerate(knobs):
            p = _parent(k, knobs)
            if p is not None:
                kids[p].append(j)
        self.blocks = []
        for j, k in enumerate(knobs):
            block, todo = [j], list(kids[k])
            while todo:
                c = todo.pop()
                block.append(c)
                todo.extend(kids[knobs[c]])
            self.blocks.append(block)
        self.conditional = [_parent(k, knobs) is not None for k in knobs]
        self._affected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.width = int(np.max(x_all) + 2) if x_all.size else 1
        """A pair's joint level is (level_a + 1) x width + (level_b + 1): distinct for every pair of levels."""

    def design(self, x: np.ndarray) -> np.ndarray:
        """Each knob's level and each pair's joint level, as codes to one-hot encode."""
        k = x.shape[1]
        pairs = [(x[:, i] + 1) * self.width + (x[:, j] + 1) for i in range(k) for j in range(i + 1, k)]
        return np.column_stack([x, *pairs]) if pairs else x

    def affected(self, j: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The design's columns that involve a knob of block j (its main effects and pairs), and
        each one's knobs: (columns, first knob, second knob or -1 for a main effect)."""
        if j not in self._affected:
            block = set(self.blocks[j])
            pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
            cols = sorted(block) + [k + p for p, (a, b) in enumerate(pairs) if a in block or b in block]
            first = [c if c < k else pairs[c - k][0] for c in cols]
            second = [-1 if c < k else pairs[c - k][1] for c in cols]
            self._affected[j] = (np.array(cols), np.array(first), np.array(second))
        return self._affected[j]

    def design_cols(self, x: np.ndarray, j: int) -> np.ndarray:
        """The columns of :meth:`design` that involve block j (:meth:`affected`), alone, for
        integer levels ``x`` (the same values as :meth:`design`'s).

        Example (num_workers' block holds prefetch_factor, its child):
            >>> x = np.array([[0, 1, 2], [1, -1, -1], [2, 0, 0]])
            >>> calc = _Indices(["nccl_algo", "num_workers", "prefetch_factor"], 0, x.astype(float))
            >>> cols = calc.affected(1, 3)[0]
            >>> bool((calc.design_cols(x, 1) == calc.design(x.astype(float))[:, cols]).all()), calc.blocks[1]
            (True, [1, 2])
        """
        k = x.shape[1]
        width = self.width
        _, first, second = self.affected(j, k)
        mains = len(self.blocks[j])   # affected lists the block's own columns first, then pairs
        out = np.empty((len(x), len(first)), np.int64)
        out[:, :mains] = x[:, first[:mains]]
        out[:, mains:] = (x[:, first[mains:]] + 1) * width + (x[:, second[mains:]] + 1)
        return out

    def fit(self, x: np.ndarray, y: np.ndarray) -> Surrogate:
        if self.cats is None:
            codes = self.design(self.x_all)
            self.cats = [np.unique(codes[:, c]) for c in range(codes.shape[1])]
        if self.table is None:
            self.table = code_table(self.cats, np.cumsum([0, *(len(c) for c in self.cats)]))
        return Surrogate(self.cats, self.design, x, y, self.alphas, self.table)

    def compute(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """[total..., first..., oob_r2] for the knobs of x's columns (placebo last)."""
        model = self.fit(x, y)
        self.alpha = model.alpha
        n, k = x.shape
        rng = np.random.default_rng(self.seed)
        flat, bases, lens = self.table
        beta = np.append(model.beta, 0.0)   # position -1 reads the appended 0
        contrib = beta[model.train_positions]   # each design column's share of each prediction
        f = contrib.sum(axis=1) + model.intercept
        var = float(np.var(f))
        total, first = np.zeros(k), np.zeros(k)
        xi = x.astype(np.int64)
        for j in range(k):
            rows = np.flatnonzero(x[:, j] >= 0) if self.conditional[j] else np.arange(n)
            m = len(rows)
            if m < 2:
                continue
            # _N_PERMS donors for the block, stacked: A with block j from B (Jansen's estimator)
            donor = np.concatenate([rows[rng.permutation(m)] for _ in range(_N_PERMS)])
            xt = xi[np.tile(rows, _N_PERMS)]
            xt[:, self.blocks[j]] = xi[donor[:, None], self.blocks[j]]
            # only the columns involving block j change: the rest of each prediction is f's
            cols = self.affected(j, k)[0]
            codes = self.design_cols(xt, j) + 1
            pos = flat[bases[cols] + np.minimum(codes, lens[cols] - 1)]
            pos[codes >= lens[cols]] = -1
            kept = np.tile(f[rows] - contrib[rows][:, cols].sum(axis=1), _N_PERMS)
            ft = (kept + beta[pos].sum(axis=1)).reshape(_N_PERMS, m)
            # Jansen: f(A) vs A with block j from B shares all but j -> total effect of j;
            # f(B) vs the same point shares only j -> V minus the first-order effect of j
            total[j] = np.mean((f[rows] - ft) ** 2) / 2 * (m / n)
            first[j] = np.mean((f[donor].reshape(_N_PERMS, m) - ft) ** 2) / 2 * (m / n)
        if var <= 0:
            return np.concatenate([np.zeros(k), np.zeros(k), [0.0]])
        total = total / var
        first = np.clip((np.array([len(np.flatnonzero(x[:, j] >= 0)) / n if self.conditional[j] else 1.0
                                   for j in range(k)]) * var - first) / var, 0.0, None)
        return np.concatenate([np.clip(total, 0.0, None), np.minimum(first, total), [model.r2]])


def _fit_inputs(trials: Sequence[TrialRecord], knobs: Sequence[str], *,
                ablation_runs: bool = False) -> tuple[list[TrialRecord], list[str]]:
    """The ok search runs the surrogate is fitted to (with ``ablation_runs``, the ablation's
    re-measurements and reverts too), and the knobs that vary among them."""
    ok = [t for t in trials if t.status == "ok" and t.value is not None and t.value > 0
          and (ablation_runs or t.role != "ablation")]
    return ok, [k for k in knobs if len({json.dumps(t.params.get(k)) for t in ok}) > 1]


def knob_importance(trials: Sequence[TrialRecord], knobs: Sequence[str], *, n_boot: int = N_BOOT,
                    seed: int = 0) -> dict[str, Any]:
    """{"knobs": [{knob, total, total_ci95, first_order, first_order_ci95, interaction,
    vs_placebo_ci95, matters, p_vs_placebo}], "placebo": {...}, "oob_r2", "n_trials", "n_boot", "method"}.

    Knobs sorted by total index, largest first. ``n_boot=0``: point estimates only (CIs None,
    ``matters`` from the point estimate against the placebo's).
    """

    ok, knobs = _fit_inputs(trials, knobs)
    empty = {"knobs": [{"knob": k, "total": None, "total_ci95": None, "first_order": None,
                        "first_order_ci95": None, "interaction": None, "vs_placebo_ci95": None,
                        "matters": None, "p_vs_placebo": None} for k in knobs],
             "placebo": None, "oob_r2": None, "n_trials": len(ok), "n_boot": 0}
    if len(ok) < _MIN_TRIALS or not knobs:
        return empty
    rng = np.random.default_rng(seed)
    placebo = rng.integers(0, _PLACEBO_LEVELS, len(ok)).astype(float)
    x = np.column_stack([_encode(ok, knobs), placebo])
    y = np.log([t.value for t in ok])
    calc = _Indices([*knobs, PLACEBO], seed, x)
    k = len(knobs) + 1

    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small matrices: BLAS threads only contend on a shared machine
        return _bootstrapped(calc, x, y, ok, knobs, k, n_boot, seed)


def _bootstrapped(calc: _Indices, x: np.ndarray, y: np.ndarray, ok: Sequence[TrialRecord],
                  knobs: Sequence[str], k: int, n_boot: int, seed: int) -> dict[str, Any]:
    from scipy import stats

    def statistic(idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, int)
        out = calc.compute(x[idx], y[idx])
        total = out[:k]
        return np.concatenate([out[: 2 * k], total[:-1] - total[-1]])

    point_full = calc.compute(x, y)
    # resamples keep the penalty the trials chose: a resample's repeated trials would make its
    # leave-one-out error leak (a left-out trial's copy stays in), choosing ever smaller penalties
    calc.alphas = (calc.alpha,)
    point = np.concatenate([point_full[: 2 * k], point_full[: k - 1] - point_full[k - 1]])
    lo = hi = strict_lo = p_placebo = None
    # "matters" is decided for every knob at once: each difference's interval at 1 - 5%/knobs
    # (Bonferroni), so that the chance any knob without an effect is called one stays <= 5%
    strict_level = 1 - (1 - CONFIDENCE) / max(1, k - 1)
    if n_boot > 0:
        # one bootstrap distribution and one jackknife serve both levels (scipy's BCa would
        # refit the jackknife for each); bca_limits applies scipy's BCa formulas, and where BCa
        # is undefined for a component (resamples nearly all equal: a knob the surrogate
        # ignores) the percentile interval of the same resamples
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            res = stats.bootstrap((np.arange(len(ok)),), statistic, vectorized=False, method="percentile",
                                  n_resamples=n_boot, random_state=np.random.default_rng(seed + 1))
            dist = np.asarray(res.bootstrap_distribution)
            groups = len(ok) if len(ok) <= JACKKNIFE_EXACT_MAX else JACKKNIFE_GROUPS
            jack = grouped_jackknife(statistic, len(ok), groups, seed)
            lo, hi = bca_limits(dist, point, jack, CONFIDENCE)
            strict_lo = bca_limits(dist, point, jack, strict_level)[0] if k > 2 else lo
            p_placebo = bca_p_values(dist[2 * k:], point[2 * k:], jack[2 * k:])

    method = ("BCa" if len(ok) <= JACKKNIFE_EXACT_MAX
              else f"BCa with a grouped jackknife ({JACKKNIFE_GROUPS} groups) for the acceleration")

    def ci(i: int) -> list[float] | None:
        return None if lo is None else [float(max(lo[i], 0.0)) if i < 2 * k else float(lo[i]), float(hi[i])]

    rows = []
    for j, name in enumerate(knobs):
        diff_ci = ci(2 * k + j)
        matters = bool(strict_lo[2 * k + j] > 0) if strict_lo is not None else bool(point[2 * k + j] > 0)
        rows.append({"knob": name, "total": float(point[j]), "total_ci95": ci(j),
                     "first_order": float(point[k + j]), "first_order_ci95": ci(k + j),
                     "interaction": float(max(point[j] - point[k + j], 0.0)),
                     "vs_placebo_ci95": diff_ci, "matters": bool(matters),
                     "p_vs_placebo": None if p_placebo is None else float(p_placebo[j])})
    rows.sort(key=lambda d: -d["total"])
    return {"knobs": rows,
            "placebo": {"knob": PLACEBO, "levels": _PLACEBO_LEVELS, "total": float(point[k - 1]),
                        "total_ci95": ci(k - 1)},
            "oob_r2": None if math.isnan(point_full[-1]) else float(point_full[-1]),
            "n_trials": len(ok), "n_boot": n_boot,
            "method": ("second-order ANOVA surrogate (ridge) of log tokens/s/GPU over ok trials; total- and "
                       "first-order indices (Jansen); conditional knobs within their parent's branch; a knob "
                       f"matters when its total index beats a {_PLACEBO_LEVELS}-level random placebo's (the "
                       f"difference's {strict_level:.1%} CI above 0: Bonferroni over the {k - 1} knobs, "
                       f"family-wise 5%); scipy.stats.bootstrap {method}, {n_boot} resamples over trials")}
