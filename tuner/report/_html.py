"""report.html: a page a team lead reads in one minute, self-contained (plotly.js inlined once).

The first screen holds the recommendation, its speedup with its CI, tokens/s/GPU and MFU, the
GPU-hours it saves on a plan the reader can change (the page recomputes them), and whether
the numbers were simulated or measured. Then the recipe, rendered (markdown-it), the
throughput plot with the recommended config and the baseline marked, and importance. Detail
(each knob's levels, failures, predicted vs measured, method, budget) is collapsed. Nothing is
wider than the page: long lines wrap, wide tables scroll inside their own box.
"""

from __future__ import annotations

import html
import json
from typing import Any

from tuner.report._figures import figures

__all__ = ["render_html"]

_CSS = """
*{box-sizing:border-box} body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;
max-width:1180px;padding:12px 20px;color:#1f2328;line-height:1.45;overflow-wrap:anywhere}
h1{font-size:1.5rem;margin:.2rem 0 .4rem} h2{font-size:1.2rem;margin:1.4rem 0 .5rem}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:.8rem;font-weight:600;vertical-align:middle}
.sim{background:#fff1e5;color:#9a3c00;border:1px solid #f0b07a}
.measured{background:#e8f5ec;color:#1a7f37;border:1px solid #8fd1a3}
#headline{border:2px solid #1a7f37;border-radius:10px;padding:12px 16px;background:#f6fbf7}
#headline .lead{font-size:1.35rem;font-weight:650;margin:0 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:10px} .card{flex:1 1 200px;background:#fff;border:1px solid #d0d7de;
border-radius:8px;padding:8px 10px} .card .v{font-size:1.15rem;font-weight:600} .card .k{font-size:.8rem;color:#57606a}
.warn{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin:8px 0}
.note{font-size:.85rem;color:#57606a;margin:6px 0 0}
input[type=number]{width:9em} pre{white-space:pre-wrap;background:#f6f8fa;padding:8px;border-radius:6px}
code{background:#f6f8fa;padding:0 3px;border-radius:3px} pre code{padding:0}
.recipe blockquote{border-left:4px solid #d4a72c;margin:8px 0;padding:2px 12px;background:#fffbe6}
.scroll{overflow-x:auto;max-width:100%} table{border-collapse:collapse;font-size:.85rem}
td,th{padding:2px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
details{margin:8px 0;border:1px solid #d0d7de;border-radius:8px;padding:6px 10px}
summary{cursor:pointer;font-weight:600} .plot{width:100%} .recipe h1{font-size:1.2rem;margin-top:1.4rem}
"""

# Recomputes the GPU-hours line when the reader changes the planned tokens; plotly figures in
# a <details> are drawn at their width when it opens.
_JS = """
function tunerPlan(){var el=document.getElementById('plan-tokens');if(!el)return;var t=parseFloat(el.value);
var d=document.getElementById('headline').dataset;var base=parseFloat(d.baseTps),s=JSON.parse(d.speedup);
if(!(t>0)||!(base>0))return;var today=t/base/3600;function f(x){return (today*(1-1/x)).toLocaleString(undefined,
{maximumFractionDigits:1})}
document.getElementById('saved').textContent=f(s[0])+' GPU-h';
document.getElementById('saved-ci').textContent='95% CI '+f(s[1])+' to '+f(s[2])+' of '+today.toLocaleString(
undefined,{maximumFractionDigits:1})+' GPU-h';}
document.querySelectorAll('details').forEach(function(d){d.addEventListener('toggle',function(){
if(window.Plotly)d.querySelectorAll('.js-plotly-plot').forEach(function(p){Plotly.Plots.resize(p)})})});
"""


def _plot(fig, first: bool) -> str:
    if fig is None:
        return ""
    body = fig.to_html(full_html=False, include_plotlyjs=first, default_width="100%",
                       config={"responsive": True, "displaylogo": False})
    return f'<div class="plot">{body}</div>'


def _headline(analysis: dict[str, Any], planned: float) -> str:
    from tuner.stats import headline

    h = headline(analysis, planned_tokens=planned)
    spec = analysis.get("spec") or {}
    cluster, model = spec.get("cluster") or {}, spec.get("model") or {}
    where = (f"{cluster.get('nodes')} node(s) x {cluster.get('gpus_per_node')} {cluster.get('gpu')}, "
             f"{model.get('preset') or model.get('path')} at seq_len {model.get('seq_len')}")
    source = ("<span class='badge sim'>SIMULATED</span> every number comes from tuner's performance model "
              "(<code>--launcher sim</code>), not from measurements" if h["simulated"]
              else "<span class='badge measured'>MEASURED</span> on the cluster's own trials")
    facts = (f"<p class='note'>{source}: {analysis['n_trials']} trials ({analysis['n_ok']} ok) on {html.escape(where)}, "
             f"{analysis['budget']['used_gpu_hours']:,.2f} of {analysis['budget']['limit_gpu_hours']:,.2f} GPU-h.</p>")
    rec, base, speed = h["recommended"], h["baseline"], h["speedup"]
    if not rec:
        return f"<section id='headline'><p class='lead'>No trial finished ok: nothing to recommend yet.</p>{facts}</section>"
    best = analysis["best"]
    warn = ""
    if not best.get("reliable", True):
        warn += "<div class='warn'><b>Every config that beat the others fails often; this one too.</b></div>"
    if base and best["trial"] == base["trial"]:
        lead = f"No config beat today's: keep the baseline (trial {rec['trial']})."
    elif speed:
        lead = (f"Recommended: trial {rec['trial']}, <span id='speedup'>{speed['mean']:.2f}x</span> today's "
                f"throughput <span class='note'>(95% CI {speed['ci95'][0]:.2f}x to {speed['ci95'][1]:.2f}x)</span>")
    else:
        lead = f"Recommended: trial {rec['trial']} <span class='note'>(no baseline in this study to compare)</span>"
    how = "re-measured" if best.get("winners_curse_adjusted") else "its search run; not re-measured, may read high"

    def card(key: str, value: str, sub: str, ident: str = "") -> str:
        return (f"<div class='card'{f' id={ident!r}' if ident else ''}><div class='k'>{key}</div>"
                f"<div class='v'>{value}</div><div class='k'>{sub}</div></div>")

    tps = rec["tokens_per_sec_per_gpu"]
    cards = [card("tokens/s/GPU, recommended", f"{tps['mean']:,.0f}",
                  f"95% CI {tps['ci95'][0]:,.0f} to {tps['ci95'][1]:,.0f} ({how})")]
    cards.append(card("MFU, recommended", f"{rec['mfu']['mean']:.1%}" if rec["mfu"] else "n/a",
                      (f"baseline {base['mfu']['mean']:.1%}; " if base and base["mfu"] else "")
                      + ("6N + 12LHT FLOPs per token over the GPU's bf16 peak" if rec["mfu"]
                         else "no datasheet peak for this device"), "mfu"))
    if base:
        b = base["tokens_per_sec_per_gpu"]
        cards.append(card(f"tokens/s/GPU, baseline (trial {base['trial']})", f"{b['mean']:,.0f}",
                          f"95% CI {b['ci95'][0]:,.0f} to {b['ci95'][1]:,.0f}"))
    plan = ""
    data = ""
    if h["gpu_hours_saved"]:
        saved = h["gpu_hours_saved"]
        cards.append(card("GPU-hours saved on the plan below", f"<span id='saved'>{saved['mean']:,.1f} GPU-h</span>",
                          f"<span id='saved-ci'>95% CI {saved['ci95'][0]:,.1f} to {saved['ci95'][1]:,.1f} of "
                          f"{h['gpu_hours_today']:,.1f} GPU-h</span>"))
        plan = (f"<p class='note'><label>Planned run: <input id='plan-tokens' type='number' min='1' step='any' "
                f"value='{h['planned_tokens']:g}' oninput='tunerPlan()'> tokens</label> (change it; the saving "
                "is recomputed at the measured rates; <code>tuner report --planned-tokens</code> sets the default)</p>")
        data = (f" data-base-tps='{base['tokens_per_sec_per_gpu']['mean']}' "
                f"data-speedup='{json.dumps([speed['mean'], *speed['ci95']])}'")
    return (f"<section id='headline'{data}><p class='lead'>{lead}</p>{warn}<div class='cards'>{''.join(cards)}</div>"
            f"{plan}{facts}</section>")


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<div class='scroll'><table><tr>{th}</tr>{body}</table></div>"


def _details(analysis: dict[str, Any], figs: dict[str, Any]) -> str:
    out = []
    if figs["marginal"]:
        out.append("<details id='levels'><summary>Each knob's levels (survivor means: ok trials only)</summary>"
                   + "".join(_plot(f, False) for f in figs["marginal"].values()) + "</details>")
    failed = [t for t in analysis["trials"] if t["status"] != "ok"]
    if failed:
        rows = [[str(t["trial"]), t["status"], json.dumps(t["params"]), t["message"] or ""] for t in failed]
        out.append(f"<details id='failures'><summary>Failures ({len(failed)})</summary>"
                   + _table(["trial", "status", "params", "reason"], rows) + "</details>")
    pred = [t for t in analysis["trials"] if t.get("predicted_tokens_per_sec_per_gpu")]
    if pred:
        rows = [[str(t["trial"]), t["status"], f"{t['predicted_tokens_per_sec_per_gpu']:,.0f}",
                 f"{t['tokens_per_sec_per_gpu']['mean']:,.0f}" if t["tokens_per_sec_per_gpu"] else "did not run ok"]
                for t in pred]
        out.append(f"<details id='predicted'><summary>Predicted vs measured ({len(pred)} trials the model-guided "
                   "sampler picked)</summary><p class='note'>What the calibrated model expected when it picked each "
                   "trial (refitted to the trials before it), and what the trial measured.</p>"
                   + _table(["trial", "status", "predicted tokens/s/GPU", "measured"], rows) + "</details>")
    out.append("<details id='budget'><summary>Budget burn</summary>" + _plot(figs["budget"], False) + "</details>")
    m = analysis.get("method") or {}
    best = analysis.get("best") or {}
    method = [f"Each trial: {m.get('trial_ci', '')}. Its CI is conditional on that launch.",
              f"Speedup: {m.get('speedup_ci', '')}.", f"Winner's curse: {m.get('winners_curse', '')}"
              + ("" if best.get("winners_curse_adjusted") else " (not available here: the headline is the search "
                 "trial's own measurement and may read high)") + ".",
              f"Importance: {m.get('importance', '')}.", f"Failures: {m.get('failures', '')}.",
              "MFU: 6N + 12LHT FLOPs per token (PaLM, App. B; recompute not counted) x tokens/s/GPU over the GPU's "
              "dense bf16 datasheet peak; non-padding tokens, so useful work only.",
              "docs/statistics.md has the details and the coverage measured on studies with known truth."]
    out.append("<details id='method'><summary>How these numbers are made</summary><ul>"
               + "".join(f"<li>{html.escape(x)}</li>" for x in method) + "</ul></details>")
    return "".join(out)


def render_html(analysis: dict[str, Any], recipe_md: str, *, planned_tokens: float) -> str:
    """The whole page as one string (works offline: no CDN)."""
    from markdown_it import MarkdownIt

    recipe_html = MarkdownIt("commonmark", {"html": False}).enable("table").render(recipe_md)
    figs = figures(analysis)
    name = html.escape(analysis["study"])
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>tuner report: {name}</title>"
            f"<style>{_CSS}</style></head><body><h1>tuner report: {name}</h1>"
            f"{_headline(analysis, planned_tokens)}"
            f"<h2>Throughput</h2>{_plot(figs['history'], True)}"
            f"<section id='recipe' class='recipe'>{recipe_html}</section>"
            f"<h2>Importance</h2>{_plot(figs['importance'], False) or '<p>Too few ok trials to rank the knobs.</p>'}"
            f"<h2>Detail</h2>{_details(analysis, figs)}"
            f"<script>{_JS}</script></body></html>")

