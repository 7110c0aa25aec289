"""tuner.batching: warm-aware cost estimates, set-up seconds by reconfiguration, reuse order."""

from types import SimpleNamespace

import pytest

from tuner.batching import DATA_LOADER_S, Cost, costs_from_trials, estimate_cost, reuse_order, setup_seconds
from tuner.budget import estimate_trial_cost


def test_no_trial_yet_uses_the_first_estimate():
    assert estimate_cost([], first_estimate_gpu_seconds=30.0, warm=True) == 30.0


def test_cold_launches_keep_the_ledgers_median():
    costs = [Cost(gpu_seconds=g) for g in (40.0, 60.0, 50.0)]
    assert estimate_cost(costs, first_estimate_gpu_seconds=1.0, warm=False) == \
        estimate_trial_cost([40.0, 60.0, 50.0], first_estimate_gpu_seconds=1.0)


def test_warm_trials_cost_less_than_a_worker_start():
    costs = [Cost(gpu_seconds=70.0, worker_startup_gpu_seconds=50.0, warm=False),
             Cost(gpu_seconds=22.0, warm=True), Cost(gpu_seconds=18.0, warm=True)]
    warm = estimate_cost(costs, first_estimate_gpu_seconds=100.0, warm=True)
    cold = estimate_cost(costs, first_estimate_gpu_seconds=100.0, warm=False)
    assert warm == 20.0                       # median of the net costs 20, 22, 18
    assert cold == 20.0 + 50.0                # plus the recent workers' start-up


def test_cheap_failures_do_not_shrink_the_estimate():
    costs = [Cost(gpu_seconds=30.0, warm=True), Cost(gpu_seconds=32.0, warm=True)] + \
            [Cost(gpu_seconds=2.0, warm=True, ok=False)] * 5
    assert estimate_cost(costs, first_estimate_gpu_seconds=100.0, warm=True) == 31.0


def test_costs_from_trials_reads_the_study_record():
    def trial(number, state, **attrs):
        return SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=attrs)

    costs = costs_from_trials([trial(1, "COMPLETE", gpu_seconds=10.0, warm=True, status="ok"),
                               trial(0, "COMPLETE", gpu_seconds=60.0, warm=False, status="ok",
                                     worker_startup_gpu_seconds=40.0),
                               trial(2, "RUNNING", reserved_gpu_seconds=99.0),
                               trial(3, "COMPLETE", gpu_seconds=3.0, warm=True, status="oom")])
    assert [(c.gpu_seconds, c.net_gpu_seconds, c.warm, c.ok) for c in costs] == \
        [(60.0, 20.0, False, True), (10.0, 10.0, True, True), (3.0, 3.0, True, False)]


PARTS = {"fixed_s": 40.0, "rendezvous_s": 2.0, "model_init_s": 13.0, "load_weights_s": 5.0}


@pytest.mark.parametrize("level, expected", [
    ("none", DATA_LOADER_S), ("data_loader", DATA_LOADER_S), ("model", DATA_LOADER_S + 13.0),
    ("communicators", DATA_LOADER_S + 13.0 + 2.0), ("process", 60.0)])
def test_setup_seconds_grow_with_what_the_change_needs(level, expected):
    assert setup_seconds(level, PARTS) == pytest.approx(expected)


def test_reuse_order_runs_light_changes_first():
    current = {"micro_batch": 1}
    candidates = [{"nccl_algo": "Ring"}, {"activation_checkpointing": True}, {"micro_batch": 2}, {"padding": "packed"}]
    assert reuse_order(current, candidates) == [2, 3, 1, 0]
    assert reuse_order(None, candidates)[0] == 0
