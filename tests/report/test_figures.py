"""The plots mark the recommended config and the baseline, and say what their axes are."""

import pytest

from tests.stats.test_analysis import synthetic_study
from tuner.report._figures import figures
from tuner.stats import analyze_study


@pytest.fixture(scope="module")
def analysis():
    return analyze_study(synthetic_study(n=30, seed=4), n_boot=10)


def test_the_throughput_plot_marks_the_recommendation_and_the_baseline_not_the_luckiest_run(analysis):
    fig = figures(analysis)["history"]
    names = [t.name for t in fig.data]
    assert "recommended config's runs" in names and "baseline's runs" in names
    assert any(n.startswith("recommended: ") for n in names) and any(n.startswith("baseline: ") for n in names)
    assert "best so far" not in names                                    # the line to the luckiest run is gone
    rec = next(t for t in fig.data if t.name == "recommended config's runs")
    assert analysis["best"]["trial"] in list(rec.x) or analysis["best"]["measured_by_trial"] in list(rec.x)


def test_importance_has_an_axis_title_and_the_placebo_line(analysis):
    fig = figures(analysis)["importance"]
    assert "total-order index" in fig.layout.xaxis.title.text
    assert any(s.x0 == analysis["importance_model"]["placebo"]["total"] for s in fig.layout.shapes)


def test_level_charts_keep_their_counts_off_the_bars(analysis):
    for fig in figures(analysis)["marginal"].values():
        assert fig.data[0].text is None and all("ok /" in str(x) for x in fig.data[0].x)
