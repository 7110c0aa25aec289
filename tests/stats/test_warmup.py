"""The warm-up test, simulated under the study's noise: about 1% of runs without warm-up lose
steps, and a real leak is still dropped."""

import numpy as np

from tuner.stats import TrialRecord, trial_cis
from tuner.stats import warmup_scan_null as scan_null


def runs(rng, n_runs, *, phi=0.5, sd=0.05, steps=8, leak=(1.0, 1.0)):
    out = []
    for n in range(n_runs):
        e = [rng.normal()]
        for _ in range(steps - 1):
            e.append(phi * e[-1] + np.sqrt(1 - phi * phi) * rng.normal())
        rates = 1000.0 * (1 + sd * np.asarray(e))
        rates[: len(leak)] *= leak
        out.append(TrialRecord(number=n, state="COMPLETE", status="ok", params={}, steps=tuple(rates),
                               value=float(rates.mean())))
    return out


def test_plain_runs_rarely_lose_steps_and_a_leak_is_dropped():
    rng = np.random.default_rng(0)
    plain, _ = trial_cis(runs(rng, 400))
    dropped = np.mean([c["warmup_steps_dropped"] > 0 for c in plain.values()])
    assert dropped <= 0.025          # about 1% by construction; the fixed 3-sd cut dropped 3-5%
    leaky, _ = trial_cis(runs(rng, 100, leak=(0.6, 0.85)))
    assert np.mean([c["warmup_steps_dropped"] > 0 for c in leaky.values()]) >= 0.9


def test_the_null_scales_with_the_noise_and_is_reproducible():
    low, high = scan_null(8, 0.5, 0.02)[0], scan_null(8, 0.5, 0.10)[0]
    assert (high > 4 * low).all()                          # each head's spread follows the step noise
    assert scan_null(8, 0.5, 0.05)[1] == scan_null(8, 0.5, 0.05)[1]
