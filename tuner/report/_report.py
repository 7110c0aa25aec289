"""report.html (plotly, offline) and RECIPE.md from an analysis. Never recomputes statistics."""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path
from typing import Any

from tuner.knobs import KNOBS, LAUNCH_KNOBS

__all__ = ["write_report", "render_recipe", "render_html", "save_recipe_note", "DEFAULT_PLANNED_TOKENS"]

MIN_OK_TRIALS = 8
"""Fewer ok trials than this and the recipe says the study is inconclusive: too few for the
importance ranking and the "did not matter" list to mean much."""

DEFAULT_PLANNED_TOKENS = 1e9
"""Planned run for "what the speedup is worth" when none is given: 1e9 tokens (e.g. ~20
epochs of Alpaca's 52k examples at ~1k tokens each)."""

_ENV = {name: KNOBS[name].env_var for name in LAUNCH_KNOBS}


def _ci(d: dict[str, Any] | None, fmt: str = ",.0f") -> str:
    if not d:
        return "n/a"
    lo, hi = d["ci95"]
    return f"{d['mean']:{fmt}} (95% CI {lo:{fmt}} to {hi:{fmt}})"


# ------------------------------------------------------------------------------- recipe

def render_recipe(analysis: dict[str, Any], *, planned_tokens: float | None = None,
                  today: str | None = None) -> str:
    """RECIPE.md: one page a team lead can apply."""
    spec = analysis.get("spec", {})
    model, cluster, data = spec.get("model", {}), spec.get("cluster", {}), spec.get("data", {})
    best, base = analysis.get("best"), analysis.get("baseline")
    sim = analysis.get("simulated")
    planned = planned_tokens or DEFAULT_PLANNED_TOKENS
    world = cluster.get("nodes", 1) * cluster.get("gpus_per_node", 1)
    lines = [f"# Recipe: {analysis['study']}" + (" (SIMULATED)" if sim else ""), ""]
    if sim:
        lines += ["> **Simulated study**: every number below comes from tuner's performance model "
                  "(`--launcher sim`), not from measurements. Rehearsal only.", ""]
    if not best:
        return "\n".join(lines + ["No trial finished ok; nothing to recommend yet."]) + "\n"
    params = best["params"]
    if analysis["n_ok"] < MIN_OK_TRIALS:
        lines += [f"> **Inconclusive**: only {analysis['n_ok']} trial(s) finished ok (fewer than {MIN_OK_TRIALS}). "
                  "The best config below is the best of very few; the importance ranking and the "
                  "\"did not matter\" list mean little yet. Give the study a larger budget.", ""]
    if cluster.get("backend") == "gloo":  # NCCL's variables do nothing on gloo (CPU) runs
        env, unset = ["# NCCL_ALGO / NCCL_PROTO: not applicable, this study ran on gloo (CPU)"], []
    else:
        env = [f"export {var}={params[k]}" for k, var in _ENV.items() if params.get(k) not in (None, "default")]
        unset = [f"unset {var}   # leave it to NCCL" for k, var in _ENV.items() if params.get(k) == "default"]
    flags = " ".join(f"--{k.replace('_', '-')} {json.dumps(v) if isinstance(v, bool) else v}"
                     for k, v in params.items() if k not in _ENV)
    lines += ["## Apply", "", "```bash", *env, *unset, f"# training launch flags: {flags}", "```", ""]
    tps = best["tokens_per_sec_per_gpu"]
    if base and best["trial"] == base["trial"]:
        how = " (the baseline itself: no config beat today's)"
    elif best["winners_curse_adjusted"]:
        how = ""
    else:
        how = " (search measurement; not re-measured, may be optimistic)"
    lines += ["## What it buys", "", f"- Best config (trial {best['trial']}): **{_ci(tps)} tokens/s/GPU**{how}"]
    speed = best.get("speedup_vs_baseline")
    if base and speed:
        lines.append(f"- Baseline (today's config, trial {base['trial']}): {_ci(base['tokens_per_sec_per_gpu'])} tokens/s/GPU")
        lines.append(f"- **Speedup vs baseline: {_ci(speed, '.2f')}x**")
        b = base["tokens_per_sec_per_gpu"]["mean"]
        hours_base = planned / (b * world) / 3600 * world
        saved = [hours_base * (1 - 1 / s) for s in (speed["mean"], *speed["ci95"])]
        lines.append(f"- On a planned run of {planned:.3g} tokens on {world} GPU(s): {hours_base:,.1f} GPU-h today, "
                     f"**{saved[0]:,.1f} GPU-h saved** (95% CI {saved[1]:,.1f} to {saved[2]:,.1f})")
    flaky = best.get("faster_but_flaky")
    if flaky:
        f = flaky["failure"]
        where = (f" ({f['worst_level']['knob']}={f['worst_level']['level']} failed {f['worst_level']['failures']} "
                 f"of {f['worst_level']['runs']} runs)") if f.get("worst_level") else ""
        lines.append(f"- Not recommended although faster: trial {flaky['trial']}, {_ci(flaky['tokens_per_sec_per_gpu'])} "
                     f"tokens/s/GPU, but it fails about {f['estimate']:.0%} of the time{where}: "
                     f"{json.dumps(flaky['params'])}")
    unverified = best.get("faster_not_remeasured")
    if unverified:
        lines.append(f"- Not recommended although faster once: trial {unverified['trial']}, "
                     f"{_ci(unverified['tokens_per_sec_per_gpu'])} tokens/s/GPU ({_ci(unverified['vs_recommended_in_search'], '.2f')}x "
                     "the recommendation's search run), found after the re-measurements and not re-measured itself "
                     f"(one noisy run reads high); run the study on with a larger budget to re-measure it: {json.dumps(unverified['params'])}")
    own = (best.get("failure") or {}).get("own") or {}
    if own.get("runs"):
        lo, hi = own["ci95"]
        lines.append(f"- Reliability: failed {own['failures']} of its {own['runs']} runs "
                     f"(95% CI {lo:.0%} to {hi:.0%} of runs)")
    if not best.get("reliable", True):
        lines.append("- **Warning: every config that beat the others fails often; this one too.**")
    lines += ["", "## What matters", ""]
    imp = {d["knob"]: d for d in analysis.get("importance", [])}
    for row in analysis.get("what_matters", []):
        knob = row["knob"]
        meaning = f" ({KNOBS[knob].meaning})" if knob in KNOBS else ""
        if row["source"] == "ablation":
            lo, hi = row["ci95"]
            line = (f"1. **{knob} = {params.get(knob, 'n/a')}**{meaning}: worth {row['impact']:+.1%} "
                    f"(95% CI {lo:+.1%} to {hi:+.1%}, re-measured, Holm-corrected)")
        else:
            ci = f" (95% CI {row['ci95'][0]:.2f} to {row['ci95'][1]:.2f})" if row.get("ci95") else ""
            line = (f"1. **{knob} = {params.get(knob, 'n/a')}**{meaning}: total importance {row['total']:.2f}{ci}, "
                    "above a random placebo knob's")
        if knob in imp and imp[knob].get("interaction", 0) > 0.05:
            line += f"; much of it through interactions ({imp[knob]['interaction']:.2f} of the variance)"
        lines.append(line)
    if not analysis.get("what_matters"):
        lines.append("No knob's effect stands out from the noise and from a random placebo knob.")
    listed = {r["knob"] for r in analysis.get("what_matters", [])}
    abl = {e["knob"]: e for e in (analysis.get("ablation") or {}).get("knobs", [])}
    quiet = [d["knob"] for d in analysis.get("importance", [])
             if d["knob"] not in listed and d.get("matters") is False and d.get("ci95")
             and not (d["knob"] in abl and abl[d["knob"]].get("significant"))]
    unconfirmed = [f"{d['knob']} ({abl[d['knob']]['impact']:+.1%}, 95% CI {abl[d['knob']]['ci95'][0]:+.1%} to "
                   f"{abl[d['knob']]['ci95'][1]:+.1%})" for d in analysis.get("importance", [])
                   if d.get("matters") and d["knob"] in abl and d["knob"] not in listed]
    ablation_only = [f"{k} ({e['impact']:+.1%}, 95% CI {e['ci95'][0]:+.1%} to {e['ci95'][1]:+.1%})"
                     for k, e in abl.items() if e.get("significant") and k not in listed]
    if ablation_only:
        lines += ["", "Significant in the ablation's one revert run, but the search could not tell it from a random "
                      "placebo knob (one run is not enough to list it): " + "; ".join(ablation_only) + "."]
    if unconfirmed:
        lines += ["", "Above the placebo in the search, but the ablation's re-measurement could not confirm it: "
                      + "; ".join(unconfirmed) + "."]
    if quiet:
        lines += ["", "Not distinguishable from a random placebo knob here (no evidence they matter; "
                      f"not proof they do not): {', '.join(quiet)}."]
    # Levels where every trial failed: a rule to follow (a level with a few failures among
    # many ok trials usually failed because of another knob).
    fails = {k: [r["summary"] for r in rows if r["n_ok"] == 0 and r["failures"]]
             for k, rows in (analysis.get("marginal_effects") or {}).items()}
    fail_lines = [s for v in fails.values() for s in v]
    if fail_lines:
        lines += ["", "Avoid: " + "; ".join(fail_lines[:4]) + "."]
    # Levels failing in a quarter or more of their runs (oom/timeout/error), exact binomial CI
    risky = [f"{k}={lv} fails {d['failures']} of {d['runs']} runs (95% CI {d['ci95'][0]:.0%} to {d['ci95'][1]:.0%})"
             for k, by_level in (analysis.get("failure_rates") or {}).items() for lv, d in by_level.items()
             if d["runs"] >= 4 and d["ci95"][0] >= 0.25]   # surely a quarter or more, not by chance
    if risky:
        lines += ["", "Failure-prone: " + "; ".join(risky[:4]) + "."]
    n_fail = analysis.get("n_failed", {})
    lines += ["", "## Provenance", "",
              f"- {'Simulated' if sim else 'Measured'}: study `{analysis['study']}`, {analysis['n_trials']} trials "
              f"({analysis['n_ok']} ok, {n_fail.get('oom', 0)} oom, {n_fail.get('timeout', 0)} timeout, "
              f"{n_fail.get('error', 0)} error), {analysis['budget']['used_gpu_hours']:.3f} GPU-h used"
              + (f", {analysis['budget']['startup_share']:.0%} of it in trial start-up"
                 if analysis["budget"].get("startup_share") is not None else ""),
              *([f"- {analysis['budget_use']['summary']}"] if (analysis.get("budget_use") or {}).get("summary") else []),
              f"- Model: {model.get('preset') or model.get('path')} at seq_len {model.get('seq_len')}; "
              f"data: {_data_name(str(data.get('source')))}",
              f"- Cluster: {cluster.get('nodes')} node(s) x {cluster.get('gpus_per_node')} {cluster.get('gpu')}, "
              f"{cluster.get('backend')}, launcher {cluster.get('launcher')}",
              f"- Statistics (docs/statistics.md): {analysis['method']['trial_ci']}; speedup "
              f"{analysis['method']['speedup_ci']}; {analysis['method']['winners_curse']}",
              f"- Written {today or _dt.date.today().isoformat()} by `tuner report`."]
    return "\n".join(lines) + "\n"


def _data_name(source: str) -> str:
    return Path(source).name if source.startswith("/") else source


# --------------------------------------------------------------------------------- html

def _figures(analysis: dict[str, Any]) -> list[tuple[str, Any]]:
    import plotly.graph_objects as go

    figs = []
    ok = [t for t in analysis["trials"] if t["tokens_per_sec_per_gpu"]]
    xs = [t["trial"] for t in ok]
    ys = [t["tokens_per_sec_per_gpu"]["mean"] for t in ok]
    err_hi = [t["tokens_per_sec_per_gpu"]["ci95"][1] - y for t, y in zip(ok, ys)]
    err_lo = [y - t["tokens_per_sec_per_gpu"]["ci95"][0] for t, y in zip(ok, ys)]
    best_so_far, run = [], 0.0
    for y in ys:
        run = max(run, y)
        best_so_far.append(run)
    fig = go.Figure([go.Scatter(x=xs, y=ys, mode="markers", name="trial (95% CI)",
                                error_y={"type": "data", "array": err_hi, "arrayminus": err_lo}),
                     go.Scatter(x=xs, y=best_so_far, mode="lines", name="best so far", line={"shape": "hv"})])
    failed = [t for t in analysis["trials"] if t["status"] != "ok"]
    if failed:
        fig.add_trace(go.Scatter(x=[t["trial"] for t in failed], y=[0] * len(failed), mode="markers",
                                 marker={"symbol": "x", "color": "crimson", "size": 10}, name="failed",
                                 text=[f"{t['status']}: {t['message'] or ''}"[:120] for t in failed]))
    fig.update_layout(title="Throughput by trial", xaxis_title="trial", yaxis_title="tokens/s/GPU")
    figs.append(("history", fig))

    imp = [d for d in analysis["importance"] if d["fanova"] is not None]
    if imp:
        fig = go.Figure(go.Bar(x=[d["fanova"] for d in imp], y=[d["knob"] for d in imp], orientation="h",
                               error_x={"type": "data",
                                        "array": [d["ci95"][1] - d["fanova"] if d["ci95"] else 0 for d in imp],
                                        "arrayminus": [d["fanova"] - d["ci95"][0] if d["ci95"] else 0 for d in imp]}))
        fig.update_layout(title="Knob importance (total-order index, 95% BCa bootstrap CI)", yaxis={"autorange": "reversed"})
        figs.append(("importance", fig))

    for knob, rows in (analysis.get("marginal_effects") or {}).items():
        rows = [r for r in rows if r["mean"] is not None]
        if not rows:
            continue
        fig = go.Figure(go.Bar(x=[r["level"] for r in rows], y=[r["mean"] for r in rows],
                               error_y={"type": "data", "array": [(r["ci95"][1] - r["mean"]) if r["ci95"] else 0 for r in rows],
                                        "arrayminus": [(r["mean"] - r["ci95"][0]) if r["ci95"] else 0 for r in rows]},
                               text=[f"{r['n_ok']} ok / {r['n_trials']}" for r in rows]))
        fig.update_layout(title=f"Marginal effect of {knob} (survivor means)", yaxis_title="tokens/s/GPU (mean of ok trials)",
                          height=320)
        figs.append((f"marginal-{knob}", fig))

    cum, xs_b = [], []
    total = 0.0
    for t in analysis["trials"]:
        total += (t.get("gpu_seconds") or 0.0) / 3600
        cum.append(total)
        xs_b.append(t["trial"])
    fig = go.Figure([go.Scatter(x=xs_b, y=cum, mode="lines+markers", name="GPU-h used"),
                     go.Scatter(x=[xs_b[0] if xs_b else 0, xs_b[-1] if xs_b else 1],
                                y=[analysis["budget"]["limit_gpu_hours"]] * 2, mode="lines", name="budget",
                                line={"dash": "dash"})])
    fig.update_layout(title="Budget burn", xaxis_title="trial", yaxis_title="GPU-hours")
    figs.append(("budget", fig))
    return figs


def render_html(analysis: dict[str, Any], recipe_md: str) -> str:
    """A self-contained page: plotly.js inlined once (works offline, no CDN)."""
    parts = []
    for i, (name, fig) in enumerate(_figures(analysis)):
        parts.append(f'<section id="{name}">' + fig.to_html(full_html=False, include_plotlyjs=(i == 0)) + "</section>")
    failures = [t for t in analysis["trials"] if t["status"] != "ok"]
    rows = "".join(f"<tr><td>{t['trial']}</td><td>{html.escape(t['status'])}</td><td>{html.escape(json.dumps(t['params']))}</td>"
                   f"<td>{html.escape(t['message'] or '')}</td></tr>" for t in failures)
    sim = ("<p class='sim'><b>SIMULATED study</b>: numbers come from the performance model.</p>"
           if analysis.get("simulated") else "")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>tuner report: {html.escape(analysis['study'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:auto}} .sim{{color:#b00}} td{{padding:2px 8px}}</style></head>
<body><h1>tuner report: {html.escape(analysis['study'])}</h1>{sim}
<h2>How to read this</h2><ul>
<li>Each trial's throughput is tokens over time of its measured steps (non-padding tokens/s/GPU); its 95% CI uses a step-noise model (autocorrelation, variance) pooled over the study's trials. On synthetic studies (AR(1) up to phi 0.9, t(3) noise, stragglers, warm-up leaks) these intervals covered the truth at least 90% of the time at 8 steps (docs/statistics.md); on other noise, no such guarantee.</li>
<li>Winner's curse: the best of many noisy trials is biased upward, so the best config is measured again after the search (ablation) and that re-measurement gives the headline number and speedup{'' if (analysis.get('best') or {}).get('winners_curse_adjusted') else ' (not available in this study: the headline comes from the search trial and may be optimistic)'}.</li>
<li>Importance is the total-order index (interactions included) on a surrogate model over ok trials, with a BCa bootstrap CI; a conditional knob (prefetch_factor needs num_workers &gt; 0) is judged only where it applies; a knob "matters" only when it beats a random placebo knob. Marginal-effect bars are survivor means: the mean of the trials that finished ok at that level.</li>
<li>Failed trials (oom, timeout, error) are listed below and left out of the throughput statistics.</li></ul>
{''.join(parts)}
<h2>Failures</h2><table><tr><th>trial</th><th>status</th><th>params</th><th>reason</th></tr>{rows}</table>
{_predicted_table(analysis)}
<h2>Recipe</h2><pre>{html.escape(recipe_md)}</pre></body></html>"""


def _predicted_table(analysis: dict[str, Any]) -> str:
    """Predicted vs measured, for trials the model-guided sampler picked (tuner.search)."""
    rows = [t for t in analysis["trials"] if t.get("predicted_tokens_per_sec_per_gpu")]
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{t['trial']}</td><td>{html.escape(t['status'])}</td><td>{t['predicted_tokens_per_sec_per_gpu']:,.0f}</td>"
        f"<td>{(t['tokens_per_sec_per_gpu'] or {}).get('mean', float('nan')):,.0f}</td></tr>" for t in rows)
    return ("<h2>Predicted vs measured</h2><p>What the calibrated model expected when it picked each trial "
            "(refitted to the trials before it), and what the trial measured.</p><table><tr><th>trial</th>"
            f"<th>status</th><th>predicted tokens/s/GPU</th><th>measured</th></tr>{body}</table>")


def write_report(study, analysis: dict[str, Any], out_dir: str | Path, *,
                 planned_tokens: float | None = None) -> dict[str, Path]:
    from tuner.report._output import output_dir, write_atomic  # all or nothing (issue 18)
    out = output_dir(out_dir)
    recipe = render_recipe(analysis, planned_tokens=planned_tokens)
    html_text = render_html(analysis, recipe)
    return {"recipe": write_atomic(out / "RECIPE.md", recipe), "html": write_atomic(out / "report.html", html_text)}


def save_recipe_note(study, recipe_markdown: str) -> bool:
    """Save the recipe as the study's note in optuna-dashboard; False if it is not installed."""
    try:
        from optuna_dashboard import save_note
    except ImportError:
        return False
    save_note(study, recipe_markdown)
    return True
