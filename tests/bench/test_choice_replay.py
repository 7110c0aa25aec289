"""The choice-rule replay (bench/choice_replay.py): the shipped rule reproduces the pipeline's score."""

from bench.choice_replay import replay_one, summarize


def test_the_shipped_rule_replayed_is_the_pipelines_own_score():
    row = replay_one("fp:7b-h100x32", 0, resident=True, budget_gpuh=8.0)
    assert row["split"] == row["bench"] and 0 < row["split"] <= 1 and 0 < row["all"] <= 1
    assert summarize([row, dict(row, seed=1, all=row["split"] - 0.01)]).count("seed 1:") == 1
