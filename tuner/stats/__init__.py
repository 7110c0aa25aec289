"""Statistics of a study, as pure functions: trials in, numbers out.

A trial's tokens-over-time CI under a pooled noise model, configs pooled with run-to-run
variation, failure rates, knob importance, the ablation's effects and the recommendation
(docs/statistics.md). :func:`study_record` is the one place that reads Optuna objects;
nothing here writes a study, a file or a plot.

Example:
    >>> holm([0.01, 0.04, 0.03])
    [True, False, False]
"""

from tuner.stats._analysis import (
    analyze_record,
    analyze_study,
    format_summary,
    mean_ci,
    ratio_ci,
)
from tuner.stats._bootstrap import (
    bca_limits,
    grouped_jackknife,
)
from tuner.stats._budget_use import (
    budget_use,
    budget_use_line,
)
from tuner.stats._configs import (
    TAU_PRIOR_DF,
    TAU_PRIOR_SD,
    LaunchVariance,
    config_estimate,
    holm,
    launch_variance,
    ratio_estimate,
    run_groups,
    run_to_run_variance,
    run_variance,
)
from tuner.stats._diagnostics import (
    drift_check,
    noise_diagnostics,
)
from tuner.stats._drift import DriftFit, drift_corrected, drift_fit
from tuner.stats._failures import (
    FLAKY_FAILURE_RATE,
    attempts_by_config,
    config_failure,
    config_key,
    failure_model,
    failure_rate,
    level_failures,
    neighbour_risk,
)
from tuner.stats._headline import gpu_hours, headline, mfu, model_flops
from tuner.stats._importance import (
    knob_importance,
)
from tuner.stats._recommend import (
    confirmation_runs,
    recommend,
    what_matters,
    what_matters_power,
)
from tuner.stats._record import (
    ROLE_ATTRS,
    StudyRecord,
    TrialRecord,
    study_record,
    trial_records,
    trial_status,
)
from tuner.stats._runoff import (
    MAX_ROUNDS,
    MIN_SURROGATE_SD,
    RUNOFF,
    pick_finalists,
    ranked_remeasured,
    round_estimates,
    runoff_rounds,
    surrogate_spread,
)
from tuner.stats._smoothing import (
    smoothed_values,
)
from tuner.stats._trial_ci import (
    mser_start,
    ratio_of_sums,
    study_noise,
    study_trial_cis,
    trial_ci,
    trial_cis,
)
from tuner.stats._warmup import leaked as warmup_leaked
from tuner.stats._warmup import scan_null as warmup_scan_null

__all__ = [
    "FLAKY_FAILURE_RATE",
    "LaunchVariance",
    "bca_limits",
    "grouped_jackknife",
    "TAU_PRIOR_DF",
    "TAU_PRIOR_SD",
    "confirmation_runs",
    "launch_variance",
    "neighbour_risk",
    "noise_diagnostics",
    "drift_check",
    "DriftFit",
    "drift_fit",
    "drift_corrected",
    "warmup_leaked",
    "warmup_scan_null",
    "run_variance",
    "what_matters",
    "what_matters_power",
    "MAX_ROUNDS",
    "MIN_SURROGATE_SD",
    "ROLE_ATTRS",
    "RUNOFF",
    "StudyRecord",
    "TrialRecord",
    "analyze_record",
    "analyze_study",
    "budget_use",
    "budget_use_line",
    "config_estimate",
    "attempts_by_config",
    "config_failure",
    "config_key",
    "failure_model",
    "failure_rate",
    "format_summary",
    "gpu_hours",
    "headline",
    "holm",
    "knob_importance",
    "level_failures",
    "mean_ci",
    "mfu",
    "model_flops",
    "mser_start",
    "pick_finalists",
    "ranked_remeasured",
    "ratio_ci",
    "ratio_estimate",
    "ratio_of_sums",
    "recommend",
    "round_estimates",
    "run_groups",
    "run_to_run_variance",
    "runoff_rounds",
    "smoothed_values",
    "study_noise",
    "study_record",
    "study_trial_cis",
    "surrogate_spread",
    "trial_ci",
    "trial_cis",
    "trial_records",
    "trial_status",
]
