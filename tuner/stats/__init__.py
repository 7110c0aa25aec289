"""Statistics of a study, as pure functions: trials in, numbers out.

A trial's tokens-over-time CI under a pooled noise model, configs pooled with run-to-run
variation, failure rates, knob importance, the ablation's effects and the recommendation
(docs/statistics.md). :func:`study_record` is the one place that reads Optuna objects;
nothing here writes a study, a file or a plot.

Each name loads its own module on first use (PEP 562): `tuner report` reusing an analysis
draws the recipe's headline without loading SciPy.

Example:
    >>> from tuner.stats import holm
    >>> holm([0.01, 0.04, 0.03])
    [True, False, False]
"""

import importlib
from typing import Any

# public name -> (the module that defines it, its name there)
_EXPORTS = {
    "FLAKY_FAILURE_RATE": ("tuner.stats._failures", "FLAKY_FAILURE_RATE"),
    "ablation_effects": ("tuner.stats._recommend", "ablation_effects"),
    "LaunchVariance": ("tuner.stats._configs", "LaunchVariance"),
    "bca_limits": ("tuner.stats._bootstrap", "bca_limits"),
    "bca_p_values": ("tuner.stats._bootstrap", "bca_p_values"),
    "grouped_jackknife": ("tuner.stats._bootstrap", "grouped_jackknife"),
    "TAU_PRIOR_DF": ("tuner.stats._configs", "TAU_PRIOR_DF"),
    "TAU_PRIOR_SD": ("tuner.stats._configs", "TAU_PRIOR_SD"),
    "SCALE_PRIOR_DF": ("tuner.stats._configs", "SCALE_PRIOR_DF"),
    "SHARED_SE": ("tuner.stats._configs", "SHARED_SE"),
    "confirmation_runs": ("tuner.stats._recommend", "confirmation_runs"),
    "launch_variance": ("tuner.stats._configs", "launch_variance"),
    "neighbour_risk": ("tuner.stats._failures", "neighbour_risk"),
    "noise_diagnostics": ("tuner.stats._diagnostics", "noise_diagnostics"),
    "drift_check": ("tuner.stats._diagnostics", "drift_check"),
    "stall_check": ("tuner.stats._diagnostics", "stall_check"),
    "ar1_moments": ("tuner.stats._ar1_moments", "ar1_moments"),
    "residual_part": ("tuner.stats._ar1_moments", "residual_part"),
    "ar1_correlation": ("tuner.stats._ar1_moments", "correlation"),
    "StallFit": ("tuner.stats._stalls", "StallFit"),
    "stall_corrected": ("tuner.stats._stalls", "stall_corrected"),
    "DriftFit": ("tuner.stats._drift", "DriftFit"),
    "drift_fit": ("tuner.stats._drift", "drift_fit"),
    "drift_corrected": ("tuner.stats._drift", "drift_corrected"),
    "warmup_leaked": ("tuner.stats._warmup", "leaked"),
    "warmup_scan_null": ("tuner.stats._warmup", "scan_null"),
    "run_variance": ("tuner.stats._configs", "run_variance"),
    "what_matters": ("tuner.stats._recommend", "what_matters"),
    "combined_evidence": ("tuner.stats._recommend", "combined_evidence"),
    "what_matters_power": ("tuner.stats._recommend", "what_matters_power"),
    "undecided_knobs": ("tuner.stats._recommend", "undecided_knobs"),
    "UNDECIDED_EFFECT": ("tuner.stats._recommend", "UNDECIDED_EFFECT"),
    "COMBINED_ALPHA": ("tuner.stats._recommend", "COMBINED_ALPHA"),
    "MAX_ROUNDS": ("tuner.stats._runoff", "MAX_ROUNDS"),
    "N_BOOT": ("tuner.stats._importance", "N_BOOT"),
    "MIN_SURROGATE_SD": ("tuner.stats._runoff", "MIN_SURROGATE_SD"),
    "ROLE_ATTRS": ("tuner.stats._record", "ROLE_ATTRS"),
    "RUNOFF": ("tuner.stats._runoff", "RUNOFF"),
    "StudyRecord": ("tuner.stats._record", "StudyRecord"),
    "TrialRecord": ("tuner.stats._record", "TrialRecord"),
    "analyze_record": ("tuner.stats._analysis", "analyze_record"),
    "analyze_study": ("tuner.stats._analysis", "analyze_study"),
    "budget_use": ("tuner.stats._budget_use", "budget_use"),
    "budget_use_line": ("tuner.stats._budget_use", "budget_use_line"),
    "config_estimate": ("tuner.stats._configs", "config_estimate"),
    "attempts_by_config": ("tuner.stats._failures", "attempts_by_config"),
    "config_failure": ("tuner.stats._failures", "config_failure"),
    "config_key": ("tuner.stats._failures", "config_key"),
    "failure_model": ("tuner.stats._failures", "failure_model"),
    "failure_rate": ("tuner.stats._failures", "failure_rate"),
    "format_summary": ("tuner.stats._analysis", "format_summary"),
    "gpu_hours": ("tuner.stats._headline", "gpu_hours"),
    "headline": ("tuner.stats._headline", "headline"),
    "holm": ("tuner.stats._configs", "holm"),
    "knob_importance": ("tuner.stats._importance", "knob_importance"),
    "level_failures": ("tuner.stats._failures", "level_failures"),
    "mean_ci": ("tuner.stats._analysis", "mean_ci"),
    "mfu": ("tuner.stats._headline", "mfu"),
    "model_flops": ("tuner.stats._headline", "model_flops"),
    "mser_start": ("tuner.stats._trial_ci", "mser_start"),
    "pick_finalists": ("tuner.stats._runoff", "pick_finalists"),
    "ranked_remeasured": ("tuner.stats._runoff", "ranked_remeasured"),
    "ratio_ci": ("tuner.stats._analysis", "ratio_ci"),
    "ratio_estimate": ("tuner.stats._configs", "ratio_estimate"),
    "ratio_of_sums": ("tuner.stats._trial_ci", "ratio_of_sums"),
    "recommend": ("tuner.stats._recommend", "recommend"),
    "revert_replicates": ("tuner.stats._replicates", "revert_replicates"),
    "MIN_SLOWDOWN": ("tuner.stats._replicates", "MIN_SLOWDOWN"),
    "MAX_REPLICATES": ("tuner.stats._replicates", "MAX_REPLICATES"),
    "undecided_slowdowns": ("tuner.stats._replicates", "undecided_slowdowns"),
    "round_estimates": ("tuner.stats._runoff", "round_estimates"),
    "run_groups": ("tuner.stats._configs", "run_groups"),
    "run_to_run_variance": ("tuner.stats._configs", "run_to_run_variance"),
    "runoff_rounds": ("tuner.stats._runoff", "runoff_rounds"),
    "smoothed_values": ("tuner.stats._smoothing", "smoothed_values"),
    "run_cis": ("tuner.stats._drift", "run_cis"),
    "moved_values": ("tuner.stats._drift", "moved_values"),
    "study_noise": ("tuner.stats._trial_ci", "study_noise"),
    "study_record": ("tuner.stats._record", "study_record"),
    "study_trial_cis": ("tuner.stats._trial_ci", "study_trial_cis"),
    "surrogate_spread": ("tuner.stats._runoff", "surrogate_spread"),
    "trial_ci": ("tuner.stats._trial_ci", "trial_ci"),
    "trial_cis": ("tuner.stats._trial_ci", "trial_cis"),
    "trial_records": ("tuner.stats._record", "trial_records"),
    "trial_status": ("tuner.stats._record", "trial_status"),
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'tuner.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
