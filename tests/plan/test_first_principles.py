"""bench/plan_first_principles.py: the plan's memory per GPU, step time and lost work agree with
first-principles arithmetic within 10 % on each part, for the five cases of issue 31."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "plan_first_principles.py"
_spec = importlib.util.spec_from_file_location("plan_first_principles", _PATH)
fp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fp)


@pytest.mark.parametrize("case", fp.CASES, ids=[f"{m}-{g}" for m, g, _ in fp.CASES])
def test_plan_agrees_with_first_principles_within_10_percent(case):
    row = fp.check(*case)
    for part, (planned, first) in ((k, v) for k, v in row.items() if k != "case"):
        assert abs(planned / first - 1) <= 0.10, (row["case"], part, planned, first)


def test_the_check_reads_what_the_script_sets():
    # the lost work is rebuilt from the batch script's own --collective-timeout-s and --checkpoint-every
    from helper import plan_training
    plan = plan_training("13b", 32, tokens=100e9)
    slow = {**plan, "checkpoint": {**plan["checkpoint"], "collective_timeout_s": 900}}
    assert fp.lost_work_min(slow, 26.0) > fp.lost_work_min(plan, 26.0) + 5     # a longer timeout shows up
