"""tuner.budget: warm-aware cost estimates, set-up seconds by reconfiguration, reuse order."""

from types import SimpleNamespace

import pytest

from tuner.budget import (
    DATA_LOADER_S,
    Cost,
    cap_basis,
    costs_from_trials,
    estimate_cost,
    estimate_trial_cost,
    reuse_order,
    setup_seconds,
)


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


def test_the_cap_basis_is_the_costliest_ok_trial_never_a_timeout():
    def trial(number, status, gpu_seconds, state="COMPLETE"):
        return SimpleNamespace(number=number, state=SimpleNamespace(name=state),
                               user_attrs={"status": status, "gpu_seconds": gpu_seconds})

    assert cap_basis([], first_estimate_gpu_seconds=2400.0) == 2400.0
    # a cold first trial (start-up and every step) outweighs the warm trials stopped after a few
    # steps; a timeout costs its cap, and an oom says nothing about a full trial
    assert cap_basis([trial(0, "ok", 900.0), trial(1, "ok", 60.0), trial(2, "timeout", 5000.0),
                      trial(3, "oom", 1200.0), trial(4, "ok", 4000.0, state="FAIL")],
                     first_estimate_gpu_seconds=2400.0) == 900.0
    # the 13B sim's baseline runs out of memory: the first search trial's cap was 3x that
    # failure's net cost (169 GPU-s), and the near-optimal config it ran timed out
    assert cap_basis([trial(0, "oom", 589.0)], first_estimate_gpu_seconds=2400.0) == 2400.0


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


def test_the_worker_after_a_trial():
    from tuner.budget import Worker, worker_after

    up = Worker(params={"micro_batch": 2})
    fresh = worker_after(None, {"micro_batch": 4}, {"warm": False, "status": "ok", "gpu_seconds": 64.0,
                                                    "world_size": 2, "startup_seconds": 20.0})
    assert fresh == Worker(params={"micro_batch": 4}, build_seconds=20.0, model_seconds=32.0)
    assert fresh.keeps_model(0.25)                           # 20 s built it, 32 s ran on it
    same = worker_after(fresh, {"micro_batch": 8}, {"warm": True, "status": "ok", "gpu_seconds": 100.0,
                                                    "world_size": 2, "startup_seconds": 2.0})
    assert (same.build_seconds, same.model_seconds) == (20.0, 82.0) and not same.keeps_model(0.25)
    rebuilt = worker_after(same, {"micro_batch": 8, "activation_checkpointing": True},
                           {"warm": True, "status": "ok", "gpu_seconds": 60.0, "world_size": 2, "startup_seconds": 15.0})
    assert (rebuilt.build_seconds, rebuilt.model_seconds) == (15.0, 30.0)
    assert worker_after(up, {"micro_batch": 4}, {"warm": True, "status": "oom", "gpu_seconds": 3.0}).failed
    assert worker_after(up, {"micro_batch": 4}, {"warm": True, "status": "timeout", "gpu_seconds": 9.0}) is None
    assert worker_after(up, {"micro_batch": 4}, {"status": "ok", "gpu_seconds": 9.0}) is None  # a cold launch
    assert worker_after(up, {"micro_batch": 4}, {"gpu_seconds": 0.0}) is up  # never ran


def test_switch_level_from_the_workers_last_config():
    from tuner.budget import Worker, switch_level

    w = Worker(params={"micro_batch": 1, "nccl_algo": "Ring"})
    assert switch_level(w, {"micro_batch": 4, "nccl_algo": "Ring"}) == "none"
    assert switch_level(w, {"micro_batch": 1, "nccl_algo": "Ring", "padding": "packed"}) == "data_loader"
    assert switch_level(w, {"micro_batch": 1, "nccl_algo": "default"}) == "communicators"
    assert switch_level(Worker(params=w.params, failed=True), w.params) == "communicators"
    assert switch_level(None, w.params) == "process"


def test_set_up_seconds_are_measured_where_the_study_has_them():
    from tuner.budget import setup_seconds_by_level

    def trial(**attrs):
        return SimpleNamespace(user_attrs=attrs)

    trials = [trial(warm=False, worker_startup_gpu_seconds=32 * 70.0, world_size=32, startup_seconds=70.0),
              trial(warm=True, reconfigured="model", startup_seconds=20.0),
              trial(warm=True, reconfigured="model", startup_seconds=24.0),
              trial(startup_seconds=99.0)]                            # a cold launch: no level
    got = setup_seconds_by_level(PARTS, trials)
    assert got["process"] == 70.0 and got["model"] == 22.0
    assert got["none"] == setup_seconds("none", PARTS) and got["communicators"] == setup_seconds("communicators", PARTS)
