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


def test_each_launchs_own_drift_widens_its_run_and_a_common_one_does_not():
    # a per launch scattered +-25 % (uniform: sd 0.144 a): the runs' own slopes scatter beyond
    # their noise by that much; with every launch at the same a, by nothing
    scattered = drift_fit([(np.arange(8), np.log(t.steps)) for t in study(np.random.default_rng(4), amplitude=0.12,
                                                                          runs=200)])
    assert 0.5 * 0.144 * 0.12 < scattered.amplitude_launch_sd < 1.6 * 0.144 * 0.12
    same = []
    rng = np.random.default_rng(5)
    for _ in range(200):
        e, rates = 0.0, []
        for t in range(8):
            e = 0.5 * e + math.sqrt(1 - 0.25) * rng.normal(0, 0.02)
            rates.append(math.log(1000.0 * (1 + 0.12 * math.exp(-t / 4))) + e)
        same.append((np.arange(8), np.array(rates)))
    assert drift_fit(same).amplitude_launch_sd < 0.3 * 0.144 * 0.12
    t = np.arange(8)
    assert scattered.shift_sd(t) > scattered.shared_shift_sd(t)


def test_the_fits_own_error_is_shared_by_every_run_and_cancels_in_a_ratio():
    from tuner.stats import SHARED_SE, config_estimate, ratio_estimate

    rng = np.random.default_rng(6)
    falling = study(rng, amplitude=0.09)
    moved, fit = drift_corrected(falling, trial_cis(falling)[0])
    shared = moved[0][SHARED_SE]
    assert 0 < shared == pytest.approx(fit.shared_shift_sd(np.arange(8))) and shared < moved[0]["se"] / moved[0]["mean"]
    group = [moved[n] for n in range(0, 60, 3)]
    many = config_estimate(group, tau2=0.0, tau_df=0)
    # twenty runs average their own errors away, not the fit's
    own = np.mean([(m["se"] / m["mean"]) ** 2 - m[SHARED_SE] ** 2 for m in group])
    assert many["log_var"] == pytest.approx(shared**2 + own / 20, rel=0.05)
    # two configs moved by the same fit: their ratio carries their own errors only
    other = config_estimate([moved[n] for n in range(1, 60, 3)], tau2=0.0, tau_df=0)
    ratio = ratio_estimate(many, other)
    own = many["log_var"] - shared**2 + other["log_var"] - other["shared_sd"] ** 2
    half = math.log(ratio["ci95"][1] / ratio["mean"])
    assert half == pytest.approx(1.96 * math.sqrt(own), rel=0.1)


def test_the_runs_read_elsewhere_than_their_window_are_the_moved_ones():
    from tuner.stats import moved_values

    rng = np.random.default_rng(8)
    falling = study(rng, amplitude=0.09)
    cis, _ = trial_cis(falling)
    moved, _ = drift_corrected(falling, cis)
    assert moved_values(cis) == {}
    assert moved_values(moved) == {n: c["mean"] for n, c in moved.items()} and len(moved_values(moved)) == len(falling)
