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
    assert risk["lower90"] >= 0.25 and risk["knobs"]["mb"] == "8"
    assert risk["ci95"][0] <= risk["lower90"] <= risk["rate"]   # one-sided 90%: above the two-sided 95% CI's end
    safe = neighbour_risk({"mb": 4, "ckpt": True, "workers": 1}, trials, ["mb", "ckpt", "workers"])
    assert safe["lower90"] < 0.25   # its worst neighbourhood (workers=1) holds mb 8 runs, not surely >= 25%


def test_a_neighbourhood_failing_11_of_25_is_a_risk():
    """A study of the concentrated-failures family (120 studies, one missed): the recommended
    config (micro_batch 8 with checkpointing, failing half its runs) ran 5 times without a
    failure, and its micro_batch 8 neighbourhood failed 11 of 25. The exact two-sided 95% CI
    starts at 24.4%; the one-sided test that the rate is above 25% rejects at 5% (27.0%), and
    so at the flag's 10%."""
    from tuner.stats import neighbour_risk

    trials = [run(i, "oom" if i < 11 else "ok", mb=8, ckpt=bool(i % 2), workers=0) for i in range(25)]
    trials += [run(25 + i, "ok", mb=4, ckpt=bool(i % 2), workers=0) for i in range(25)]
    risk = neighbour_risk({"mb": 8, "ckpt": True, "workers": 0}, trials, ["mb", "ckpt", "workers"])
    assert risk["knobs"] == {"mb": "8"} and (risk["failures"], risk["runs"]) == (11, 25)
    assert risk["ci95"][0] < 0.25 <= risk["lower90"]


def test_the_models_fast_prediction_is_scikit_learns_and_the_index_changes_nothing():
    """failure_model fits scikit-learn's L2 logistic regression (objective and lbfgs solver)
    with SciPy and reads its coefficients from a dict: the same probabilities as scikit-learn's
    predict_proba on the one-hot codes (an unseen level adds nothing), and config_failure with
    the study's attempts index says what its scan says."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import OneHotEncoder

    from tuner.stats import attempts_by_config

    rng = np.random.default_rng(3)
    trials = []
    for i in range(120):
        p = {"mb": int(rng.choice([1, 2, 8])), "proto": str(rng.choice(["LL", "Simple"])), "ws": [None, 4][i % 2]}
        trials.append(run(i, "oom" if rng.random() < (0.6 if p["mb"] == 8 else 0.1) else "ok", **p))
    knobs = ["mb", "proto", "ws"]
    model = failure_model(trials, knobs)
    rows = [[("n/a" if t.params[k] is None else __import__("json").dumps(t.params[k])) for k in knobs] for t in trials]
    enc = OneHotEncoder(handle_unknown="ignore").fit(rows)
    reference = LogisticRegression(C=10.0, max_iter=1000).fit(enc.transform(rows), [t.status == "oom" for t in trials])
    for params, row in [(trials[0].params, rows[0]), (trials[1].params, rows[1]),
                        ({"mb": 16, "proto": "LL", "ws": 4}, ["16", '"LL"', "4"])]:
        assert model(params) == pytest.approx(reference.predict_proba(enc.transform([row]))[0, 1], rel=1e-9)
    levels, index = level_failures(trials, knobs), attempts_by_config(trials)
    for t in trials[:20]:
        assert config_failure(t.params, trials, levels, model) == config_failure(t.params, trials, levels, model,
                                                                                  attempts=index)


def test_a_neighbourhood_failing_9_of_21_is_flagged_at_the_one_sided_90_percent_bound():
    """One of the three the one-sided 95% bound missed in 800 studies (`failures`, study 344):
    the recommended micro_batch 8 config ran 5 times with 1 failure; its micro_batch 8
    neighbourhood failed 9 of 21 (one-sided 95% bound 24.5%, under 25%; 90% bound above)."""
    from tuner.stats import neighbour_risk

    trials = [run(i, "oom" if i < 9 else "ok", mb=8, ckpt=bool(i % 2), workers=0) for i in range(21)]
    trials += [run(21 + i, "ok", mb=4, ckpt=bool(i % 2), workers=0) for i in range(25)]
    risk = neighbour_risk({"mb": 8, "ckpt": True, "workers": 0}, trials, ["mb", "ckpt", "workers"])
    assert (risk["failures"], risk["runs"]) == (9, 21) and risk["lower90"] >= 0.25
