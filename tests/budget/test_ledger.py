from types import SimpleNamespace

import pytest
from optuna.trial import TrialState

from tuner.budget import admits, estimate_trial_cost, format_gpu_hours, ledger_from_trials, parse_budget


@pytest.mark.parametrize("text, seconds", [
    ("40gpuh", 144000.0), ("90gpum", 5400.0), ("600gpus", 600.0), ("0.05gpuh", 180.0),
    (" 2.5GPUH ", 9000.0), ("1e3gpus", 1000.0),
])
def test_parse_budget(text, seconds):
    assert parse_budget(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "40", "40h", "gpuh", "-1gpuh", "0gpuh", "40 gpu-h", "forty gpuh"])
def test_bad_budget_names_the_text(text):
    with pytest.raises(ValueError) as info:
        parse_budget(text)
    assert repr(text) in str(info.value) and "\n" not in str(info.value)


def trial(number, state, **attrs):
    return SimpleNamespace(number=number, state=state, user_attrs=attrs)


def test_ledger_charges_measured_reserved_and_dead_trials():
    trials = [
        trial(0, TrialState.COMPLETE, gpu_seconds=100.0, reserved_gpu_seconds=50.0),
        trial(1, TrialState.RUNNING, reserved_gpu_seconds=80.0),        # in flight: reservation
        trial(2, TrialState.FAIL, reserved_gpu_seconds=70.0),           # coordinator died
        trial(3, TrialState.FAIL, gpu_seconds=12.0, reserved_gpu_seconds=70.0),  # Ctrl-C: measured
        trial(4, TrialState.WAITING),                                   # not started: free
    ]
    ledger = ledger_from_trials(trials, limit_gpu_seconds=400.0)
    assert ledger.used_gpu_seconds == pytest.approx(100 + 80 + 70 + 12)
    assert ledger.left_gpu_seconds == pytest.approx(138.0)
    assert ledger.measured_costs == [100.0]
    assert admits(ledger, 138.0) and not admits(ledger, 138.1)


def test_estimate_uses_spec_first_then_recent_median():
    assert estimate_trial_cost([], first_estimate_gpu_seconds=42.0) == 42.0
    assert estimate_trial_cost([10, 30, 20], first_estimate_gpu_seconds=42.0) == 20.0
    costs = [1000.0] * 5 + [10.0] * 10
    assert estimate_trial_cost(costs, first_estimate_gpu_seconds=1.0) == 10.0  # only the last 10


def test_format_gpu_hours():
    assert format_gpu_hours(5400) == "1.50 GPU-h"


def test_a_budget_that_is_not_finite_is_refused():
    from tuner.errors import BudgetError

    with pytest.raises(BudgetError, match="not a finite number"):
        parse_budget("1e999gpuh")
