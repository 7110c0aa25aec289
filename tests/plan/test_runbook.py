"""RUNBOOK.md has every section a team needs; runbook.html opens in real headless Chromium with its
plot drawn and no console errors (a screenshot is taken and checked)."""

import re
import shutil
import struct
import subprocess
import zlib

import pytest

from helper import plan_training
from tuner.plan import render_runbook, write_runbook

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=8000", "--window-size=1200,2400"]


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, gpu="H100-80GB", tokens=100e9, cost_per_gpu_hour=2.5)


def test_runbook_has_every_section_and_fits_about_six_pages(plan13):
    md = render_runbook(plan13, today="2026-01-01")
    for heading in ("## 1. The run in plain words", "## 2. Go / no-go before the long run", "## 3. Decision",
                    "## 4. Memory, batch and throughput", "## 5. Launch", "## 6. Checkpoints and restart",
                    "## 7. Failure playbook", "## 8. What to monitor", "## 9. Proxy validation"):
        assert heading in md, heading
    for needle in ("#SBATCH --nodes=4", "torchrun", "--nproc-per-node=8", "NCCL_ALGO", "--collective-timeout-s",
                   "--num-workers", "never a node-local disk", "node disappears", "collective operation timeout",
                   "out of memory", "loss spike", "tokens/s/GPU", "MFU", "step time", "Not validated"):
        assert needle in md, needle
    assert 150 <= len(md.splitlines()) <= 280          # about six printed pages (the PDF test counts them)


def test_memory_table_lists_parts_and_total_not_static_beside_them(plan13):
    # issue 31 item 11: `static` was listed beside its parts; "86 GB capacity" on an 80 GB card
    md = render_runbook(plan13, today="2026-01-01")
    section = md[md.index("## 4."):md.index("## 5.")]
    assert "| static |" not in section and "| weights |" in section and "capacity 79.6" in section
    assert "In a tuner workload they are the knobs" not in md        # the garbled sentence is gone


def test_runbook_uses_the_tuning_studys_settings(plan13):
    md = render_runbook(plan13, tuning={"study": "h100-tune", "trial": 7,
                                        "params": {"nccl_proto": "LL128", "num_workers": 4, "prefetch_factor": 6}})
    assert "export NCCL_PROTO=LL128" in md and "unset NCCL_ALGO" in md and "--num-workers 4 --prefetch-factor 6" in md
    assert "tuning study `h100-tune` (trial 7)" in md


def test_write_runbook_files_offline(plan13, tmp_path):
    paths = write_runbook(plan13, tmp_path, pdf=False)       # the PDF needs Chromium: the slow test
    assert {p.name for p in paths} == {"RUNBOOK.md", "runbook.html"}
    page = (tmp_path / "runbook.html").read_text()
    assert '<script src="http' not in page and "Plotly" in page and "<table>" in page


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium)")
def test_runbook_renders_in_headless_chromium(plan13, tmp_path):
    assert "runbook.pdf" in {p.name for p in write_runbook(plan13, tmp_path)}
    pdf = (tmp_path / "runbook.pdf").read_bytes()
    assert pdf[:4] == b"%PDF"
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert 5 <= pages <= 7, pages                                 # about six printed pages
    print(f"runbook.pdf: {pages} pages")
    page = tmp_path / "runbook.html"
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="main-svg"') >= 1                # the plot is drawn by plotly.js
    assert "3. Decision" in dom.stdout and "Failure playbook" in dom.stdout
    js_errors = [ln for ln in dom.stderr.splitlines() if "Uncaught" in ln or ("CONSOLE" in ln and "ERROR" in ln.upper())]
    assert not js_errors, js_errors
    shot = tmp_path / "runbook.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000
    # look at it: a 1200 px wide page that is not blank (a white page's pixel stream holds a few byte values)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">I", png[16:20])[0] == 1200
    pixels = zlib.decompress(b"".join(_chunks(png, b"IDAT")))
    assert len(set(pixels[: len(pixels) // 3])) > 100            # text, tables and bars in the top third


def _chunks(png: bytes, kind: bytes):
    pos = 8
    while pos < len(png):
        size, name = struct.unpack(">I4s", png[pos:pos + 8])
        if name == kind:
            yield png[pos + 8:pos + 8 + size]
        pos += 12 + size


def test_tuning_settings_take_the_best_ok_trial(tmp_path):
    import optuna

    from tuner.plan import tuning_settings
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(direction="maximize", study_name="tune", storage=url)
    for value, proto, status in ((900.0, "Simple", "ok"), (1200.0, "LL128", "ok"), (5000.0, "LL", "oom")):
        study.enqueue_trial({"nccl_proto": proto, "num_workers": 4})
        t = study.ask({"nccl_proto": optuna.distributions.CategoricalDistribution(["Simple", "LL128", "LL"]),
                       "num_workers": optuna.distributions.IntDistribution(0, 8)})
        t.set_user_attr("status", status)
        study.tell(t, value)
    best = tuning_settings(url, "tune")
    assert best["params"] == {"nccl_proto": "LL128", "num_workers": 4} and best["tokens_per_sec_per_gpu"] == 1200.0
