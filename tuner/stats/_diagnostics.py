"""Does the step-noise model fit? Four checks, each with what it means for the numbers.

The per-trial CIs (tuner.stats' pooled AR(1) model) and the config-level CIs (run-to-run
variation from re-measurements) hold where their noise model does. Each check below looks for
one way it does not, over the whole study, and says so in analysis.json's
``noise_diagnostics`` (and in the report): ``{"flagged": bool, ..., "meaning": str}``.

- **phi at a bound**: the pooled AR(1) coefficient at the top of its grid (0.97). A trend or
  a level shift inside runs fits as near-unit autocorrelation; the CIs are then wide, and the
  measured window may not be the long run.
- **drift**: a pooled within-run slope. Each run's log step rates (after any warm-up dropped)
  are regressed on the step index; runs are independent launches, so the slopes' mean over
  runs has a t-test whatever the within-run autocorrelation. Flagged when p < 0.001 and the
  mean change over a run is at least 1%. A falling rate (thermal throttling, a filling cache)
  means the measured steps read above a full job's long-run rate; a rising one, warm-up left
  in the measured steps.
- **stalls**: steps at least 1.5x slower than their run's median step (and 5 robust sds of
  the study's step noise) in at least 2% of all steps. Periodic stalls (checkpoint writes,
  garbage collection, a data shard boundary) are not AR(1) noise: the model takes them as
  white noise and its per-run errors are too wide. The config-level CIs then take the
  spread of re-measured runs instead (tuner.stats' ``se_scale``).
- **replication spread**: configs run more than once scatter beyond their per-run CIs
  (Cochran's Q on log run means, p < 0.001) by more than a run's own error: the lower 95%
  bound of their observed variance exceeds a run's own se^2 by (2 se)^2 or more (a
  launch-to-launch sd at least twice a run's se). Per-trial CIs are then conditional on the launch:
  they do not cover the config's rate, and configs are compared by config-level CIs only.

Thresholds: p < 0.001 and the effect sizes above keep each check's false alarms on plain
AR(1) studies (phi 0-0.9, 60 runs of 8 steps) near zero (docs/statistics.md, section 6).

Example:
    >>> d = noise_diagnostics([], {}, None, None)
    >>> sorted(d), d["drift"]["flagged"]
    (['drift', 'phi_at_bound', 'replication_spread', 'stalls'], False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["noise_diagnostics", "drift_check", "stall_check", "PHI_BOUND", "ALPHA"]

PHI_BOUND = 0.965
"""The pooled phi counts as at the bound from here (tuner.stats' grid ends at 0.97)."""
ALPHA = 0.001
"""Each check's test level."""
DRIFT_MIN = 0.01
"""Smallest mean change over a run that is flagged as drift (1%)."""
STALL_FACTOR = 1.5
STALL_ROBUST_SDS = 5.0
STALL_SHARE = 0.02
SPREAD_RATIO_SD = 2.0
_MIN_STEPS = 4


def _series(trials: Sequence[Any], cis: dict[int, dict[str, Any]]) -> list[np.ndarray]:
    out = []
    for t in trials:
        if t.status != "ok" or t.number not in cis or len(t.steps) < _MIN_STEPS:
            continue
        d = int(cis[t.number].get("warmup_steps_dropped") or 0)
        r = np.asarray(t.steps[d:], float)
        if len(r) >= _MIN_STEPS and np.all(r > 0):
            out.append(np.log(r))
    return out


def _phi(noise: Any) -> dict[str, Any]:
    phi = None if noise is None else float(noise.phi)
    return {"flagged": phi is not None and phi >= PHI_BOUND, "phi": phi,
            "meaning": "the pooled AR(1) coefficient sits at its bound: a trend or level shift inside runs, "
                       "not autocorrelated noise; CIs are wide and the measured steps may not be the long run"}


def _drift(series: Sequence[np.ndarray]) -> dict[str, Any]:
    from scipy import stats

    slopes = []
    for y in series:
        x = np.arange(len(y), dtype=float)
        x -= x.mean()
        slopes.append(float(x @ (y - y.mean()) / (x @ x)) * (len(y) - 1))   # log change over the run
    out: dict[str, Any] = {"flagged": False, "change_over_run": None, "p_value": None, "n_runs": len(slopes)}
    if len(slopes) >= 3:
        s = np.asarray(slopes)
        sd = float(s.std(ddof=1))
        mean = float(s.mean())
        p = 0.0 if sd == 0 and mean != 0 else (1.0 if sd == 0 else
                                               float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(len(s))), len(s) - 1)))
        out.update(change_over_run=math.expm1(mean), p_value=p,
                   flagged=bool(p < ALPHA and abs(math.expm1(mean)) >= DRIFT_MIN))
    change = out["change_over_run"]
    direction = "falls" if change is not None and change < 0 else "rises"
    out["meaning"] = (f"throughput {direction} within runs ({change:+.1%} from first to last measured step on average): "
                      + ("the measured steps read above a full job's long-run rate (thermal or cache drift)"
                         if direction == "falls" else "warm-up is left in the measured steps")
                      if change is not None else "too few runs to test")
    return out


def _stalls(series: Sequence[np.ndarray]) -> dict[str, Any]:
    resid = np.concatenate([y - np.median(y) for y in series]) if series else np.array([])
    out: dict[str, Any] = {"flagged": False, "slow_step_share": None, "n_steps": int(resid.size)}
    if resid.size >= 20:
        robust_sd = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
        cut = max(math.log(STALL_FACTOR), STALL_ROBUST_SDS * robust_sd)
        share = float(np.mean(resid < -cut))
        out.update(slow_step_share=share, flagged=bool(share >= STALL_SHARE), log_cut=cut)
    out["meaning"] = ("a share of steps runs far slower than the rest (stalls or bimodal steps), which the AR(1) "
                      "model takes for white noise: per-run CIs are too wide; config-level CIs use the re-measured "
                      "runs' own spread")
    return out


def _spread(launch: Any, cis: dict[int, dict[str, Any]]) -> dict[str, Any]:
    from scipy import stats

    out: dict[str, Any] = {"flagged": False, "spread_ratio": None, "run_to_run_rel_sd": None,
                           "median_run_rel_se": None, "p_value": None}
    rel_se = [c["se"] / c["mean"] for c in cis.values() if c.get("mean")]
    if launch is not None and launch.spread_ratio is not None and launch.raw_df > 0 and rel_se:
        med = float(np.median(rel_se))
        df = launch.raw_df
        p = float(stats.chi2.sf(launch.spread_ratio * df, df))
        # the observed variance's lower 95% bound (chi-square) must exceed a run's own se^2 plus
        # (SPREAD_RATIO_SD x se)^2: a 12-df estimate alone scatters by a factor of 2
        lower_ratio = launch.spread_ratio * df / float(stats.chi2.ppf(0.95, df))
        out.update(spread_ratio=launch.spread_ratio, run_to_run_rel_sd=math.sqrt(launch.raw_tau2),
                   median_run_rel_se=med, p_value=p,
                   flagged=bool(p < ALPHA and lower_ratio > 1 + SPREAD_RATIO_SD**2))
    out["meaning"] = ("re-measured configs vary between launches far beyond their per-run CIs: a trial's CI is "
                      "conditional on its launch and does not cover its config; compare configs by config-level CIs")
    return out


def stall_check(trials: Sequence[Any], cis: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The stalls check alone (the module doc), with ``log_cut``: a step is a stall where its log
    rate is that far below its run's median step (tuner.stats reads the steady steps apart)."""
    return _stalls(_series(trials, cis))


def drift_check(trials: Sequence[Any], cis: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The drift check alone (the module doc): whether tuner.stats moves runs to their plateau."""
    return _drift(_series(trials, cis))


def noise_diagnostics(trials: Sequence[Any], cis: dict[int, dict[str, Any]], noise: Any,
                      launch: Any, drift_model: Any = None, stall_model: Any = None) -> dict[str, dict[str, Any]]:
    """The four checks of the module doc: trials (TrialRecords), each ok run's CI
    (tuner.stats.trial_cis), the pooled noise model and the study's LaunchVariance.
    ``drift_model``: the plateau fit (tuner.stats' DriftFit) the numbers were corrected by;
    ``stall_model``: the stall fit (tuner.stats' StallFit), applied unless its guard refused."""
    series = _series(trials, cis)
    drift = _drift(series)
    if drift_model is not None:
        lo, hi = drift_model.tau_range
        drift["correction"] = drift_model.as_dict()
        drift["meaning"] += (f"; corrected: each run's number is its plateau, the long-run rate of a full job, under "
                             f"one fit to all runs (log rate {drift_model.amplitude:+.3f} x exp(-step / "
                             f"{drift_model.tau_steps:g}) away from it); settling times of {lo:g}-{hi:g} steps fit "
                             "the steps, and the CIs carry the plateaus they imply"
                             + ("; runs this short cannot say where the drift ends: longer trials (measure_steps) "
                                "narrow it" if hi >= 4 * drift_model.tau_steps else ""))
    stalls = _stalls(series)
    if stall_model is not None:
        stalls["correction"] = stall_model.as_dict()
        guard = stall_model.guard
        stalls["meaning"] += (f"; the stalls follow {guard['knob']} (p = {guard['p_value']:.2g}): each run keeps "
                              "its own, and per-run CIs stay wide" if guard["refused"] else
                              f"; corrected: configs are compared on their steady steps, and the stalls' cost "
                              f"(x{stall_model.overhead:.3f} step time over the study) is pooled into every "
                              "config's long-run rate")
    return {"phi_at_bound": _phi(noise), "drift": drift, "stalls": stalls,
            "replication_spread": _spread(launch, cis)}
