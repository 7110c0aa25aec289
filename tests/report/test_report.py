"""report.html opens in real headless Chromium with its plots drawn; RECIPE.md fits a page."""

import shutil
import subprocess

import pytest

from tests.stats.test_analysis import synthetic_study
from tuner.report import render_recipe, save_recipe_note, write_report
from tuner.stats import analyze_study
from tuner.storage import study_storage

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=4000", "--hide-scrollbars", "--lang=en-US"]


@pytest.fixture(scope="module")
def study_and_analysis():
    study = synthetic_study(n=40, seed=2)
    return study, analyze_study(study, n_boot=10)


def test_recipe_is_one_page_and_says_where_numbers_come_from(study_and_analysis):
    _, analysis = study_and_analysis
    recipe = render_recipe(analysis, planned_tokens=2e9, today="2026-01-01")
    assert len(recipe.splitlines()) <= 60
    assert "Speedup vs baseline" in recipe and "GPU-h saved" in recipe and "Measured" in recipe
    assert "## Apply" in recipe and "micro-batch" in recipe
    sim = render_recipe({**analysis, "simulated": True})
    assert "SIMULATED" in sim and "not from measurements" in sim


def test_report_files_and_dashboard_note(study_and_analysis, tmp_path):
    study, analysis = study_and_analysis
    paths = write_report(study, analysis, tmp_path)
    page = paths["html"].read_text()
    assert '<script src="http' not in page and "Plotly" in page   # plotly.js inlined: works offline
    assert save_recipe_note(study, paths["recipe"].read_text())
    from optuna_dashboard._note import get_note_from_system_attrs
    storage = study_storage(study)   # Optuna 5's Study has no system_attrs; its storage does
    note = get_note_from_system_attrs(storage.get_study_system_attrs(
        storage.get_study_id_from_name(study.study_name)), None)
    assert "Recipe" in note["body"]



def _note(study) -> str:
    from optuna_dashboard._note import get_note_from_system_attrs
    storage = study_storage(study)
    return get_note_from_system_attrs(storage.get_study_system_attrs(
        storage.get_study_id_from_name(study.study_name)), None)["body"]


def test_dashboard_note_through_the_package_where_its_writer_moved(monkeypatch):
    """The note's writer is loaded from optuna_dashboard/_note.py alone (the package's web app
    costs a second); where that file is not there, the package's own import writes it."""
    import importlib.util
    study = synthetic_study(n=6, seed=3)
    real = importlib.util.spec_from_file_location
    monkeypatch.setattr(importlib.util, "spec_from_file_location",
                        lambda name, where, *a, **k: real(name, str(where).replace("_note.py", "_gone.py"), *a, **k))
    assert save_recipe_note(study, "# Recipe: moved") and _note(study) == "# Recipe: moved"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)   # not installed
    assert not save_recipe_note(study, "# Recipe: nowhere") and _note(study) == "# Recipe: moved"

# Appended to a copy of the page by the test only: measures the layout after plotly drew it.
_MEASURE = """<script>window.addEventListener('load', function () { setTimeout(function () {
  var d = document.documentElement, h = document.getElementById('headline').getBoundingClientRect();
  var m = document.createElement('div'); m.id = 'measure';
  m.dataset.scrollWidth = d.scrollWidth; m.dataset.clientWidth = d.clientWidth;
  m.dataset.headlineBottom = Math.round(h.bottom + window.scrollY); m.dataset.innerHeight = window.innerHeight;
  m.dataset.headlineText = document.getElementById('headline').innerText.replace(/\\s+/g, ' ');
  m.dataset.pre = Array.from(document.querySelectorAll('pre')).map(function (p) { return p.innerText; }).join(' ');
  m.dataset.collapsed = document.querySelectorAll('details:not([open])').length;
  var plan = document.getElementById('plan-tokens'); m.dataset.savedBefore = document.getElementById('saved').textContent;
  plan.value = 2 * parseFloat(plan.value); tunerPlan(); m.dataset.savedAfter = document.getElementById('saved').textContent;
  document.body.appendChild(m); }, 300); });</script>"""


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium)")
def test_report_in_headless_chromium_reads_in_one_screen(study_and_analysis, tmp_path):
    """At 1,280 px: the recommendation, its speedup and MFU on the first screen, no sideways
    scroll, plots drawn, the recipe rendered (no raw markdown), details collapsed, files 0644."""
    import html as html_lib
    import re

    study, analysis = study_and_analysis
    nccl = {**analysis, "spec": {**analysis["spec"], "model": {"preset": "llama-2-7b", "seq_len": 2048},
                                 "cluster": {**analysis["spec"]["cluster"], "gpu": "H100-80GB", "backend": "nccl"}},
            "best": {**analysis["best"], "params": {**analysis["best"]["params"], "nccl_proto": "LL128"}}}
    paths = write_report(study, nccl, tmp_path / "out")
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in paths.values())       # the team can read them
    page = tmp_path / "page.html"
    page.write_text(paths["html"].read_text().replace("</body>", _MEASURE + "</body>"))
    shot = tmp_path / "report.png"
    # the DOM and the screenshot in two browsers at once: each is mostly Chromium's start-up
    screenshot = subprocess.Popen([CHROMIUM, *FLAGS, "--window-size=1280,800", f"--user-data-dir={tmp_path / 's'}",
                                   f"--screenshot={shot}", paths["html"].as_uri()],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dom = subprocess.run([CHROMIUM, *FLAGS, "--window-size=1280,800", f"--user-data-dir={tmp_path / 'd'}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    screenshot.wait(timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    js_errors = [ln for ln in dom.stderr.splitlines() if "Uncaught" in ln or ("CONSOLE" in ln and "ERROR" in ln.upper())]
    assert not js_errors, js_errors
    m = {k: html_lib.unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"',
                                                          re.search(r'<div id="measure"[^>]*>', dom.stdout).group(0))}
    assert int(m["scroll-width"]) <= int(m["client-width"]) <= 1280, m             # no sideways scroll
    assert int(m["headline-bottom"]) <= int(m["inner-height"]), m                  # all on the first screen
    speed = nccl["best"]["speedup_vs_baseline"]["mean"]
    assert f"Recommended: trial {nccl['best']['trial']}, {speed:.2f}x" in m["headline-text"], m
    assert re.search(r"MFU, recommended \d+\.\d%", m["headline-text"]) and "GPU-hours saved" in m["headline-text"]
    assert "MEASURED" in m["headline-text"]
    assert "##" not in m["pre"] and "**" not in m["pre"], m["pre"]                 # the recipe is rendered
    assert "<strong>Warning: <code>NCCL_PROTO=LL128</code>" in dom.stdout       # ... with its NCCL warning
    assert int(m["collapsed"]) >= 3                                              # detail tables collapse
    before, after = (float(m[k].split()[0].replace(",", "")) for k in ("saved-before", "saved-after"))
    assert after == pytest.approx(2 * before, rel=0.01)                        # the reader's plan reprices it
    assert dom.stdout.count('class="main-svg"') >= 3                             # plots drawn by plotly.js
    assert shot.exists() and shot.stat().st_size > 10_000


def test_recipe_fits_the_backend_warns_when_inconclusive_and_names_a_winning_baseline(study_and_analysis):
    _, analysis = study_and_analysis
    gloo = render_recipe(analysis)      # the synthetic study ran on gloo (CPU)
    assert "export NCCL_" not in gloo and "unset NCCL_" not in gloo and "not applicable" in gloo
    nccl = {**analysis, "spec": {**analysis["spec"], "cluster": {**analysis["spec"]["cluster"], "backend": "nccl"}}}
    assert "NCCL_" in render_recipe(nccl) and "not applicable" not in render_recipe(nccl)
    assert "Inconclusive" not in gloo
    assert "Inconclusive" in render_recipe({**analysis, "n_ok": 2}) and "only 2 trial(s)" in render_recipe(
        {**analysis, "n_ok": 2})
    base_best = {**analysis, "best": {**analysis["best"], "trial": analysis["baseline"]["trial"],
                                      "winners_curse_adjusted": False}}
    assert "the baseline itself" in render_recipe(base_best) and "not re-measured" not in render_recipe(base_best)


def test_recipe_shows_the_flaky_faster_config_and_keeps_placebos_out_of_what_matters():
    from bench.synthetic_studies import build_study
    from tuner.stats import analyze_record

    record, _ = build_study("failures", 2, "ar1-0.5")
    analysis = analyze_record(record, n_boot=40)
    recipe = render_recipe(analysis, today="2026-01-01")
    matters = recipe.split("## What matters")[1].split("## Provenance")[0]
    listed = matters.split("Not distinguishable")[0].split("Undecided:")[0]
    assert "nccl_proto" not in listed        # the placebo knob (it may be undecided: too few runs to rule 10% out)
    assert "micro_batch" in matters and "Failure-prone: micro_batch=8" in recipe
    if analysis["best"]["faster_but_flaky"]:
        assert "Not recommended although faster" in recipe
    assert "--micro-batch 8" not in recipe.split("## What it buys")[0]        # not the config to apply
