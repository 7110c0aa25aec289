"""The report's plots (plotly), drawn from an analysis; never a new statistic.

The throughput plot marks the recommended config and the baseline (their runs, and their
config-level estimates with CIs as bands), not the luckiest single run: the recommendation
is chosen on re-measurements (tuner.stats), so a line to the highest run would name another
"best" than RECIPE.md does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["figures"]

_REC, _BASE, _GREY = "#1a7f37", "#0b5cad", "#9aa4ad"


def _same(params: dict[str, Any], other: dict[str, Any]) -> bool:
    return {k: str(v) for k, v in params.items()} == {k: str(v) for k, v in other.items()}


def _band(fig, d: dict[str, Any] | None, name: str, color: str, x0: float, x1: float) -> None:
    import plotly.graph_objects as go

    if not d or not d.get("tokens_per_sec_per_gpu"):
        return
    est = d["tokens_per_sec_per_gpu"]
    lo, hi = est["ci95"]
    fig.add_hrect(y0=lo, y1=hi, fillcolor=color, opacity=0.12, line_width=0, layer="below")
    fig.add_trace(go.Scatter(x=[x0, x1], y=[est["mean"]] * 2, mode="lines", line={"color": color, "dash": "dash"},
                             name=f"{name}: {est['mean']:,.0f} (95% CI {lo:,.0f} to {hi:,.0f})"))


def _history(analysis: dict[str, Any]):
    import plotly.graph_objects as go

    best, base = analysis.get("best"), analysis.get("baseline")
    trials = analysis["trials"]
    ok = [t for t in trials if t["tokens_per_sec_per_gpu"]]

    def group(pred):
        return [t for t in ok if pred(t)]

    is_rec = (lambda t: _same(t["params"], best["params"])) if best else (lambda t: False)
    is_base = (lambda t: t.get("role") == "baseline" or _same(t["params"], base["params"])) if base else (
        lambda t: False)
    groups = [("other trials", group(lambda t: not is_rec(t) and not is_base(t)), _GREY, "circle", 7),
              ("baseline's runs", group(lambda t: is_base(t) and not is_rec(t)), _BASE, "diamond", 11),
              ("recommended config's runs", group(is_rec), _REC, "star", 14)]
    fig = go.Figure()
    for name, rows, color, symbol, size in groups:
        if not rows:
            continue
        ys = [t["tokens_per_sec_per_gpu"]["mean"] for t in rows]
        fig.add_trace(go.Scatter(
            x=[t["trial"] for t in rows], y=ys, mode="markers", name=name,
            marker={"color": color, "symbol": symbol, "size": size},
            error_y={"type": "data", "color": color, "thickness": 1,
                     "array": [t["tokens_per_sec_per_gpu"]["ci95"][1] - y for t, y in zip(rows, ys)],
                     "arrayminus": [y - t["tokens_per_sec_per_gpu"]["ci95"][0] for t, y in zip(rows, ys)]}))
    xs = [t["trial"] for t in trials] or [0, 1]
    _band(fig, base, "baseline", _BASE, min(xs), max(xs))
    _band(fig, best, "recommended", _REC, min(xs), max(xs))
    failed = [t for t in trials if t["status"] != "ok"]
    if failed:
        fig.add_trace(go.Scatter(x=[t["trial"] for t in failed], y=[0] * len(failed), mode="markers",
                                 marker={"symbol": "x", "color": "crimson", "size": 8}, name="failed (not ok)",
                                 text=[f"{t['status']}: {t['message'] or ''}"[:120] for t in failed]))
    fig.update_layout(title="Throughput by trial: the recommended config and the baseline marked",
                      xaxis_title="trial", yaxis_title="tokens/s/GPU (95% CI: per trial; band: per config)",
                      legend={"orientation": "h", "y": -0.25}, margin={"l": 60, "r": 20, "t": 50, "b": 40},
                      height=460)
    return fig


def _importance(analysis: dict[str, Any]):
    import plotly.graph_objects as go

    imp = [d for d in analysis["importance"] if d["fanova"] is not None]
    if not imp:
        return None
    fig = go.Figure(go.Bar(
        x=[d["fanova"] for d in imp], y=[d["knob"] for d in imp], orientation="h", name="knob",
        marker={"color": [_REC if d.get("matters") else _GREY for d in imp]},
        error_x={"type": "data", "array": [d["ci95"][1] - d["fanova"] if d["ci95"] else 0 for d in imp],
                 "arrayminus": [d["fanova"] - d["ci95"][0] if d["ci95"] else 0 for d in imp]}))
    placebo = ((analysis.get("importance_model") or {}).get("placebo") or {}).get("total")
    if placebo is not None:
        fig.add_vline(x=placebo, line_dash="dot", line_color="crimson",
                      annotation_text="random placebo knob", annotation_position="bottom right")
    fig.update_layout(title="Knob importance (green: above the placebo)",
                      xaxis_title="total-order index: share of the variance of log tokens/s/GPU (95% BCa CI)",
                      yaxis={"autorange": "reversed"}, height=120 + 32 * len(imp),
                      margin={"l": 150, "r": 20, "t": 50, "b": 50})
    return fig


def _marginal(knob: str, rows: list[dict[str, Any]]):
    import plotly.graph_objects as go

    rows = [r for r in rows if r["mean"] is not None]
    if not rows:
        return None
    # the counts go in the axis labels: text on the bars was crossed by their error bars
    labels = [f"{r['level']}<br>{r['n_ok']} ok / {r['n_trials']}" for r in rows]
    fig = go.Figure(go.Bar(
        x=labels, y=[r["mean"] for r in rows], marker={"color": _GREY},
        error_y={"type": "data", "array": [(r["ci95"][1] - r["mean"]) if r["ci95"] else 0 for r in rows],
                 "arrayminus": [(r["mean"] - r["ci95"][0]) if r["ci95"] else 0 for r in rows]}))
    fig.update_layout(title=f"{knob}: mean of the ok trials at each level", xaxis_title=f"{knob} (ok runs / runs)",
                      yaxis_title="tokens/s/GPU", height=300, margin={"l": 60, "r": 20, "t": 40, "b": 60})
    return fig


def _budget(analysis: dict[str, Any]):
    import plotly.graph_objects as go

    cum, xs, total = [], [], 0.0
    for t in analysis["trials"]:
        total += (t.get("gpu_seconds") or 0.0) / 3600
        cum.append(total)
        xs.append(t["trial"])
    fig = go.Figure([go.Scatter(x=xs, y=cum, mode="lines", name="GPU-h used"),
                     go.Scatter(x=[xs[0] if xs else 0, xs[-1] if xs else 1],
                                y=[analysis["budget"]["limit_gpu_hours"]] * 2, mode="lines", name="budget",
                                line={"dash": "dash"})])
    fig.update_layout(title="Budget burn", xaxis_title="trial", yaxis_title="GPU-hours", height=320,
                      margin={"l": 60, "r": 20, "t": 40, "b": 40})
    return fig


def figures(analysis: dict[str, Any]) -> dict[str, Any]:
    """{"history", "importance", "budget", "marginal": {knob: fig}} (a None where nothing to draw)."""
    marginal = {k: f for k, rows in (analysis.get("marginal_effects") or {}).items()
                if (f := _marginal(k, rows)) is not None}
    return {"history": _history(analysis), "importance": _importance(analysis), "budget": _budget(analysis),
            "marginal": marginal}
