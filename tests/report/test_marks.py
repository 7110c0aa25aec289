"""One best everywhere: the recommendation is a study attr and marks its trial, where `tuner
status`, Optuna's CLI and optuna-dashboard read them (issue 29 item 7, issue 33 item 3)."""

import json
import subprocess

import optuna
import pytest

from tests.stats.test_analysis import synthetic_study
from tuner.report import RECOMMENDATION_ATTR, format_run_summary, mark_recommendation
from tuner.storage import study_storage
from tuner.study import summarize


@pytest.fixture()
def sqlite_study(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    optuna.copy_study(from_study_name="synthetic", from_storage=study_storage(synthetic_study(n=12, seed=3)),
                      to_storage=url)
    return url, optuna.load_study(study_name="synthetic", storage=url)


def _analysis_recommending(study, number):
    """An analysis whose recommendation is ``number`` (not the highest single run)."""
    t = study.trials[number]
    return {"simulated": False, "best": {"trial": number, "params": t.params, "chosen_on": "runoff re-measurements",
                                         "tokens_per_sec_per_gpu": {"mean": t.value, "ci95": [t.value * .9, t.value * 1.1]},
                                         "speedup_vs_baseline": {"mean": 2.0, "ci95": [1.8, 2.2]},
                                         "winners_curse_adjusted": True}}


@pytest.mark.slow  # an `optuna` process
def test_the_recommendation_is_marked_where_status_and_optunas_cli_look(sqlite_study):
    url, study = sqlite_study
    luckiest = study.best_trial.number
    rec = next(t.number for t in study.trials if t.number != luckiest and t.user_attrs["status"] == "ok")
    mark_recommendation(study, _analysis_recommending(study, rec))

    fresh = optuna.load_study(study_name="synthetic", storage=url)
    assert fresh.user_attrs[RECOMMENDATION_ATTR]["trial"] == rec
    assert fresh.trials[rec].user_attrs["recommended"] is True
    assert f"tuner recommends trial {rec}" in fresh.trials[luckiest].user_attrs["not_recommended"]
    text = format_run_summary(summarize(fresh), status=True)
    assert f"recommended: trial {rec}:" in text and "2.00 (95% CI 1.80 to 2.20)x the baseline" in text
    assert "highest single run (Optuna's best trial; not the recommendation" in text and f"trial {luckiest}" in text

    best = subprocess.run(["optuna", "best-trial", "--study-name", "synthetic", "--storage", url, "-f", "json"],
                          capture_output=True, text=True, timeout=120)
    assert best.returncode == 0, best.stderr
    assert f"tuner recommends trial {rec}" in json.loads(best.stdout)["user_attrs"]["not_recommended"]


def test_a_new_recommendation_unmarks_the_old_one(sqlite_study):
    url, study = sqlite_study
    ok = [t.number for t in study.trials if t.user_attrs["status"] == "ok" and t.number != study.best_trial.number]
    mark_recommendation(study, _analysis_recommending(study, ok[0]))
    mark_recommendation(study, _analysis_recommending(study, ok[1]))
    fresh = optuna.load_study(study_name="synthetic", storage=url)
    assert fresh.trials[ok[0]].user_attrs["recommended"] is False
    assert fresh.trials[ok[1]].user_attrs["recommended"] is True
    mark_recommendation(study, {"best": None})
    fresh = optuna.load_study(study_name="synthetic", storage=url)
    assert fresh.user_attrs[RECOMMENDATION_ATTR] is None and fresh.trials[ok[1]].user_attrs["recommended"] is False


def test_status_without_a_recommendation_says_the_best_is_the_highest_single_run():
    text = format_run_summary(summarize(synthetic_study(n=12, seed=1)), status=True)
    assert "best: trial" in text and "highest single run" in text and "recommended:" not in text
