"""tuner.report._terminal: the lines `tuner run` ends with and `tuner status` prints."""

from types import SimpleNamespace

from tuner.report._terminal import format_run_summary


def _summary(**kw):
    base = dict(study_name="s", simulated=False, launched=3, stopped="budget", statuses={"COMPLETE": 3, "FAIL": 1},
                used_gpu_seconds=1800.0, limit_gpu_seconds=7200.0, best=None, recommendation=None)
    return SimpleNamespace(**{**base, **kw})


BEST = {"trial": 4, "role": "search", "tokens_per_sec_per_gpu": 12345.67, "params": {"micro_batch": 4, "nccl_algo": "Ring"}}
REC = {"trial": 2, "tokens_per_sec_per_gpu": {"mean": 12000.0, "ci95": [11800.0, 12200.0]},
       "speedup_vs_baseline": {"mean": 1.25, "ci95": [1.2, 1.3]}, "n_trials": 9, "chosen_on": "re-measurements",
       "params": {"micro_batch": 2}}


def test_the_head_counts_trials_by_status_and_the_budget_in_gpu_hours():
    lines = format_run_summary(_summary()).splitlines()
    assert lines == ["study s: 3 trials run here; stopped: budget",
                     "  trials by status: COMPLETE 3, FAIL 1",
                     "  budget: 0.5000 / 2.0000 GPU-h used (1.5000 left)",
                     "  best: none yet"]
    status = format_run_summary(_summary(simulated=True, statuses={}), status=True).splitlines()
    assert status[0] == "study s [SIMULATED: trials come from the performance model, not real jobs]: status"
    assert status[1] == "  trials by status: none"


def test_without_a_recommendation_the_best_is_the_highest_single_run_with_its_params():
    text = format_run_summary(_summary(best=BEST))
    assert "  best: trial 4 (search): 12,345.7 tokens/s/GPU (highest single run; `tuner analyze` recommends" in text
    assert text.endswith("    micro_batch  4\n    nccl_algo    Ring")


def test_a_recommendation_comes_first_and_a_different_best_is_labelled_a_single_run():
    lines = format_run_summary(_summary(best=BEST, recommendation=REC)).splitlines()
    assert lines[3] == ("  recommended: trial 2: 12,000.0 (95% CI 11,800.0 to 12,200.0) tokens/s/GPU, "
                        "1.25 (95% CI 1.20 to 1.30)x the baseline [re-measurements; analysis of 9 trials]")
    assert lines[4] == "    micro_batch  2"
    assert lines[5].startswith("  highest single run (Optuna's best trial; not the recommendation") and "trial 4" in lines[5]
    same = format_run_summary(_summary(best={**BEST, "trial": 2}, recommendation=REC))
    assert "highest single run" not in same and "best:" not in same
