"""The plateau fit that moves a drifting study's runs to their long-run rate."""

import math

import numpy as np
import pytest

from tuner.stats import TrialRecord, drift_check, drift_corrected, drift_fit, trial_cis


def study(rng, *, amplitude, runs=60, steps=8, plateau=1000.0, sd=0.02):
    """Runs whose rate is plateau x (1 + a exp(-t / 4)), a ~ amplitude +- 25 %, AR(1) noise."""
    out = []
    for n in range(runs):
        a = amplitude * rng.uniform(0.75, 1.25)
        e, rates = 0.0, []
        for t in range(steps):
            e = 0.5 * e + math.sqrt(1 - 0.25) * rng.normal(0, sd)
            rates.append(plateau * (1 + a * math.exp(-t / 4)) * math.exp(e))
        out.append(TrialRecord(number=n, state="COMPLETE", status="ok", params={"k": n % 3},
                               steps=tuple(rates), value=float(np.mean(rates))))
    return out


def test_a_falling_rate_is_read_at_its_plateau_and_a_flat_one_is_left_alone():
    rng = np.random.default_rng(1)
    falling = study(rng, amplitude=0.09)
    cis, noise = trial_cis(falling)
    assert drift_check(falling, cis)["flagged"]
    raw = np.mean([math.log(c["mean"] / 1000.0) for c in cis.values()])
    moved, fit = drift_corrected(falling, cis)
    fixed = np.mean([math.log(c["mean"] / 1000.0) for c in moved.values()])
    assert raw > 0.03                       # the measured steps read 3 %+ above the long run
    # the plateau, within the CI the fit gives it (the settling times it cannot rule out)
    sd = np.mean([m["se"] / m["mean"] for m in moved.values()])
    assert abs(fixed) < 2 * sd and sd < 0.05
    assert 0.05 < fit.amplitude < 0.2 and 2.0 <= fit.tau_steps <= 8.0 and fit.tau_range[0] <= fit.tau_steps
    # a moved CI is centred on its plateau and carries the plateau's own uncertainty
    c, m = cis[0], moved[0]
    assert m["ci95"][0] < m["mean"] < m["ci95"][1] and m["mean"] < c["mean"]
    assert (m["ci95"][1] - m["mean"]) / m["mean"] >= 1.96 * fit.shift_sd(np.arange(8))

    flat = study(np.random.default_rng(2), amplitude=0.0)
    flat_cis, _ = trial_cis(flat)
    assert not drift_check(flat, flat_cis)["flagged"]
    assert abs(drift_fit([(np.arange(8), np.log(t.steps)) for t in flat]).shift(np.arange(8))) < 0.02


def test_the_analysis_states_its_estimand_and_the_correction_it_made():
    from tuner.stats import StudyRecord, analyze_record

    rng = np.random.default_rng(3)
    record = StudyRecord(name="drifting", trials=tuple(study(rng, amplitude=0.1, runs=30)), attrs={})
    analysis = analyze_record(record, n_boot=0)
    drift = analysis["noise_diagnostics"]["drift"]
    assert drift["flagged"] and drift["correction"]["amplitude"] == pytest.approx(0.1, abs=0.04)
    assert "plateau" in drift["meaning"] and "long-run rate" in analysis["method"]["estimand"]
    assert analysis["trials"][0]["tokens_per_sec_per_gpu"]["mean"] == pytest.approx(1000.0, rel=0.04)
