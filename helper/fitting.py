"""Fit the model's free constants to measured throughput (``fit_calibration``).

Per GPU model (or per group of GPU models ``tied`` as one chip on one network), a
maximum-a-posteriori fit with ``scipy.optimize.least_squares``:

- data residuals ``(log predicted - log measured) / noise`` (relative errors, so a
  2,000 and a 20,000 tokens/s measurement weigh alike; ``noise`` is ``noise_rel``, widened by
  the part's ``peak_rel_sd`` where its peak is modelled, a power-capped H100);
- one prior residual per constant, ``(z - z_prior) / prior_sigma`` on the logit (fractions)
  or log (positive) scale, so constants no measurement exercises stay at their prior.

A constant counts as *informed* when the data shrink its conditional standard deviation (the
others held fixed, from the Jacobian at the optimum) below half the prior's. The rest are
pinned at their base values and the informed ones refitted as one set, so what is written is
one consistent optimum; only informed constants are written into the GPU's block.
Where several GPU groups are fitted together, the second pass takes some priors from the
other groups' first fits (:func:`helper.ties.prior_ties`: flash attention in units of its
kernel's published ceiling; host and software constants as they are), so a GPU whose rows
barely exercise a constant does not fit it to whatever its other constants leave over.
``quality`` reports leave-one-out error (each measurement predicted by a refit without it)
next to the in-sample error; ``loo_errors`` lists each as ``[gpu, gpu_count, % error]`` for
:mod:`helper.band`. Measurements whose
padding efficiency is unknown (``padding`` mode given, ``padding_efficiency`` absent) get
one nuisance constant per mode, ``padding_efficiency_<mode>``.
"""

from __future__ import annotations

import copy
import datetime as _dt
import statistics
from collections import defaultdict
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from helper.calibration import CONSTANTS, PRIORS, SCHEMA_VERSION, load_calibration, resolve_constants
from helper.collectives import UnsupportedCollective
from helper.layouts import Layout, LayoutStepPlan, layout_speed_ratio
from helper.measurements import measurement_plan
from helper.noise import estimate_noise_rel
from helper.throughput import StepPlan, step_time_breakdown
from helper.ties import decode_kind, encode_kind, prior_ties

__all__ = ["fit_calibration", "measurement_plan", "KNOBS_REPORTED"]

KNOBS_REPORTED = ("nccl_algo", "nccl_proto", "num_workers", "prefetch_factor", "grad_accum",
                  "micro_batch", "padding", "activation_checkpointing", "sharding", "gpu_count")
_STARTUP = ("startup_fixed_s", "model_init_s_per_gparam")
_FITTED = tuple(k for k, spec in CONSTANTS.items() if k not in _STARTUP and spec.fitted)
_PADDING_PRIOR = 0.5  # unknown share of real tokens; logit-scale prior sigma 2 (very weak)


def _encode(name: str, value: float) -> float:
    return encode_kind(CONSTANTS[name].kind if name in CONSTANTS else "fraction", value)


def _decode(name: str, z: float) -> float:
    return decode_kind(CONSTANTS[name].kind if name in CONSTANTS else "fraction", z)


def _sigma(name: str) -> float:
    return CONSTANTS[name].prior_sigma if name in CONSTANTS else 2.0


def _predict(plan: StepPlan, pad_key: str | None, consts: dict[str, float]) -> float:
    if isinstance(plan, LayoutStepPlan):  # HSDP / TP: the FSDP prediction x helper.layouts' ratio
        tps = step_time_breakdown(plan.plan, consts)["tokens_per_sec_per_gpu"] * layout_speed_ratio(
            plan.plan, plan.layout, consts, reshard_after_forward=plan.reshard_after_forward)
        return tps * consts.get(pad_key, _PADDING_PRIOR) if pad_key else tps
    tps = step_time_breakdown(plan, consts)["tokens_per_sec_per_gpu"]
    return tps * consts.get(pad_key, _PADDING_PRIOR) if pad_key else tps


def _pct_errors(items, consts_by_gpu) -> list[float]:
    return [100.0 * (_predict(p, k, consts_by_gpu[p.gpu.name]) / meas - 1.0) for _, p, k, meas in items]


def _fit_group(items: list, base_consts: dict[str, float], noise_rel: float, max_nfev: int,
               n_starts: int = 5, free: list[str] | None = None, start: dict[str, float] | None = None,
               sigma: dict[str, float] | None = None):
    pad_keys = sorted({k for _, _, k, _ in items if k})
    names = [k for k in (free if free is not None else _FITTED) if not k.startswith("padding_")] + pad_keys
    prior = {**base_consts, **{k: base_consts.get(k, _PADDING_PRIOR) for k in pad_keys}}
    z0 = np.array([_encode(nm, prior[nm]) for nm in names])
    sig = np.array([(sigma or {}).get(nm, _sigma(nm)) for nm in names])
    meas = np.log(np.array([mv for *_, mv in items]))
    noise = np.sqrt(noise_rel**2 + np.array([p.gpu.peak_rel_sd for _, p, _, _ in items]) ** 2)

    def consts_of(z: np.ndarray) -> dict[str, float]:
        return {**prior, **{nm: _decode(nm, float(zi)) for nm, zi in zip(names, z)}}

    def residuals(z: np.ndarray) -> np.ndarray:
        c = consts_of(z)
        pred = np.log([_predict(p, k, c) for _, p, k, _ in items])
        return np.concatenate([(pred - meas) / noise, (z - z0) / sig])

    # Multi-start: NCCL's LL bandwidth cap (a min) and the overlap max() make the cost
    # piecewise smooth, so one descent can stall; the prior and seeded +-1 sigma perturbations.
    rng = np.random.default_rng(0)
    first = z0 if start is None else np.array([_encode(nm, start.get(nm, prior[nm])) for nm in names])
    starts = [first] + [z0 + sig * rng.uniform(-1.0, 1.0, size=z0.size) for _ in range(n_starts - 1)]
    res = min((least_squares(residuals, s, method="trf", max_nfev=max_nfev) for s in starts),
              key=lambda r: r.cost)
    jac = np.asarray(res.jac)
    cov = np.linalg.pinv(jac.T @ jac)
    post_sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    # Informed = the data move it: its sd with the other constants held fixed (1 / sqrt of
    # the precision's diagonal) is under half the prior's. The marginal sd would call two
    # correlated constants (efficiency and a size term) uninformed, pin one at its prior and
    # leave the other to absorb everything.
    cond_sd = 1.0 / np.sqrt(np.clip(np.diag(jac.T @ jac), 1e-300, None))
    informed = [nm for nm, sd, s in zip(names, cond_sd, sig) if sd < 0.5 * s]
    fitted = consts_of(res.x)
    return fitted, informed, dict(zip(names, post_sd.tolist())), bool(res.success)


def _loo_errors(group: list, base_consts: dict[str, float], noise_rel: float, max_nfev: int,
                free: list[str], fitted: dict[str, float], sigma: dict[str, float] | None = None) -> list[float]:
    """% error on each measurement of a refit without it (same free constants and priors, warm start)."""
    errs = []
    for j, held in enumerate(group):
        rest = group[:j] + group[j + 1:]
        consts, *_ = _fit_group(rest, base_consts, noise_rel, max_nfev, 1, free=free, start=fitted, sigma=sigma)
        _, plan, key, meas = held
        if key and key not in consts:
            consts = {**consts, key: fitted.get(key, _PADDING_PRIOR)}
        errs.append(100.0 * (_predict(plan, key, consts) / meas - 1.0))
    return errs


def _members(group: list) -> list[str]:
    return sorted({p.gpu.name for _, p, _, _ in group})


def _loo_summary(loo: list[float], abs_in: list[float]) -> dict[str, Any]:
    if not loo:
        return {"loo_median_abs_pct_error": None, "loo_max_abs_pct_error": None,
                "loo_to_in_sample_ratio": None}
    med = statistics.median(abs(e) for e in loo)
    return {"loo_median_abs_pct_error": round(med, 2),
            "loo_max_abs_pct_error": round(max(abs(e) for e in loo), 2),
            "loo_to_in_sample_ratio": round(med / max(statistics.median(abs_in), 1e-9), 2)}


def _coverage(items: list) -> dict[str, dict[str, list[float]]]:
    """Per GPU, the range of model sizes, GPU counts and sequence lengths the fit saw."""
    out: dict[str, dict[str, list[float]]] = {}
    for _, p, _, _ in items:
        c = out.setdefault(p.gpu.name, {})
        for key, v in (("n_params", p.shape.n_params), ("gpu_count", p.gpu_count), ("seq_len", p.seq_len)):
            lo, hi = c.get(key, [v, v])
            c[key] = [min(lo, v), max(hi, v)]
    return out


def _per_knob(measurements: list[dict], items: list, errors: list[float]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for knob in KNOBS_REPORTED:
        groups: dict[str, list[float]] = defaultdict(list)
        for (idx, *_), err in zip(items, errors):
            if knob in measurements[idx]:
                groups[str(measurements[idx][knob])].append(err)
        if groups:
            out[knob] = {v: {"n": len(e), "median_pct_residual": round(statistics.median(e), 2)}
                         for v, e in sorted(groups.items())}
    return out


def fit_calibration(measurements: list[dict[str, Any]], *, base: dict[str, Any] | None = None,
                    noise_rel: float | None = None, source: str | None = None,
                    max_nfev: int = 200, n_starts: int = 5, cross_validate: bool = False,
                    tied: dict[str, str] | None = None) -> dict[str, Any]:
    """Fit the model's constants to measurements; a calibration dict with quality and provenance.

    Args:
        measurements: plain dicts (see :func:`measurement_plan`), each with the measured
            ``tokens_per_sec_per_gpu`` and optionally ``startup_seconds``, ``study``, ``ref``.
        base: the calibration whose values are the priors and whose other GPU blocks are
            kept (default: the shipped default calibration).
        noise_rel: relative measurement noise (weights data against priors); None estimates
            it from repeated configurations (:func:`helper.noise.estimate_noise_rel`), 5 %
            where nothing is repeated.
        source: the ``source`` line to record (default: says what was fitted, and when).
        max_nfev: evaluation cap per start for ``least_squares``.
        n_starts: descents per GPU group (the prior, then seeded perturbations); the best wins.
        cross_validate: also refit leaving each measurement out and report its error
            (``quality.loo_*``): the honest error on configurations the fit did not see.
            One refit per measurement: ``tuner distill`` and ``bench/validate_model.py`` turn
            it on; callers that fit in a loop (a model-guided sampler) leave it off.
        tied: GPU model -> group label: GPU models with one label are fitted as one group
            and get the same constants (the same chip on the same network, e.g. the 40 and
            80 GB A100 in MosaicML's tables). Default: each GPU model on its own.

    Returns:
        A calibration (``load_calibration``'s format): ``constants`` (base blocks updated
        with each GPU's informed constants), ``informed``, ``quality``
        (``median_abs_pct_error`` before/after, ``per_gpu``, ``per_knob`` residuals,
        ``skipped``) and ``provenance``.

    Raises:
        ValueError: no usable measurement.

    Example:
        >>> m = [{"model_size": "7b", "gpu": "H100-80GB", "gpu_count": 8, "micro_batch": mb,
        ...       "num_workers": 4, "tokens_per_sec_per_gpu": tps}
        ...      for mb, tps in ((1, 7000.0), (2, 7600.0), (4, 7900.0))]
        >>> cal = fit_calibration(m)
        >>> "compute_efficiency" in cal["informed"]["H100-80GB"]
        True
    """
    base = copy.deepcopy(base) if base is not None else load_calibration()
    noise = estimate_noise_rel(measurements)
    if noise_rel is None:
        noise_rel = noise["noise_rel"] if noise["noise_rel"] is not None else 0.05
    items: list[tuple[int, StepPlan, str | None, float]] = []
    skipped: list[dict[str, Any]] = []
    for i, m in enumerate(measurements):
        try:
            value = float(m["tokens_per_sec_per_gpu"])
            if not value > 0:
                raise ValueError("tokens_per_sec_per_gpu must be > 0")
            plan, pad_key = measurement_plan(m)
            if m.get("layout"):  # {"dp_shard", "dp_replicate", "tp"}: an HSDP / TP trial
                plan = LayoutStepPlan(plan, Layout(**m["layout"]),
                                      reshard_after_forward=bool(m.get("reshard_after_forward", True)))
        except (KeyError, ValueError, TypeError) as exc:  # UnsupportedCollective is a ValueError
            kind = "unsupported" if isinstance(exc, UnsupportedCollective) else "invalid"
            skipped.append({"index": i, "reason": f"{kind}: {exc}"})
            continue
        items.append((i, plan, pad_key, value))
    if not items:
        raise ValueError(f"no usable measurement among {len(measurements)} "
                         f"({skipped[0]['reason'] if skipped else 'empty list'})")

    tied = tied or {}
    by_gpu: dict[str, list] = defaultdict(list)  # fit group -> its measurements
    for it in items:
        by_gpu[tied.get(it[1].gpu.name, it[1].gpu.name)].append(it)
    gpu_names = sorted({it[1].gpu.name for it in items})
    base_consts = {g: resolve_constants(base, g)[0] for g in gpu_names}
    before = _pct_errors(items, base_consts)

    constants = copy.deepcopy(base["constants"])
    informed_all = {g: list(v) for g, v in base.get("informed", {}).items()}
    fitted_by_gpu: dict[str, dict[str, float]] = {}
    posterior: dict[str, dict[str, float]] = {}
    converged: dict[str, bool] = {}
    loo: list[float] = []
    loo_by_job: list[tuple[str, int, float]] = []  # (gpu, gpu_count, % error) per left-out figure
    first = {label: _fit_group(group, base_consts[_members(group)[0]], noise_rel, max_nfev, n_starts)
             for label, group in by_gpu.items()}
    ties = prior_ties(by_gpu, first, {k: spec.kind for k, spec in CONSTANTS.items()})
    for label, group in by_gpu.items():
        members = _members(group)
        fitted, informed, sd, ok = first[label]
        prior, sigma = dict(base_consts[members[0]]), None
        if label in ties:  # priors from the other groups' first fits (helper.ties)
            sigma = {}
            for name, (value, s) in ties[label].items():
                prior[name], sigma[name] = value, s
            informed = sorted(set(informed) | set(ties[label]))
        # Pin what the data did not inform at its base value and refit the rest as one set:
        # the written constants are then a consistent optimum, not a mix (issue 13).
        free = [k for k in informed if not k.startswith("padding_")]
        fitted, _, sd2, ok = _fit_group(group, prior, noise_rel, max_nfev, n_starts,
                                        free=free, start=fitted, sigma=sigma)
        sd.update(sd2)
        if cross_validate and len(group) > 2:
            errs = _loo_errors(group, prior, noise_rel, max_nfev, free, fitted, sigma)
            loo.extend(errs)
            loo_by_job.extend((p.gpu.name, p.gpu_count, e) for (_, p, _, _), e in zip(group, errs))
        # Start-up: the median of (measured - modelled variable part) sets startup_fixed_s.
        starts = [(measurements[i]["startup_seconds"], p) for i, p, *_ in group
                  if isinstance(measurements[i].get("startup_seconds"), (int, float))]
        if starts:
            var = [s - (0.5 * p.nodes + 0.01 * p.gpu_count
                        + fitted["model_init_s_per_gparam"] * p.shape.n_params / 1e9) for s, p in starts]
            fitted["startup_fixed_s"] = max(0.5, statistics.median(var))
            informed.append("startup_fixed_s")
        for g in members:
            fitted_by_gpu[g] = fitted
            constants.setdefault(g, {}).update({k: round(fitted[k], 6) for k in informed})
            informed_all[g] = sorted(set(informed_all.get(g, [])) | set(informed))
            posterior[g] = {k: round(v, 4) for k, v in sd.items()}
            converged[g] = ok

    # Quality of what is written (informed constants only), not of the full MAP vector.
    written = {"schema_version": SCHEMA_VERSION, "source": "fit", "constants": constants}
    after = _pct_errors(items, {g: {**resolve_constants(written, g)[0],
                                    **{k: v for k, v in fitted_by_gpu[g].items() if k.startswith("padding_")}}
                                for g in gpu_names})
    abs_after = [abs(e) for e in after]
    per_gpu = {}
    for g in gpu_names:
        errs = [abs(e) for it, e in zip(items, after) if it[1].gpu.name == g]
        per_gpu[g] = {"n": len(errs), "median_abs_pct_error": round(statistics.median(errs), 2)}
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    studies = sorted({str(m["study"]) for m in measurements if m.get("study")})
    refs = sorted({str(m["ref"]) for m in measurements if m.get("ref")})
    return {
        "schema_version": SCHEMA_VERSION,
        "source": source or (f"fit_calibration: {len(items)} measurements on "
                             f"{', '.join(sorted(by_gpu))} ({now})"),
        "created_at": now,
        "constants": constants,
        "informed": informed_all,
        "quality": {
            "n_measurements": len(measurements), "n_used": len(items),
            "median_abs_pct_error": round(statistics.median(abs_after), 2),
            "median_abs_pct_error_before": round(statistics.median(abs(e) for e in before), 2),
            "p90_abs_pct_error": round(float(np.percentile(abs_after, 90)), 2),
            "max_abs_pct_error": round(max(abs_after), 2),
            **_loo_summary(loo, abs_after),
            "loo_errors": [[g, n, round(e, 2)] for g, n, e in loo_by_job],
            "noise": {**noise, "noise_rel_used": round(noise_rel, 4)},
            "coverage": _coverage(items),
            "per_gpu": per_gpu,
            "per_knob": _per_knob(measurements, items, after),
            "skipped": skipped,
        },
        "provenance": {
            "method": "scipy.optimize.least_squares on log throughput, noise_rel="
                      f"{noise_rel}, weak priors on logit/log scale (helper/fitting.py)",
            "tied": dict(sorted(tied.items())),
            "base_source": base.get("source"),
            "studies": studies, "references": refs,
            "posterior_sd": posterior, "converged": converged,
            "priors": {k: PRIORS["default"][k] for k in CONSTANTS},
        },
    }
