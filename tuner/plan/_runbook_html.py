"""runbook.html (plotly inlined: works offline) and runbook.pdf (headless Chromium, where installed)."""

from __future__ import annotations

import html
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["render_runbook_html", "write_pdf", "find_chromium"]

_CSS = """body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 1em;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
th{background:#f2f2f2}pre{background:#f6f6f6;padding:.8em;overflow-x:auto}blockquote{color:#8a4b00;margin-left:0;
padding-left:1em;border-left:4px solid #e0a040}h2{border-bottom:1px solid #ddd;page-break-before:auto}
@media print{body{font-size:9.5pt;line-height:1.25;max-width:none}pre{font-size:7pt}td,th{padding:1px 4px}
.plot{page-break-inside:avoid}.page{page-break-before:always}}"""


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _figure(plan: dict[str, Any]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = plan["layouts"]
    names = [r["layout"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Throughput (tokens/s/GPU, band)", "Memory per GPU (GiB)"))
    tps = [r["tokens_per_sec_per_gpu"] or 0 for r in rows]
    fig.add_trace(go.Bar(x=names, y=tps, name="tokens/s/GPU",
                         marker_color=["#2a7" if r is plan["chosen"] else "#89a" for r in rows],
                         error_y={"type": "data", "array": [(r["band"][1] - r["tokens_per_sec_per_gpu"]) if r["band"] else 0
                                                            for r in rows],
                                  "arrayminus": [(r["tokens_per_sec_per_gpu"] - r["band"][0]) if r["band"] else 0
                                                 for r in rows]}), row=1, col=1)
    for part in ("weights", "gradients", "optimizer", "activations", "gathered_params", "overhead"):
        fig.add_trace(go.Bar(x=names, y=[r["memory_gib"].get(part, 0.0) for r in rows], name=part), row=1, col=2)
    usable = plan["chosen"]["usable_gib"]
    fig.add_trace(go.Scatter(x=names, y=[usable] * len(names), mode="lines", name="usable memory",
                             line={"dash": "dash", "color": "crimson"}), row=1, col=2)
    fig.update_layout(barmode="stack", height=420, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(tickangle=-30)
    return fig


def _markdown(md: str) -> str:
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark").enable("table").render(md)


def render_runbook_html(plan: dict[str, Any], md: str) -> str:
    """A self-contained page: the runbook's markdown as HTML, the plot after the decision."""
    body = _markdown(md)
    plot = '<div class="plot">' + _figure(plan).to_html(full_html=False, include_plotlyjs=True) + "</div>"
    marker = "<h2>4. Memory, batch and throughput</h2>"
    body = body.replace(marker, marker + plot, 1) if marker in body else plot + body
    # page one is the plain-words page: the technical plan starts on a page of its own
    body = body.replace("<h2>2. ", '<h2 class="page">2. ', 1)
    title = html.escape(f"Runbook: {plan['inputs']['model']} on {plan['inputs']['gpu_count']} x {plan['inputs']['gpu']}")
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>{_CSS}</style></head>'
            f"<body>{body}</body></html>")


def write_pdf(html_path: Path, pdf_path: Path, *, timeout_s: int = 120) -> Path | None:
    """Print the page to PDF with headless Chromium; None where no Chromium is installed or it fails."""
    chromium = find_chromium()
    if not chromium:
        return None
    with tempfile.TemporaryDirectory() as profile:
        try:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={profile}", "--virtual-time-budget=8000", "--no-pdf-header-footer",
                            f"--print-to-pdf={pdf_path}", html_path.resolve().as_uri()],
                           capture_output=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return pdf_path if pdf_path.exists() and pdf_path.stat().st_size > 0 else None
