"""Failure rates with exact binomial CIs, and the study-wide failure model."""

import pytest

from tuner.stats import TrialRecord, config_failure, failure_model, failure_rate, level_failures


def run(n, status, **params):
    return TrialRecord(number=n, state="COMPLETE", status=status, params=params, steps=(), value=1.0)


def test_failure_rate_has_an_exact_ci():
    d = failure_rate(17, 24)
    assert d["rate"] == pytest.approx(17 / 24) and 0.48 < d["ci95"][0] < 17 / 24 < d["ci95"][1] < 0.88
    assert failure_rate(0, 0)["rate"] is None


def test_statuses_other_than_oom_timeout_error_are_not_failures_of_the_config():
    trials = [run(0, "oom", mb=8), run(1, "ok", mb=8), run(2, "pruned", mb=8),
              run(3, "stopped_by_budget", mb=8), run(4, "skipped", mb=8)]
    assert level_failures(trials, ["mb"])["mb"]["8"] == failure_rate(1, 2)


def test_the_model_blames_the_level_that_fails_not_the_one_beside_it():
    trials = []
    for i in range(60):
        mb, proto = (8 if i % 2 else 2), ("default" if i % 3 else "LL")
        # mb 8 fails 2 runs in 3; proto default is more common among mb 8's runs by chance
        fails = mb == 8 and (i // 2) % 3 != 0
        trials.append(run(i, "oom" if fails else "ok", mb=mb, proto=proto))
    model = failure_model(trials, ["mb", "proto"])
    assert model({"mb": 8, "proto": "LL"}) > 0.25 > model({"mb": 2, "proto": "default"})
    levels = level_failures(trials, ["mb", "proto"])
    # one lucky success of an mb 8 config does not make it reliable
    lucky = config_failure({"mb": 8, "proto": "LL"}, trials + [run(99, "ok", mb=8, proto="LL")], levels, model)
    assert lucky["flaky"] and lucky["worst_level"]["knob"] == "mb"


def test_a_pair_of_levels_that_fails_together_is_the_configs_risk():
    """micro_batch 8 fails half its runs with checkpointing and every run without (the
    concentrated-failures family): the config mb 8 + checkpointing is at risk by its pair of
    levels, which an additive model cannot say; a config away from mb 8 is not."""
    from tuner.stats import neighbour_risk

    trials = []
    for i in range(80):
        mb, ckpt = (8 if i % 2 else 4), bool((i // 2) % 2)
        fails = mb == 8 and (not ckpt or (i // 4) % 2 == 0)
        trials.append(run(i, "oom" if fails else "ok", mb=mb, ckpt=ckpt, workers=i % 3))
    risk = neighbour_risk({"mb": 8, "ckpt": True, "workers": 1}, trials, ["mb", "ckpt", "workers"])
    assert risk["ci95"][0] >= 0.25 and risk["knobs"]["mb"] == "8"
    safe = neighbour_risk({"mb": 4, "ckpt": True, "workers": 1}, trials, ["mb", "ckpt", "workers"])
    assert safe["ci95"][0] < 0.25   # its worst neighbourhood (workers=1) holds mb 8 runs, not surely >= 25%
