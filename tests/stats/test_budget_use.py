"""tuner.stats: where a study's budget went (probes, failures, re-measurement, search)."""

import pytest

from tuner.stats import TrialRecord, budget_use, budget_use_line


def _t(number, status="ok", gpu_seconds=100.0, role=None, params=None, **kw):
    return TrialRecord(number=number, state="COMPLETE" if status not in ("pruned", "fail") else "FAIL",
                       status=status, params=params or {"micro_batch": number}, steps=(), value=1.0,
                       role=role, gpu_seconds=gpu_seconds, **kw)


def test_every_charged_second_has_one_use_and_the_shares_sum_to_one():
    probe = {"micro_batch": 8}
    trials = [_t(0, role="baseline", gpu_seconds=200.0),
              _t(1, gpu_seconds=300.0),
              _t(2, status="oom", gpu_seconds=50.0),                       # a search run that failed
              _t(3, status="oom", gpu_seconds=40.0, params=probe),         # a probe that failed: a probe
              _t(4, status="pruned", gpu_seconds=0.0, message="pruned: NCCL cannot run this"),
              _t(5, status="pruned", gpu_seconds=0.0, message="predicted 93 GB x margin"),
              _t(6, role="ablation", gpu_seconds=150.0, remeasure="best"),
              _t(7, role="ablation", gpu_seconds=60.0, ablation_knob="micro_batch"),
              _t(8, status="timeout", role="ablation", gpu_seconds=200.0)]
    use = budget_use(trials, probes=[{"region": "r", "params": probe, "predicted_gb": 90.0},
                                     {"region": "s", "params": {"micro_batch": 99}, "predicted_gb": 99.0}])
    total = 1000.0
    assert use["share"] == pytest.approx({"probes": 40 / total, "failures": 250 / total, "baseline": 200 / total,
                                          "remeasurement": 150 / total, "ablation": 60 / total, "search": 300 / total},
                                         abs=1e-4)
    assert sum(use["gpu_hours"].values()) == pytest.approx(total / 3600)
    assert use["screening"] == {"screened": 2, "screened_memory": 1, "screened_nccl": 1, "probes": 1,
                                "probes_pending": 1, "contradicted": 0}
    assert "failures 25%" in budget_use_line(use)


def test_a_probe_that_ran_ok_contradicts_the_model_and_an_empty_study_spends_nothing():
    use = budget_use([_t(0, params={"micro_batch": 4})], probes=[{"region": "r", "params": {"micro_batch": 4}}])
    assert use["share"]["probes"] == 1.0 and use["screening"]["contradicted"] == 1
    empty = budget_use([])
    assert set(empty["share"].values()) == {0.0} and "nothing spent" in budget_use_line(empty)
