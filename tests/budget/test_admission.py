"""The pure scheduling core: admission decisions and the search limit."""

import pytest

from tuner.budget import Ledger, LedgerEntry, next_admission, search_limit


def ledger(costs, limit=100.0, running=()):
    entries = [LedgerEntry(number=i, state="COMPLETE", gpu_seconds=c, reserved_gpu_seconds=3 * c)
               for i, c in enumerate(costs)]
    entries += [LedgerEntry(number=len(costs) + i, state="RUNNING", gpu_seconds=None, reserved_gpu_seconds=r)
                for i, r in enumerate(running)]
    return Ledger(limit_gpu_seconds=limit, entries=tuple(entries))


def decide(led, **kw):
    args = dict(first_estimate_gpu_seconds=10.0, search_limit_gpu_seconds=85.0, ablation=True,
                ablation_planned=False, queued=False)
    return next_admission(led, **{**args, **kw})


def test_launch_with_a_cap_of_three_estimates_within_what_is_left():
    adm = decide(ledger([10.0, 10.0]))
    assert adm.action == "launch" and adm.estimate_gpu_seconds == 10.0 and adm.cap_gpu_seconds == 30.0
    assert decide(ledger([10.0] * 8), queued=True).cap_gpu_seconds == 20.0   # 20 left: the cap shrinks to it


def test_the_cap_never_falls_under_three_times_the_costliest_ok_trial():
    # adaptive measurement stops most trials after a few steps: their median (10) would cap a
    # full-length run or a model rebuild (80) at 30, and record it as its config's timeout
    adm = decide(ledger([10.0, 10.0]), costliest_ok_gpu_seconds=80.0, first_estimate_gpu_seconds=10.0,
                 search_limit_gpu_seconds=1000.0, ablation=False)
    assert adm.action == "launch" and adm.estimate_gpu_seconds == 10.0
    assert adm.cap_gpu_seconds == 80.0 and adm.cap_basis_gpu_seconds == 80.0   # 3 x 80 > the 80 left
    assert decide(ledger([10.0, 10.0], limit=1000.0), costliest_ok_gpu_seconds=80.0,
                  search_limit_gpu_seconds=1000.0).cap_gpu_seconds == 240.0
    assert decide(ledger([10.0, 10.0]), costliest_ok_gpu_seconds=5.0).cap_gpu_seconds == 30.0  # never below 3x the estimate


def test_the_search_ends_at_its_share_then_the_ablation_is_planned_once():
    assert decide(ledger([10.0] * 8)).action == "plan_ablation"            # 80 + 10 > 85
    assert decide(ledger([10.0] * 8), ablation=False, search_limit_gpu_seconds=100.0).action == "launch"
    assert decide(ledger([10.0] * 9), ablation=False, search_limit_gpu_seconds=100.0).action == "launch"
    assert decide(ledger([10.0] * 10), ablation=False, search_limit_gpu_seconds=100.0).action == "stop"
    planned = decide(ledger([10.0] * 8), ablation_planned=True, queued=True)
    assert planned.action == "launch"                                        # the queued ablation runs go on
    # the ablation done, what is left of its share goes back to the search (issue 18, item 5)
    after = decide(ledger([10.0] * 8), ablation_planned=True, queued=False)
    assert after.action == "launch" and after.cap_gpu_seconds == 20.0
    assert decide(ledger([10.0] * 10), ablation_planned=True, queued=False).action == "stop"
    assert search_limit(100.0, 0.15, ablation=True) == pytest.approx(85.0)
    assert search_limit(100.0, 0.15, ablation=False) == 100.0


def test_a_queued_trial_runs_past_the_search_share_but_never_past_the_budget():
    assert decide(ledger([10.0] * 8), queued=True).action == "launch"       # the baseline or a retry
    assert decide(ledger([10.0] * 9, running=(5.0,)), queued=True).action == "stop"   # 95 used, 10 > 5 left


def test_an_exhausted_search_plans_the_ablation_then_runs_only_queued_trials():
    assert decide(ledger([10.0] * 2), search_exhausted=True).action == "plan_ablation"
    assert decide(ledger([10.0] * 2), search_exhausted=True, ablation_planned=True, queued=True).action == "launch"
    stop = decide(ledger([10.0] * 2), search_exhausted=True, ablation_planned=True)
    assert stop.action == "stop" and stop.reason == "search exhausted"
    assert decide(ledger([10.0] * 2), search_exhausted=True, ablation=False).action == "stop"
