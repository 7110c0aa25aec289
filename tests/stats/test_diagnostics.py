"""The noise-model checks: each misfit flagged on its own kind of study, none on plain AR(1)."""

import numpy as np
import pytest

from bench.stats_noise import Noise, launch
from tuner.stats import TrialRecord, noise_diagnostics, run_variance, trial_cis


def _study(noise: Noise, seed: int, *, configs: int = 40, repeats: int = 3) -> list[TrialRecord]:
    """``configs`` configs 1.2x apart at most, each launched once, and the first 6 ``repeats``
    times more (a study's re-measurements)."""
    rng = np.random.default_rng(seed)
    trials = []
    for c in range(configs):
        rate = 1000.0 * (1 + 0.2 * c / configs)
        for _ in range(1 + (repeats if c < 6 else 0)):
            run = launch(rng, noise, rate)
            trials.append(TrialRecord(number=len(trials), state="COMPLETE", status="ok", params={"c": c},
                                      steps=tuple(run.rates), value=run.value, step_seconds=tuple(run.seconds),
                                      role="ablation" if len(trials) and trials[-1].params == {"c": c} else None))
    return trials


def _flags(noise: Noise, seed: int) -> dict[str, bool]:
    trials = _study(noise, seed)
    cis, model = trial_cis(trials)
    d = noise_diagnostics(trials, cis, model, run_variance(trials, cis))
    return {k: v["flagged"] for k, v in d.items()}


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_plain_ar1_studies_raise_no_flag(phi):
    for seed in range(3):
        assert not any(_flags(Noise(kind="ar1", rel_sd=0.05, phi=phi), seed).values())


@pytest.mark.parametrize("kind,flag", [("stalls", "stalls"), ("drift", "drift")])
def test_stalls_and_drift_are_flagged(kind, flag):
    for seed in range(3):
        flags = _flags(Noise(kind=kind, rel_sd=0.02, phi=0.5), seed)
        assert flags[flag], flags
        assert not flags["replication_spread"]


def test_launch_variance_beyond_the_per_run_errors_is_flagged():
    for seed in range(3):
        flags = _flags(Noise(kind="ar1", rel_sd=0.01, phi=0.5, run_to_run_sd=0.04), seed)
        assert flags["replication_spread"] and not flags["stalls"], flags


def test_the_flags_say_what_they_mean():
    trials = _study(Noise(kind="drift", rel_sd=0.02, phi=0.5), 0)
    cis, model = trial_cis(trials)
    d = noise_diagnostics(trials, cis, model, run_variance(trials, cis))
    assert d["drift"]["change_over_run"] < -0.03 and "long-run" in d["drift"]["meaning"]
    assert {"flagged", "meaning"} <= set(d["stalls"])
