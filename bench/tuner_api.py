"""Every tuner internal the statistics benches use, imported in one place.

tuner's modules are being grouped into packages (tuner/stats/ and others); when a name moves,
only this file changes. Used by bench.importance_truth, bench.synthetic_studies and the
statistics benchmark (bench.stats_truth, bench.stats_study, bench.stats_score,
bench.stats_families).
"""

from __future__ import annotations

from tuner import knobs as knob_catalogue
from tuner.search import distribution, suggest_params
from tuner.spec import parse_spec
from tuner.stats import FLAKY_FAILURE_RATE, StudyRecord, TrialRecord, analyze_record, config_key, study_record
from tuner.study import N_CANDIDATES, plan_ablation, plan_ablation_once, plan_runs, shortlist

__all__ = ["knob_catalogue", "N_CANDIDATES", "plan_ablation", "plan_ablation_once", "plan_runs", "shortlist",
           "analyze_record", "FLAKY_FAILURE_RATE", "config_key", "StudyRecord", "TrialRecord", "study_record",
           "distribution", "suggest_params", "parse_spec"]
