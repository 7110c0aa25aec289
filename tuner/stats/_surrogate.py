"""The surrogate behind knob importance: a second-order ANOVA model (ridge on one-hot codes).

Ridge regression (Hoerl & Kennard 1970, *Technometrics* 12) with its penalty chosen by
closed-form leave-one-out error, on one-hot codes of each knob's level and each pair's joint
level (the design: tuner.stats' importance). Predictions look each code up in its column's
coefficients; the ridge is solved in whichever of the trials' and the columns' spaces is
smaller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["Surrogate", "code_table", "ALPHAS"]

ALPHAS = tuple(np.logspace(-3, 3, 13))
"""Ridge penalties tried (the one with the smallest leave-one-out error is used)."""


def code_table(cats: list[np.ndarray], offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One flat lookup table for every code column: (table, each column's start, its length);
    code + 1 of column c sits at table[start_c + code + 1] (-1: a code the fit never saw)."""
    tables = []
    for c, cat in enumerate(cats):
        table = np.full(int(cat.max(initial=0)) + 2, -1, dtype=np.int64)
        table[cat.astype(np.int64) + 1] = offsets[c] + np.arange(len(cat))
        tables.append(table)
    lens = np.array([len(t) for t in tables], dtype=np.int64)
    bases = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    return np.concatenate(tables) if tables else np.array([], np.int64), bases, lens


class Surrogate:
    """A fitted second-order ANOVA surrogate (ridge on one-hot codes) and its LOO R^2.

    The one-hot matrix is formed for the fit only. Predictions look each code up in its
    column's coefficients (the same sum, without the rows x one-hot-columns product), and the
    ridge is solved in whichever of the trials' (n x n) and the columns' (p x p) spaces is
    smaller, so a 10,000-trial study costs a p x p eigendecomposition, not an n x n one.
    """

    def __init__(self, cats: list[np.ndarray], design, x: np.ndarray, y: np.ndarray,
                 alphas: Sequence[float] = ALPHAS, table: tuple[np.ndarray, ...] | None = None) -> None:
        self.cats, self.design = cats, design
        self.offsets = np.cumsum([0, *(len(c) for c in cats)])
        if table is not None:
            self._table = table
        n, p = len(x), int(self.offsets[-1])
        # a one-hot matrix's products are counts, exact in float32 below 2**24 rows
        self.train_positions = self.positions(x)
        f = self._onehot(self.train_positions, np.float32 if len(alphas) == 1 and p < n < 2**24 else np.float64)
        self.f_mean, self.y_mean = f.mean(axis=0, dtype=np.float64), float(y.mean())
        yc = y - self.y_mean
        if len(alphas) == 1:
            # a resample refit with the penalty already chosen: no leave-one-out search, so one
            # Cholesky solve in the smaller of the two spaces (the same ridge solution as below).
            # With more trials than columns the centred Gram matrix is f'f - n m m' (no centred
            # copy of f; f'f in float32 is exact and twice as fast), and f'yc = fc'yc as yc sums to 0
            from scipy.linalg import cho_factor, cho_solve

            self.alpha = float(alphas[0])
            if n > p:
                gram = (f.T @ f).astype(np.float64)
                gram -= (n * self.f_mean)[:, None] * self.f_mean
                seen = self.train_positions >= 0
                rhs = np.bincount(self.train_positions[seen], np.broadcast_to(yc[:, None], seen.shape)[seen],
                                  minlength=p)
            else:
                fc = f - self.f_mean
                gram, rhs = fc @ fc.T, yc
            gram[np.diag_indices_from(gram)] += self.alpha
            try:
                sol = cho_solve(cho_factor(gram, check_finite=False), rhs, check_finite=False)
            except np.linalg.LinAlgError:   # alpha > 0 keeps it positive definite; rounding aside
                sol = np.linalg.lstsq(gram, rhs, rcond=None)[0]
            self.beta = sol if n > p else fc.T @ sol
            self.intercept = self.y_mean - float(self.f_mean @ self.beta)
            self.r2 = math.nan
            return
        fc = f - self.f_mean
        if n <= p:  # the n x n Gram matrix's eigenvectors are fc's left singular vectors
            ev, u = np.linalg.eigh(fc @ fc.T)
            sv2 = np.clip(ev, 0.0, None)
        else:  # the p x p one's are its right singular vectors: u = fc v / s where s > 0
            ev, v = np.linalg.eigh(fc.T @ fc)
            sv2 = np.clip(ev, 0.0, None)
            keep = sv2 > sv2.max(initial=0.0) * 1e-12
            sv2, v = sv2[keep], v[:, keep]
            u = (fc @ v) / np.sqrt(sv2)
        uy = u.T @ yc
        best = (math.inf, 0.0)
        for alpha in alphas:  # leave-one-out residuals in closed form (the hat matrix's diagonal)
            shrink = sv2 / (sv2 + alpha)
            hat = (u**2) @ shrink + 1.0 / n
            loo = (yc - u @ (shrink * uy)) / np.maximum(1.0 - hat, 1e-9)
            mse = float(np.mean(loo**2))
            if mse < best[0]:
                best = (mse, alpha)
        mse, alpha = best
        self.alpha = alpha
        self.beta = fc.T @ (u @ (uy / (sv2 + alpha)))
        self.intercept = self.y_mean - float(self.f_mean @ self.beta)
        self.r2 = 1.0 - mse / float(np.var(y)) if np.var(y) > 0 else math.nan

    def positions(self, x: np.ndarray) -> np.ndarray:
        """Each row's one-hot column per code column (-1: a code the fit never saw). Codes are
        small integers (levels, and pairs of levels: tuner.stats' design), so a dense table per
        column maps a code to its column."""
        if not hasattr(self, "_table"):
            self._table = code_table(self.cats, self.offsets)
        flat, bases, lens = self._table
        codes = self.design(x).astype(np.int64) + 1  # -1 (a conditional knob off) -> 0
        out = flat[bases + np.minimum(codes, lens - 1)]
        out[codes >= lens] = -1
        return out

    def onehot(self, x: np.ndarray) -> np.ndarray:
        return self._onehot(self.positions(x), np.float64)

    def _onehot(self, pos: np.ndarray, dtype) -> np.ndarray:
        f = np.zeros((len(pos), int(self.offsets[-1])), dtype)
        rows = np.repeat(np.arange(len(pos)), pos.shape[1])
        flat = pos.ravel()
        f[rows[flat >= 0], flat[flat >= 0]] = 1.0
        return f

    def predict(self, x: np.ndarray) -> np.ndarray:
        pos = self.positions(x)
        beta = np.append(self.beta, 0.0)  # position -1 reads the appended 0
        return beta[pos].sum(axis=1) + self.intercept
