"""tuner.plan._runbook_html: the self-contained runbook.html, and the PDF only where Chromium is."""

import pytest

from helper import plan_training
from tuner.plan._runbook_html import find_chromium, render_runbook_html, write_pdf


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, gpu="H100-80GB", tokens=100e9, cost_per_gpu_hour=2.5)


MD = "## 1. The run\n\ntext\n\n## 2. Go\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n## 4. Memory, batch and throughput\n\nx\n"


def test_the_page_is_offline_with_the_plot_after_the_memory_heading(plan13):
    page = render_runbook_html(plan13, MD)
    assert page.startswith("<!doctype html>") and '<script src="http' not in page and "Plotly" in page
    heading = page.index("<h2>4. Memory, batch and throughput</h2>")
    assert page.index('<div class="plot">') == heading + len("<h2>4. Memory, batch and throughput</h2>")
    assert '<h2 class="page">2. Go</h2>' in page and "<table>" in page
    assert "<title>Runbook: 13b (llama-2-13b shape) on 32 x H100-80GB</title>" in page


def test_without_the_memory_heading_the_plot_comes_first(plan13):
    page = render_runbook_html(plan13, "## 1. Only\n")
    assert page.index('<div class="plot">') < page.index("<h2>1. Only</h2>")


def test_without_chromium_there_is_no_pdf_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium on an empty PATH
    assert find_chromium() is None
    html = tmp_path / "runbook.html"
    html.write_text("<p>x</p>")
    assert write_pdf(html, tmp_path / "runbook.pdf") is None and not (tmp_path / "runbook.pdf").exists()
