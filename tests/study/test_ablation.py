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
