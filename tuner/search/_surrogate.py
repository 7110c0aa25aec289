"""The model-guided sampler's math, pure: plain arrays in, numbers out (tuner.search).

The sampler's belief is :func:`evidence_gp` (the model as a prior mean with a learned weight,
each knob level's own effect, interactions; scales by :func:`evidence_scales`). The older
:func:`residual_gp` is helper's calibrated model times a learned correction:

    log y(x) = log model(x; constants refitted to this study) + r(x),
    r ~ GP(0, s^2 exp(-hamming(x, x') / ell)) + N(0, noise^2)

a Gaussian process on the model's log residuals over the knob values (categorical knobs, so
the distance is the number of knobs that differ). Where the study has measured nothing
nearby, the model's prediction stands with the prior residual spread ``s``; near measured
configs the residual is learned. This is the "physics model as GP prior mean" construction
(e.g. Rasmussen & Williams 2006, Sec. 2.7, explicit basis functions). The next config
maximises expected improvement (Jones et al. 1998, eq. 15) in log throughput, times the
probability that it fits in memory.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.stats import norm

__all__ = ["residual_gp", "evidence_gp", "evidence_scales", "study_belief", "covered",
           "expected_improvement", "prob_fits", "diverse_top", "hamming",
           "cover_gain"]



def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of differing knobs between each row of ``a`` (n x k codes) and of ``b`` (m x k).

    Computed as k - (one-hot a) @ (one-hot b)^T, one matrix product.

    Example:
        >>> hamming(np.array([[0, 1], [1, 1]]), np.array([[0, 0]])).ravel().tolist()
        [1.0, 2.0]
    """
    return _differing(a, b).astype(float)


def _differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`hamming` as integers (an index into a table of the distance's terms)."""
    if a.size == 0 or b.size == 0:
        return np.zeros((len(a), len(b)), dtype=np.intp)
    k = a.shape[1]
    lo = min(int(a.min()), int(b.min()))
    width = max(int(a.max()), int(b.max())) - lo + 1
    offsets = np.arange(k) * width

    def one_hot(x: np.ndarray) -> np.ndarray:
        out = np.zeros((len(x), k * width), dtype=np.float32)  # counts <= k: exact in float32
        out[np.arange(len(x))[:, None], x - lo + offsets] = 1.0
        return out

    return (k - one_hot(a) @ one_hot(b).T).astype(np.intp)


def residual_gp(x_obs: np.ndarray, r_obs: np.ndarray, x_cand: np.ndarray, *, signal_sd: float,
                noise_sd: float, lengthscale: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of the log residual at ``x_cand`` (GP regression, zero prior mean).

    Example:
        >>> m, s = residual_gp(np.array([[0, 0]]), np.array([0.2]), np.array([[0, 0], [1, 1]]),
        ...                    signal_sd=0.1, noise_sd=0.01)
        >>> round(float(m[0]), 3), bool(s[0] < s[1] <= 0.1)
        (0.198, True)
    """
    if len(r_obs) == 0:
        return np.zeros(len(x_cand)), np.full(len(x_cand), signal_sd)
    k_oo = signal_sd**2 * np.exp(-hamming(x_obs, x_obs) / lengthscale) + noise_sd**2 * np.eye(len(r_obs))
    k_co = signal_sd**2 * np.exp(-hamming(x_cand, x_obs) / lengthscale)
    chol = np.linalg.cholesky(k_oo)
    alpha = solve_triangular(chol.T, solve_triangular(chol, r_obs, lower=True), lower=False)
    v = solve_triangular(chol, k_co.T, lower=True)
    mean = k_co @ alpha
    var = np.clip(signal_sd**2 - (v * v).sum(axis=0), 1e-12, None)
    return mean, np.sqrt(var)


def evidence_gp(x_obs: np.ndarray, y_obs: np.ndarray, m_obs: np.ndarray, x_cand: np.ndarray, m_cand: np.ndarray, *,
                level_sd: float, interaction_sd: float, noise_sd: float, weight_sd: float = 1.0,
                offset_sd: float = 0.3, lengthscale: float = 1.5) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean and sd of log throughput at ``x_cand``, and the model's weight, where
    measurements overrule the model:

        log y(x) = c + beta m~(x) + sum_k a_k[x_k] + g(x) + eps,   m~ = m - mean m

    around the prior mean m(x) (the calibrated model's log prediction): c ~ N(0, offset_sd^2)
    its level, beta - 1 ~ N(0, weight_sd^2) its weight, a_k[v] ~ N(0, level_sd^2) each knob
    level's own effect (an additive kernel: one level's measurements inform every config that
    has it), g ~ GP(0, interaction_sd^2 exp(-hamming / ell)) what the knobs do together, eps
    ~ N(0, noise_sd^2). All Gaussian, so one GP (Rasmussen & Williams 2006, Sec. 2.7, explicit
    basis functions; Duvenaud et al. 2011 for the additive kernel). ``beta``'s posterior mean is
    returned: 1 where the model's differences between configs hold on this study's
    measurements, towards 0 where they do not explain them (its weight drops, the knobs'
    measured effects take over).

    Example:
        >>> x = np.array([[0, 0], [1, 0], [0, 1]])
        >>> m, s, w = evidence_gp(x, np.array([0.0, 0.2, 0.0]), np.zeros(3), np.array([[1, 1]]), np.zeros(1),
        ...                       level_sd=0.1, interaction_sd=0.02, noise_sd=0.01)
        >>> bool(m[0] > 0.15), round(w, 2)   # knob 0's level 1 measured better, so [1, 1] is too
        (True, 1.0)
    """
    k = x_cand.shape[1] if x_cand.ndim == 2 else 0
    centre = float(np.mean(np.concatenate([m_obs, m_cand]))) if len(m_obs) + len(m_cand) else 0.0
    mo, mc = m_obs - centre, m_cand - centre
    scales = dict(level_sd=level_sd, interaction_sd=interaction_sd, weight_sd=weight_sd, offset_sd=offset_sd,
                  lengthscale=lengthscale)
    prior_var = offset_sd**2 + weight_sd**2 * mc**2 + level_sd**2 * k + interaction_sd**2
    if len(y_obs) == 0:
        return m_cand.copy(), np.sqrt(prior_var), 1.0
    k_oo = _evidence_kernel(x_obs, x_obs, mo, mo, **scales) + noise_sd**2 * np.eye(len(y_obs))
    k_co = _evidence_kernel(x_cand, x_obs, mc, mo, **scales)
    chol = np.linalg.cholesky(k_oo + 1e-10 * np.eye(len(y_obs)))
    alpha = solve_triangular(chol.T, solve_triangular(chol, y_obs - m_obs, lower=True), lower=False)
    # L^-1 once (n^3 / 3), then one matrix product for every candidate: BLAS's triangular
    # solve with thousands of right-hand sides ran at half a product's speed
    v = solve_triangular(chol, np.eye(len(y_obs)), lower=True) @ k_co.T
    mean = m_cand + k_co @ alpha
    var = np.clip(prior_var - (v * v).sum(axis=0), 1e-12, None)
    beta = 1.0 + weight_sd**2 * float(mo @ alpha)
    return mean, np.sqrt(var), beta


def _evidence_kernel(a: np.ndarray, b: np.ndarray, ma: np.ndarray, mb: np.ndarray, *, level_sd: float,
                     interaction_sd: float, weight_sd: float, offset_sd: float, lengthscale: float) -> np.ndarray:
    # every term but the model's is a function of the distance, an integer 0..k: one table
    k = a.shape[1] if a.ndim == 2 else 0
    d = np.arange(k + 1)
    table = offset_sd**2 + level_sd**2 * (k - d) + interaction_sd**2 * np.exp(-d / lengthscale)
    out = table.take(_differing(a, b))
    out += weight_sd**2 * np.outer(ma, mb)
    return out


def evidence_scales(x_obs: np.ndarray, y_obs: np.ndarray, m_obs: np.ndarray, *, noise_sd: float,
                    weight_sd: float = 1.0, offset_sd: float = 0.3, lengthscale: float = 1.5,
                    level_sds: tuple[float, ...] = (0.01, 0.02, 0.04, 0.08, 0.16),
                    interaction_sds: tuple[float, ...] = (0.01, 0.03, 0.1)) -> tuple[float, float]:
    """(level_sd, interaction_sd) of :func:`evidence_gp` that make this study's measurements
    most likely (type-II maximum likelihood over a small grid, Rasmussen & Williams 2006,
    Sec. 5.4): how much each knob's levels and their combinations move throughput here, from
    the measurements rather than from the model's error.

    Example:
        >>> x = np.array([[a, b] for a in range(3) for b in range(3)])
        >>> evidence_scales(x, 0.15 * x[:, 0], np.zeros(9), noise_sd=0.01)[0] >= 0.08
        True
    """
    mo = m_obs - float(np.mean(m_obs)) if len(m_obs) else m_obs
    r = y_obs - m_obs
    best, best_ll = (level_sds[len(level_sds) // 2], interaction_sds[0]), -np.inf
    ham = hamming(x_obs, x_obs)   # one distance matrix for the whole grid
    # the kernel's parts that the grid does not change, once (:func:`_evidence_kernel`'s sum)
    fixed = offset_sd**2 + weight_sd**2 * np.outer(mo, mo)
    shared = x_obs.shape[1] - ham
    near = np.exp(-ham / lengthscale)
    noise = noise_sd**2 * np.eye(len(r))
    for lv in level_sds:
        for ia in interaction_sds:
            k_oo = fixed + lv**2 * shared + ia**2 * near + noise
            try:
                chol = np.linalg.cholesky(k_oo)
            except np.linalg.LinAlgError:
                continue
            z = solve_triangular(chol, r, lower=True)
            ll = -0.5 * float(z @ z) - float(np.log(np.diag(chol)).sum())
            if ll > best_ll:
                best, best_ll = (lv, ia), ll
    return best


def study_belief(x_obs: np.ndarray, y_obs: np.ndarray, m_obs: np.ndarray, x_pend: np.ndarray, m_pend: np.ndarray,
                 x_cand: np.ndarray, m_cand: np.ndarray, *, prior_sd: float, noise_sd: float, weight_sd: float,
                 min_fit: int, level_sds: tuple[float, ...], interaction_sds: tuple[float, ...],
                 ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The model-guided sampler's belief: (mean, sd of log throughput at ``x_cand``, the
    model's weight, its error sd), :func:`evidence_gp` over a study's measurements. Its scales
    are fitted to them (:func:`evidence_scales`) once there are ``min_fit``; before, the model's
    error (``prior_sd`` until 3 are measured) is spread over the knobs. Pending configs count
    as measured at their believed value (a "kriging believer" constant liar)."""
    r = y_obs - m_obs
    signal = prior_sd if len(r) < 3 else float(np.clip(1.25 * np.sqrt(np.mean((r - r.mean())**2)), 0.03, 0.3))
    if len(y_obs) >= min_fit:
        level_sd, interaction_sd = evidence_scales(x_obs, y_obs, m_obs, noise_sd=noise_sd, weight_sd=weight_sd,
                                                   level_sds=level_sds, interaction_sds=interaction_sds)
    else:
        level_sd, interaction_sd = 1.5 * signal / np.sqrt(max(1, x_cand.shape[1])), signal / 2
    opts = dict(level_sd=level_sd, interaction_sd=interaction_sd, noise_sd=noise_sd, weight_sd=weight_sd)
    if len(x_pend):
        mean_p, _, _ = evidence_gp(x_obs, y_obs, m_obs, x_pend, m_pend, **opts)
        x_obs, y_obs, m_obs = np.vstack([x_obs, x_pend]), np.concatenate([y_obs, mean_p]), np.concatenate([m_obs, m_pend])
    mean, sd, beta = evidence_gp(x_obs, y_obs, m_obs, x_cand, m_cand, **opts)
    return mean, sd, beta, signal


def covered(tried: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The (knob x level) table of levels some ``tried`` config has (``codes``: the grid's).

    Example:
        >>> covered(np.array([[0, 1]]), np.array([[0, 0], [1, 1]])).tolist()
        [[True, False], [False, True]]
    """
    width = int(codes.max()) + 1 if codes.size else 1
    table = np.zeros((codes.shape[1], width), dtype=bool)
    for row in tried:
        table[np.arange(codes.shape[1]), np.clip(row, 0, width - 1)] = True
    return table


def cover_gain(codes: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """How many knob levels each candidate would give their first evidence: the count of its
    (knob, level) pairs not yet ``covered`` (a knobs x levels boolean table).

    Example:
        >>> cover_gain(np.array([[0, 0], [1, 1], [1, 0]]), np.array([[True, False], [True, False]])).tolist()
        [0, 2, 1]
    """
    if codes.size == 0:
        return np.zeros(len(codes), dtype=int)
    return (~covered[np.arange(codes.shape[1]), np.clip(codes, 0, covered.shape[1] - 1)]
            & (codes >= 0)).sum(axis=1)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """E[max(0, Y - best)] for Y ~ N(mu, sd^2) (Jones et al. 1998, eq. 15).

    Example:
        >>> round(float(expected_improvement(np.array([0.0]), np.array([1.0]), 0.0)[0]), 4)
        0.3989
    """
    sd = np.maximum(sd, 1e-12)
    z = (mu - best) / sd
    return sd * (z * norm.cdf(z) + norm.pdf(z))


def prob_fits(predicted_gb: np.ndarray, capacity_gb: float, log_ratio_mean: float, log_ratio_sd: float) -> np.ndarray:
    """P(predicted x ratio <= capacity) with log ratio ~ N(mean, sd): measured/predicted peaks.

    Example:
        >>> prob_fits(np.array([40.0, 80.0, 160.0]), 80.0, 0.0, 0.05).round(2).tolist()
        [1.0, 0.5, 0.0]
    """
    z = (np.log(capacity_gb) - np.log(np.maximum(predicted_gb, 1e-9)) - log_ratio_mean) / max(log_ratio_sd, 1e-6)
    return norm.cdf(z)


def diverse_top(scores: np.ndarray, codes: np.ndarray, taken: np.ndarray, *, min_distance: int = 2) -> int:
    """Index of the best score among candidates at least ``min_distance`` knobs from every
    ``taken`` config (the best overall when none is that far).

    Example:
        >>> diverse_top(np.array([3.0, 2.0, 1.0]), np.array([[0, 0], [0, 1], [1, 1]]),
        ...             np.array([[0, 0]]))
        2
    """
    order = np.argsort(-scores, kind="stable")
    if len(taken) == 0:
        return int(order[0])
    far = hamming(codes, taken).min(axis=1) >= min_distance
    for i in order:
        if far[i]:
            return int(i)
    return int(order[0])
