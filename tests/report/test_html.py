"""tuner.report._html: report.html, one self-contained page with the recommendation on its first screen."""

import pytest

from tests.stats.test_analysis import synthetic_study
from tuner.report import render_html, render_recipe
from tuner.stats import analyze_study


@pytest.fixture(scope="module")
def analysis():
    return analyze_study(synthetic_study(n=30, seed=4), n_boot=10)


def test_detail_tables_are_collapsed_and_never_read_nan(analysis):
    trials = [dict(t) for t in analysis["trials"]]
    failed = next(t for t in trials if t["status"] != "ok")
    failed["predicted_tokens_per_sec_per_gpu"] = 1234.0               # picked by the model, then failed
    page = render_html({**analysis, "trials": trials}, render_recipe(analysis), planned_tokens=1e9)
    assert "<details id='predicted'>" in page and "<details id='failures'>" in page
    assert "nan" not in page.split("<details id='predicted'>")[1].split("</details>")[0]
    assert "did not run ok" in page


def test_the_page_is_offline_and_opens_on_the_recommendation_and_its_speedup(analysis):
    page = render_html(analysis, render_recipe(analysis), planned_tokens=1e9)
    assert page.startswith("<!doctype html>") and "<script src=" not in page
    assert f"<title>tuner report: {analysis['study']}</title>" in page
    first = page.index("<section id='headline'")
    assert first < page.index("<h2>Throughput</h2>") < page.index("<section id='recipe'") < page.index("<h2>Detail</h2>")
    headline = page[first:page.index("</section>", first)]
    assert f"Recommended: trial {analysis['best']['trial']}, <span id='speedup'>" in headline
    assert "<span class='badge measured'>MEASURED</span>" in headline  # a synthetic study of real-looking trials
    assert f"{analysis['n_trials']} trials ({analysis['n_ok']} ok)" in headline
    assert "<input id='plan-tokens' type='number' min='1' step='any' value='1e+09'" in headline  # the reader's plan
