"""Config-level estimates: run-to-run variation, pooled runs, Holm."""

import math

import numpy as np
import pytest

from tuner.stats import config_estimate, holm, ratio_estimate, run_to_run_variance


def test_run_to_run_variance_is_recovered_from_repeated_configs():
    rng = np.random.default_rng(0)
    groups = [[{"mean": 1000 * m * math.exp(rng.normal(0, 0.03)), "se": 5.0, "df": 20} for _ in range(3)]
              for m in rng.uniform(1, 2, 40)]
    tau2, df = run_to_run_variance(groups)
    assert df == 80 and 0.02 < math.sqrt(tau2) < 0.04
    assert run_to_run_variance([[{"mean": 1.0, "se": 0.1}]]) == (0.0, 0)


def test_speedup_cis_cover_with_run_to_run_variation():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(300):
        runs = lambda m, k: [{"mean": m * math.exp(rng.normal(0, 0.03) + rng.normal(0, 0.01)), "se": m * 0.01,  # noqa: E731
                              "df": 30.0} for _ in range(k)]
        groups = [runs(1000.0, 2) for _ in range(8)]
        tau2, df = run_to_run_variance(groups)
        r = ratio_estimate(config_estimate(runs(1300.0, 2), tau2=tau2, tau_df=df),
                           config_estimate(runs(1000.0, 2), tau2=tau2, tau_df=df))
        hits += r["ci95"][0] <= 1.3 <= r["ci95"][1]
    assert hits / 300 >= 0.90


def test_holm_controls_the_family():
    assert holm([0.001, 0.02, 0.04]) == [True, True, True]
    assert holm([0.001, 0.03, 0.04]) == [True, False, False]
    assert holm([]) == []
    assert config_estimate([], tau2=0.0, tau_df=0) is None
    assert config_estimate([{"mean": 10.0, "se": 1.0, "df": 5.0}], tau2=0.0, tau_df=0)["mean"] == pytest.approx(10.0)


def test_launch_variance_uses_the_stated_prior_without_re_measurements_and_the_runs_with_them():
    from tuner.stats import TAU_PRIOR_SD, launch_variance

    alone = launch_variance([[{"mean": 100.0, "se": 1.0, "df": 7}]])
    assert alone.tau2 == pytest.approx(TAU_PRIOR_SD**2) and alone.raw_df == 0 and alone.se_scale == 1.0
    # a config run once carries se^2 + tau^2
    once = config_estimate([{"mean": 100.0, "se": 1.0, "df": 7.0}], tau2=alone.tau2, tau_df=alone.df)
    assert once["log_var"] == pytest.approx(0.01**2 + TAU_PRIOR_SD**2)
    rng = np.random.default_rng(2)
    spread = [[{"mean": 1000 * math.exp(rng.normal(0, 0.05)), "se": 5.0, "df": 20} for _ in range(3)]
              for _ in range(30)]
    lv = launch_variance(spread)
    assert lv.raw_df == 60 and 0.04 < math.sqrt(lv.tau2) < 0.06 and lv.se_scale == 1.0
    # runs that agree better than their per-run errors say (stalls): the errors are scaled down
    tight = [[{"mean": 1000 * math.exp(rng.normal(0, 0.02)), "se": 80.0, "df": 20} for _ in range(3)]
             for _ in range(30)]
    lv = launch_variance(tight)
    assert lv.tau2 < TAU_PRIOR_SD**2 and 0.03 < lv.se_scale < 0.15


def test_a_few_re_measurements_that_agree_by_chance_barely_scale_the_errors():
    """Two configs run three times each (4 df) whose runs agree to a fraction of their 2% errors:
    with 4 df that happens in a fifth of studies whose errors are right. The scale V / s2 is
    shrunk toward 1 by SCALE_PRIOR_DF, so these runs do not narrow every config's interval."""
    from tuner.stats import SCALE_PRIOR_DF, launch_variance

    groups = [[{"mean": m, "se": 20.0, "df": 20} for m in (1000.0, 1012.0, 995.0)],
              [{"mean": m, "se": 24.0, "df": 20} for m in (1200.0, 1185.0, 1210.0)]]
    lv = launch_variance(groups)
    assert lv.raw_df == 4 and lv.spread_ratio < 0.5
    assert lv.se_scale == pytest.approx((SCALE_PRIOR_DF + 4 * lv.spread_ratio) / (SCALE_PRIOR_DF + 4))
    assert lv.se_scale > 0.6


def test_a_small_excess_over_large_errors_is_known_to_few_degrees_of_freedom():
    """tau2 = V - s2 carries V's whole sampling variance: 2 V^2 / df. A launch spread of 1% under
    4% per-run errors is known to far fewer df than the 9 the runs have; where the runs say
    nothing beyond their errors, or nothing was re-measured, the df are the plain ones."""
    from tuner.stats import TAU_PRIOR_DF, launch_variance

    def groups(extra_sd: float, se_rel: float, seed: int = 3) -> list:
        rng = np.random.default_rng(seed)
        return [[{"mean": 1000 * math.exp(rng.normal(0, math.hypot(extra_sd, se_rel))), "se": 1000 * se_rel, "df": 30}
                 for _ in range(4)] for _ in range(3)]   # 9 df, as one ablation round gives

    small = launch_variance(groups(0.03, 0.04, seed=5))
    assert small.raw_tau2 > 0 and small.df == TAU_PRIOR_DF + 9
    assert 0 < small.tau2_df < small.df / 2
    # a config run once: its interval reads tau2 at those df, so it is wider than at the plain df
    run = [{"mean": 1000.0, "se": 40.0, "df": 30.0}]
    honest = config_estimate(run, tau2=small.tau2, tau_df=small.df, tau2_df=small.tau2_df)
    plain = config_estimate(run, tau2=small.tau2, tau_df=small.df)
    assert honest["log_var"] == plain["log_var"] and honest["df"] < plain["df"]
    assert honest["ci95"][1] > plain["ci95"][1]
    assert launch_variance([]).tau2_df == TAU_PRIOR_DF
    tight = launch_variance(groups(0.0, 0.04, seed=6))   # spread under the errors: nothing in excess
    if tight.raw_tau2 == 0:
        assert tight.tau2_df == tight.df


def test_a_ratio_of_two_configs_counts_their_shared_launch_variance_once():
    """Both configs' tau2 is one estimate: where it dominates, the ratio's df is tau2's, not the
    twice-as-many a sum of two independent parts would claim; and the interval is wider for it."""
    one = lambda m: [{"mean": m, "se": m * 0.001, "df": 1e6}]  # noqa: E731  (launch-dominated runs)
    num, den = (config_estimate(one(m), tau2=0.04**2, tau_df=4) for m in (1300.0, 1000.0))
    shared = ratio_estimate(num, den)
    apart = ratio_estimate(num, config_estimate(one(1000.0), tau2=0.04**2 * (1 + 1e-12), tau_df=4))
    from scipy import stats
    quantile = math.log(shared["ci95"][1] / shared["mean"]) / math.sqrt(num["log_var"] + den["log_var"])
    assert quantile == pytest.approx(stats.t.ppf(0.975, 4), rel=1e-3)       # tau2's 4 df
    assert shared["ci95"][1] > apart["ci95"][1] and shared["p_value"] > apart["p_value"]
    # a scale on the runs' se (stalls) is one estimate too: m runs' scaled parts share its df
    runs = [{"mean": 1000.0 * (1 + 0.01 * i), "se": 50.0, "df": 1e6} for i in range(3)]
    scaled = config_estimate(runs, tau2=0.0, tau_df=5, se_scale=0.2)
    assert scaled["df"] == pytest.approx(5.0, rel=1e-3)


def test_an_error_every_run_shares_counts_once_in_a_config_and_cancels_in_a_ratio():
    from tuner.stats import SHARED_SE, config_estimate, ratio_estimate

    run = {"mean": 100.0, "se": 5.0, "df": 30.0, SHARED_SE: 0.03}   # 5 % in all, 3 % of it shared
    one = config_estimate([run] * 4, tau2=0.0, tau_df=0)
    assert one["log_var"] == pytest.approx((0.05**2 - 0.03**2) / 4 + 0.03**2)
    other = config_estimate([{**run, "mean": 110.0, "se": 5.5}] * 4, tau2=0.0, tau_df=0)
    ratio = ratio_estimate(other, one)
    half = math.log(ratio["ci95"][1] / ratio["mean"])
    from scipy import stats
    df = 0.0008**2 / (8 * (0.0016 / 16) ** 2 / 30)   # the runs' own parts only: 8 of 1e-4, 30 df each
    assert half == pytest.approx(float(stats.t.ppf(0.975, df)) * math.sqrt(2 * (0.05**2 - 0.03**2) / 4), rel=1e-6)
