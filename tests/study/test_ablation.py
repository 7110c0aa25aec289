"""tuner.study._ablation: the one-knob-reverted runs that say which knob the best config owes its speed to."""

from tests.spine_helpers import fast_spec
from tuner.study import plan_ablation


def test_plan_ablation_handles_the_conditional_knob(tmp_path):
    spec = fast_spec(tmp_path, extra_space="num_workers = [0, 2]\nprefetch_factor = [2, 4]", baseline=False)
    best = {"micro_batch": 2, "num_workers": 2, "prefetch_factor": 4}
    runs = dict(plan_ablation(spec, best, {"micro_batch": 1, "num_workers": 0}))
    assert runs[None] == best
    assert runs["num_workers"] == {"micro_batch": 2, "num_workers": 0}   # prefetch_factor dropped
    assert "prefetch_factor" not in runs                                  # not a one-knob change


def test_plan_ablation_puts_the_given_order_first(tmp_path):
    spec = fast_spec(tmp_path, extra_space="num_workers = [0, 2]", baseline=False)
    best = {"micro_batch": 2, "num_workers": 2, "prefetch_factor": 2}
    base = {"micro_batch": 1, "num_workers": 1, "prefetch_factor": 2}
    assert [k for k, _ in plan_ablation(spec, best, base)] == [None, "micro_batch", "num_workers"]
    assert [k for k, _ in plan_ablation(spec, best, base, ["num_workers", "nope"])] == [None, "num_workers", "micro_batch"]


def _ok(number, params, value):
    from tuner.stats import TrialRecord
    return TrialRecord(number=number, state="COMPLETE", status="ok", value=value, steps=(value,), params=params)


def test_a_knob_the_best_keeps_at_the_baselines_level_is_moved_to_its_fastest_other_level(tmp_path):
    """No revert tests a knob the best shares with the baseline: a move does, to the level its
    search runs read fastest; a knob with no run at another level, one whose move the search ran,
    and one past MAX_MOVES, get none."""
    from tuner.study import MAX_MOVES, plan_moves
    spec = fast_spec(tmp_path, extra_space="num_workers = [0, 2, 4]\nprefetch_factor = [2, 4]", baseline=False)
    base = {"micro_batch": 1, "num_workers": 0}
    best = {"micro_batch": 1, "num_workers": 0}
    runs = [_ok(0, {"micro_batch": 2, "num_workers": 2, "prefetch_factor": 2}, 120.0),
            _ok(1, {"micro_batch": 1, "num_workers": 2, "prefetch_factor": 2}, 100.0),
            _ok(2, {"micro_batch": 1, "num_workers": 4, "prefetch_factor": 4}, 130.0),
            _ok(3, {"micro_batch": 4, "num_workers": 4, "prefetch_factor": 4}, 110.0)]
    moves = plan_moves(spec, best, base, runs)
    assert moves == [("micro_batch", {"micro_batch": 2, "num_workers": 0}),
                     ("num_workers", {"micro_batch": 1, "num_workers": 4, "prefetch_factor": 2})]  # turned on
    assert [k for k, _ in plan_moves(spec, best, base, runs, ["num_workers"])][0] == "num_workers"
    assert len(plan_moves(spec, best, base, runs, max_moves=1)) == 1 <= MAX_MOVES
    assert plan_moves(spec, {"micro_batch": 2, "num_workers": 2, "prefetch_factor": 2}, base, runs) == []
    assert plan_moves(spec, best, base, runs[:1]) == [("micro_batch", {"micro_batch": 2, "num_workers": 0}),
                                                      ("num_workers", {"micro_batch": 1, "num_workers": 2,
                                                                       "prefetch_factor": 2})]
    # the search ran the move already: its run speaks for the knob, no move
    ran = [*runs, _ok(4, {"micro_batch": 2, "num_workers": 0}, 125.0)]
    assert [k for k, _ in plan_moves(spec, best, base, ran)] == ["num_workers"]


def test_moves_run_beside_the_reverts_and_say_so(tmp_path):
    from tuner.study import plan_runs
    best = {"micro_batch": 2, "num_workers": 0}
    runs = plan_runs([(None, best), ("micro_batch", {"micro_batch": 1, "num_workers": 0})],
                     {"micro_batch": 1, "num_workers": 0}, [], [("num_workers", {"micro_batch": 2, "num_workers": 2})])
    knob_runs = [extra for _, extra in runs if extra.get("ablation_knob")]
    assert knob_runs == [{"ablation_knob": "micro_batch"}, {"ablation_knob": "num_workers", "ablation_move": True}]
