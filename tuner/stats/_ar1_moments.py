"""AR(1) step noise read from short runs' residuals, by moments that count what fitting took away.

Over a run of 8 steps, removing the run's mean (and a slope) takes a large share of an
autocorrelated series' variance and lag-1 covariance: the usual lag-1 estimate reads phi 0.5
as about 0.4 and the residual variance comes out 20% low, so an interval built on them is too
short. Here each run's residuals are r = Q e, Q = I - U U' (U: an orthonormal basis of what
was fitted per run: its mean, a slope), e AR(1) with correlation R_jk = phi^|t_j - t_k| at
its steps' indices ``t`` (gaps allowed: steps left out). Then

    E[sum r'r] = sigma^2 sum tr(Q R),    E[sum over steps one apart r_j r_k] = sigma^2 sum tr(Q R Q L),

L the pairs of steps one index apart. phi solves the ratio of the two (it rises with phi);
sigma^2 then follows from the first. Pure numpy, O(n^2) per run and trial phi.

Example:
    >>> rng = np.random.default_rng(0)
    >>> parts = []
    >>> for _ in range(400):
    ...     e = np.empty(8); e[0] = rng.normal()
    ...     for j in range(1, 8): e[j] = 0.5 * e[j - 1] + np.sqrt(0.75) * rng.normal()
    ...     parts.append(residual_part(np.arange(8), e))
    >>> phi, sigma2 = ar1_moments(parts)
    >>> round(phi, 1), round(sigma2, 1)
    (0.5, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ResidualPart", "residual_part", "ar1_moments", "correlation"]

PHI_MAX = 0.95


@dataclass(frozen=True)
class ResidualPart:
    t: np.ndarray
    """The steps' indices (increasing)."""
    r: np.ndarray
    """The residuals after the run's fit."""
    u: np.ndarray
    """n x k orthonormal basis of the fitted directions."""


def residual_part(t: np.ndarray, y: np.ndarray, regressor: np.ndarray | None = None) -> ResidualPart:
    """One run's residuals about its own mean (and its own slope on ``regressor``, if given)."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    cols = [np.ones(len(y)) / np.sqrt(len(y))]
    if regressor is not None:
        g = np.asarray(regressor, float) - np.mean(regressor)
        if float(g @ g) > 1e-12:
            cols.append(g / np.sqrt(float(g @ g)))
    u = np.column_stack(cols)
    return ResidualPart(t=t, r=y - u @ (u.T @ y), u=u)


def correlation(t: np.ndarray, phi: float) -> np.ndarray:
    """R_jk = phi^|t_j - t_k|."""
    return phi ** np.abs(np.subtract.outer(t, t))


def _traces(part: ResidualPart, phi: float) -> tuple[float, float]:
    """(tr(Q R), tr(Q R Q L)) with Q = I - U U', by U's rank: O(n^2)."""
    t, u = part.t, part.u
    r = correlation(t, phi)
    a = r @ u                      # R U
    b = u.T @ a                    # U' R U
    tr_qr = len(t) - float(np.trace(b))
    pairs = np.flatnonzero(np.diff(t) == 1)
    if pairs.size == 0:
        return tr_qr, 0.0
    i, j = pairs + 1, pairs        # (Q R Q)_{i, j} for each pair
    qrq = (r[i, j] - np.einsum("pk,pk->p", u[i], a[j]) - np.einsum("pk,pk->p", a[i], u[j])
           + np.einsum("pk,kl,pl->p", u[i], b, u[j]))
    return tr_qr, float(qrq.sum())


def _ratio(groups: Sequence[tuple[ResidualPart, int]], phi: float) -> tuple[float, float]:
    tr_qr = tr_lag = 0.0
    for part, count in groups:
        a, b = _traces(part, phi)
        tr_qr, tr_lag = tr_qr + count * a, tr_lag + count * b
    return tr_lag / tr_qr if tr_qr > 0 else 0.0, tr_qr


def _shapes(parts: Sequence[ResidualPart]) -> list[tuple[ResidualPart, int]]:
    """Runs with the same step indices and fitted basis share their traces: each shape once, counted."""
    shapes: dict[bytes, list] = {}
    for p in parts:
        key = np.round(p.t, 9).tobytes() + b"|" + np.round(p.u, 9).tobytes()
        shapes.setdefault(key, [p, 0])[1] += 1
    return [(p, n) for p, n in shapes.values()]


def ar1_moments(parts: Sequence[ResidualPart]) -> tuple[float, float]:
    """(phi in [0, PHI_MAX], sigma^2) of the module doc; (0, 0) without residual degrees of freedom."""
    squares = sum(float(p.r @ p.r) for p in parts)
    lag = sum(float(p.r[k + 1] @ p.r[k]) if (k := np.flatnonzero(np.diff(p.t) == 1)).size else 0.0
              for p in parts)
    if squares <= 0:
        return 0.0, 0.0
    target, groups = lag / squares, _shapes(parts)
    lo, hi = 0.0, PHI_MAX
    if _ratio(groups, lo)[0] >= target:
        phi = lo
    elif _ratio(groups, hi)[0] <= target:
        phi = hi
    else:
        for _ in range(20):        # the ratio rises with phi: bisection, to 1e-6
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _ratio(groups, mid)[0] < target else (lo, mid)
        phi = (lo + hi) / 2
    tr_qr = _ratio(groups, phi)[1]
    return phi, squares / tr_qr if tr_qr > 0 else 0.0
