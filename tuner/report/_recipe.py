"""RECIPE.md and nccl_tuner.conf from an analysis: one page a team lead can apply safely.

Never recomputes a statistic: the numbers are the analysis's, the headline's arithmetic is
tuner.stats.headline's.

Forcing NCCL's algorithm or protocol through the environment applies it to every collective
of every size, and NVIDIA's NCCL documentation discourages setting ``NCCL_PROTO`` at all: a
protocol forced where the hardware or NCCL version does not support it can corrupt data
(LL128 under NCCL 2.18.1 on H100). So every forced variable carries a warning, and the same
choice is also written as a configuration for NCCL's example tuner plugin
(``ext-tuner/example`` in NCCL's repository, loaded with ``NCCL_TUNER_PLUGIN``, its CSV named
by ``NCCL_TUNER_CONFIG_FILE``), limited to the collectives FSDP runs and to the node and rank
counts the study measured: the route NVIDIA supports for per-collective choices.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from tuner.knobs import KNOBS, LAUNCH_KNOBS

__all__ = ["render_recipe", "render_nccl_tuner_conf", "DEFAULT_PLANNED_TOKENS", "MIN_OK_TRIALS", "fmt_ci"]

MIN_OK_TRIALS = 8
"""Fewer ok trials than this and the recipe says the study is inconclusive: too few for the
importance ranking and the "did not matter" list to mean much."""

DEFAULT_PLANNED_TOKENS = 1e9
"""Planned run for "what the speedup is worth" when none is given: 1e9 tokens (e.g. ~20
epochs of Alpaca's 52k examples at ~1k tokens each). The recipe always states it."""

_ENV = {name: KNOBS[name].env_var for name in LAUNCH_KNOBS}

# NCCL's example tuner plugin's names (ext-tuner/example/README.md): algorithm and protocol in
# lower case; the collectives FSDP2 (all-gather, reduce-scatter) and DDP (all-reduce) run.
_PLUGIN_ALGO = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "nvls_tree": "nvls_tree",
                "collnetdirect": "collnet_direct", "collnet_direct": "collnet_direct",
                "collnetchain": "collnet_chain", "collnet_chain": "collnet_chain", "pat": "pat"}
_PLUGIN_PROTO = {"simple": "simple", "ll": "ll", "ll128": "ll128"}
_COLLECTIVES = ("allgather", "reducescatter", "allreduce")
_MAX_BYTES = 4294967295   # the plugin's largest message size


def fmt_ci(d: dict[str, Any] | None, fmt: str = ",.0f", unit: str = "") -> str:
    """``mean (95% CI lo to hi)``, or ``n/a``."""
    if not d:
        return "n/a"
    lo, hi = d["ci95"]
    return f"{d['mean']:{fmt}}{unit} (95% CI {lo:{fmt}} to {hi:{fmt}}{unit})"


def _forced(params: dict[str, Any]) -> dict[str, str]:
    return {k: str(params[k]) for k in _ENV if params.get(k) not in (None, "default")}


def render_nccl_tuner_conf(analysis: dict[str, Any]) -> str | None:
    """nccl_tuner.conf for NCCL's example tuner plugin, or None when the recommendation forces
    neither the algorithm nor the protocol, or the study ran on gloo.

    The plugin needs both an algorithm and a protocol per line: where the study left one to
    NCCL, the file says so and writes nothing for it.
    """
    spec = analysis.get("spec") or {}
    cluster = spec.get("cluster") or {}
    best = analysis.get("best")
    if not best or cluster.get("backend") == "gloo":
        return None
    forced = _forced(best["params"])
    if not forced:
        return None
    nodes = int(cluster.get("nodes", 1))
    ranks = nodes * int(cluster.get("gpus_per_node", 1))
    algo = _PLUGIN_ALGO.get(forced.get("nccl_algo", "").lower())
    proto = _PLUGIN_PROTO.get(forced.get("nccl_proto", "").lower())
    head = [f"# NCCL tuner-plugin config from tuner study {analysis['study']} (trial {best['trial']}).",
            "# Load NCCL's example tuner plugin (ext-tuner/example) with:",
            "#   export NCCL_TUNER_PLUGIN=/path/to/libnccl-tuner-example.so",
            "#   export NCCL_TUNER_CONFIG_FILE=/path/to/nccl_tuner.conf",
            f"# Lines match only {nodes} node(s) x {ranks} rank(s), the shape the study measured; other jobs",
            "# keep NCCL's own choice. Format: collective,min_bytes,max_bytes,algorithm,protocol,channels,"
            "nNodes,nRanks,numPipeOps,regBuff"]
    if algo and proto:
        return "\n".join(head + [f"{c},0,{_MAX_BYTES},{algo},{proto},-1,{nodes},{ranks},-1,-1"
                                 for c in _COLLECTIVES]) + "\n"
    # Each line needs both; the study measured one and left the other to NCCL. A template,
    # commented out: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING logs the choice NCCL makes.
    missing = "ALGORITHM" if proto else "PROTOCOL"
    rows = [f"# {c},0,{_MAX_BYTES},{algo or missing},{proto or missing},-1,{nodes},{ranks},-1,-1" for c in _COLLECTIVES]
    return "\n".join(head + [f"# The study left NCCL's {missing.lower()} to NCCL and each line needs both: fill in the "
                             f"{missing.lower()} NCCL picks today", "# (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "
                             "logs it), then uncomment:"] + rows) + "\n"


def _nccl_warning(forced: dict[str, str]) -> list[str]:
    if not forced:
        return []
    names = " and ".join(f"`{_ENV[k]}={v}`" for k, v in forced.items())
    verb = "forces" if len(forced) == 1 else "force"
    lines = [f"> **Warning: {names} {verb} NCCL's choice on every collective of every size.** "
             "NVIDIA's NCCL documentation discourages setting `NCCL_PROTO`; a protocol forced where the "
             "hardware or NCCL version does not support it can corrupt data (LL128 under NCCL 2.18.1 on "
             "H100). Apply it only on the GPUs, network and NCCL version the study measured, and prefer "
             "the tuner-plugin configuration below."]
    return lines + [""]


def _headline_line(analysis: dict[str, Any], planned: float, world: int) -> list[str]:
    from tuner.stats import headline  # statistics load only when a recipe is drawn

    h = headline(analysis, planned_tokens=planned)
    rec, base, speed = h["recommended"], h["baseline"], h["speedup"]
    if not rec:
        return []
    mfu = f", MFU {fmt_ci(rec['mfu'], '.1%')}" if rec["mfu"] else ""
    out = [f"**Recommended: trial {rec['trial']}, {fmt_ci(rec['tokens_per_sec_per_gpu'])} tokens/s/GPU{mfu}.**"]
    if base and speed:
        saved = h["gpu_hours_saved"]
        out.append(f"**{fmt_ci(speed, '.2f', 'x')} today's throughput**; on a planned run of {planned:.3g} tokens "
                   f"(`--planned-tokens`) on {world} GPU(s) it saves **{fmt_ci(saved, ',.1f')} GPU-h** of "
                   f"{h['gpu_hours_today']:,.1f}.")
    return [" ".join(out), ""]


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
    misfits = [f"{k.replace('_', ' ')}: {d['meaning']}" for k, d in (analysis.get("noise_diagnostics") or {}).items()
               if d.get("flagged")]   # tuner.stats' noise-model checks (issue 29)
    if misfits:
        lines += ["> **The noise model does not fit this study**: " + "; ".join(misfits) + ".", ""]
    risk = (best.get("failure") or {}).get("neighbour_risk")
    if (best.get("failure") or {}).get("risk_flagged") and risk:
        where = ", ".join(f"{k}={v}" for k, v in risk["knobs"].items())
        lines += [f"> **Failure risk**: runs with {where} failed {risk['failures']} of {risk['runs']} "
                  f"(95% CI {risk['ci95'][0]:.0%} to {risk['ci95'][1]:.0%}); the recommended config shares those "
                  "settings and may fail that often.", ""]
    if analysis["n_ok"] < MIN_OK_TRIALS:
        lines += [f"> **Inconclusive**: only {analysis['n_ok']} trial(s) finished ok (fewer than {MIN_OK_TRIALS}). "
                  "The best config below is the best of very few; the importance ranking and the "
                  "\"did not matter\" list mean little yet. Give the study a larger budget.", ""]
    if not best.get("reliable", True):
        lines += ["> **Warning: every config that beat the others fails often; this one too.**", ""]
    lines += _headline_line(analysis, planned, world)
    lines += _batch_note(params, base, world)
    forced: dict[str, str] = {}
    if cluster.get("backend") == "gloo":  # NCCL's variables do nothing on gloo (CPU) runs
        env, unset = ["# NCCL_ALGO / NCCL_PROTO: not applicable, this study ran on gloo (CPU)"], []
    else:
        forced = _forced(params)
        listed = {r["knob"] for r in analysis.get("what_matters") or []}
        env = [f"export {_ENV[k]}={v}   # forced: see the warning below"
               + ("" if k in listed else "; no evidence here that forcing it helps (What matters): unset it unless "
                                          "you want exactly the measured config") for k, v in forced.items()]
        unset = [f"unset {var}   # leave it to NCCL" for k, var in _ENV.items() if params.get(k) == "default"]
    flags = " ".join(f"--{k.replace('_', '-')} {json.dumps(v) if isinstance(v, bool) else v}"
                     for k, v in params.items() if k not in _ENV)
    lines += ["## Apply", "", "```bash", *env, *unset, f"# training launch flags: {flags}", "```", ""]
    lines += _nccl_warning(forced)
    conf = render_nccl_tuner_conf(analysis)
    if conf:
        rows = [ln for ln in conf.splitlines() if not ln.startswith("#")]
        template = [ln for ln in conf.splitlines() if ln[2:].split(",")[0] in _COLLECTIVES]
        lines += ["Or, per collective, through NCCL's tuner plugin (the route NVIDIA supports): "
                  "`nccl_tuner.conf` beside this file, loaded with `NCCL_TUNER_PLUGIN` and `NCCL_TUNER_CONFIG_FILE`, "
                  f"matching only this study's {cluster.get('nodes', 1)} node(s) x {world} rank(s)"
                  + (":" if rows else "; the study left the other choice to NCCL, so fill it in "
                     "(`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING` logs NCCL's pick) before uncommenting:"),
                  "", "```csv", *(rows or template), "```", ""]
    lines += _what_it_buys(analysis, best, base, planned, world)
    lines += _what_matters(analysis, params)
    lines += _provenance(analysis, model, cluster, data, sim, today)
    return "\n".join(lines) + "\n"


_STATUS_WORDS = {"oom": "out of memory", "timeout": "timed out", "error": "an error"}


def _batch_note(params: dict[str, Any], base: dict[str, Any] | None, world: int) -> list[str]:
    """A warning when the recommended config steps the optimizer on another global batch than
    the baseline (micro_batch x grad_accum x GPUs): throughput does not see it, training does."""
    if not base:
        return []
    old = base.get("params") or {}
    if not {"micro_batch", "grad_accum"} & (set(params) | set(old)):
        return []
    mb, ga = int(params.get("micro_batch") or 1), int(params.get("grad_accum") or 1)
    now, before = mb * ga, int(old.get("micro_batch") or 1) * int(old.get("grad_accum") or 1)
    if now == before:
        return []
    keep = (f"; today's batch at this micro-batch is grad_accum {before // mb}, measure it before switching "
            "(its memory differs)" if before % mb == 0 and before // mb != ga else "")
    packing = (f" (padding {old['padding']} -> {params['padding']} also changes the examples in a row)"
               if "padding" in params and params.get("padding") != old.get("padding") else "")
    return [f"> **The global batch changes**: {now * world:,} rows per optimizer step (micro_batch {mb} x "
            f"grad_accum {ga} x {world} GPUs) against today's {before * world:,}{packing}. Tokens/s/GPU does not "
            "depend on it, training does: scale the learning rate and its warm-up to the new batch" + keep + ".", ""]


def _what_it_buys(analysis, best, base, planned, world) -> list[str]:
    tps = best["tokens_per_sec_per_gpu"]
    if base and best["trial"] == base["trial"]:
        how = " (the baseline itself: no config beat today's)"
    elif best["winners_curse_adjusted"]:
        how = ""
    else:
        how = " (search measurement; not re-measured, may be optimistic)"
    lines = ["## What it buys", "", f"- Best config (trial {best['trial']}): **{fmt_ci(tps)} tokens/s/GPU**{how}"]
    speed = best.get("speedup_vs_baseline")
    if base and speed:
        from tuner.stats import headline

        h = headline(analysis, planned_tokens=planned)
        lines.append(f"- Baseline (today's config, trial {base['trial']}): {fmt_ci(base['tokens_per_sec_per_gpu'])} "
                     "tokens/s/GPU")
        lines.append(f"- **Speedup vs baseline: {fmt_ci(speed, '.2f')}x**")
        lines.append(f"- On a planned run of {planned:.3g} tokens on {world} GPU(s): {h['gpu_hours_today']:,.1f} GPU-h "
                     f"today, **{fmt_ci(h['gpu_hours_saved'], ',.1f')} GPU-h saved**")
    flaky = best.get("faster_but_flaky")
    if flaky:
        f = flaky["failure"]
        where = (f" ({f['worst_level']['knob']}={f['worst_level']['level']} failed {f['worst_level']['failures']} "
                 f"of {f['worst_level']['runs']} runs)") if f.get("worst_level") else ""
        lines.append(f"- Not recommended although faster: trial {flaky['trial']}, {fmt_ci(flaky['tokens_per_sec_per_gpu'])} "
                     f"tokens/s/GPU, but it fails about {f['estimate']:.0%} of the time{where}: "
                     f"{json.dumps(flaky['params'])}")
    unverified = best.get("faster_not_remeasured")
    if unverified:
        lines.append(f"- Not recommended although faster once: trial {unverified['trial']}, "
                     f"{fmt_ci(unverified['tokens_per_sec_per_gpu'])} tokens/s/GPU "
                     f"({fmt_ci(unverified['vs_recommended_in_search'], '.2f')}x the recommendation's search run), "
                     "found after the re-measurements and not re-measured itself (one noisy run reads high); run "
                     f"the study on with a larger budget to re-measure it: {json.dumps(unverified['params'])}")
    own = (best.get("failure") or {}).get("own") or {}
    if own.get("runs"):
        lo, hi = own["ci95"]
        lines.append(f"- Reliability: failed {own['failures']} of its {own['runs']} runs "
                     f"(95% CI {lo:.0%} to {hi:.0%} of runs)")
    return lines


def _what_matters(analysis, params) -> list[str]:
    lines = ["", "## What matters", ""]
    imp = {d["knob"]: d for d in analysis.get("importance", [])}
    for row in analysis.get("what_matters", []):
        knob = row["knob"]
        meaning = f" ({KNOBS[knob].meaning})" if knob in KNOBS else ""
        a, i = row.get("ablation"), row.get("importance")   # both channels, side by side (issue 29)
        if row["source"] in ("ablation", "both"):
            worth, (lo, hi), against = row["impact"], row["ci95"], ""
            if a is not None and a.get("move"):   # a one-knob move (the baseline has the best's level)
                if a["tested_value"] != params.get(knob):
                    against = f" against {a['tested_value']}"
                else:   # the move won: what the recommended level is worth over the level it left
                    worth, lo, hi = 1 / (1 + worth) - 1, 1 / (1 + hi) - 1, 1 / (1 + lo) - 1
                    against = f" over {a['best_value']} (a one-knob move from it)"
            line = (f"1. **{knob} = {params.get(knob, 'n/a')}**{meaning}: worth {worth:+.1%}{against} "
                    f"(95% CI {lo:+.1%} to {hi:+.1%}, re-measured"
                    + (", Holm-corrected)" if row["source"] == "ablation" else ")"))
            if row["source"] == "both":   # neither channel alone, both together (tuner.stats.combined_evidence)
                line += (f"; search importance {i['total']:.2f}: the revert read slower (one-sided p "
                         f"{a['p_slower']:.2g}) and the importance beat a random placebo knob's (p "
                         f"{i['p_vs_placebo']:.2g}), each short of its own multiple-testing correction, both "
                         f"together past it (maximum p, squared: {row['combined']['p_value']:.2g}, Holm-corrected)")
            elif i is not None:
                line += (f"; search importance {i['total']:.2f}, "
                         + ("above a random placebo knob's" if i.get("matters") else
                            "not above a random placebo knob's (the search could not see it: an interaction of "
                            "three or more knobs, or a knob it stopped varying)"))
        else:
            ci = f" (95% CI {row['ci95'][0]:.2f} to {row['ci95'][1]:.2f})" if row.get("ci95") else ""
            line = (f"1. **{knob} = {params.get(knob, 'n/a')}**{meaning}: total importance {row['total']:.2f}{ci}, "
                    "above a random placebo knob's")
            if a is not None:
                line += (f"; ablation {a['impact']:+.1%} (95% CI {a['ci95'][0]:+.1%} to {a['ci95'][1]:+.1%}), "
                         + ("its revert read faster than this level: no evidence this level is the better one"
                            if a["ci95"][1] < 0 and a.get("best_value") == params.get(knob) else
                            "not significant after Holm"))
        if knob in imp and imp[knob].get("interaction", 0) > 0.05:
            line += f"; much of it through interactions ({imp[knob]['interaction']:.2f} of the variance)"
        lines.append(line)
    if not analysis.get("what_matters"):
        lines.append(analysis.get("what_matters_note")
                     or "No knob's effect stands out from the noise and from a random placebo knob.")
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
    unmeasured = {f["knob"]: f for f in (analysis.get("ablation") or {}).get("not_measured") or ()
                  if f["knob"] not in listed}
    if unmeasured:
        lines += ["", "Planned for the ablation but not measured at this config (its effect here is unknown; "
                      "measure it before relying on it): " + "; ".join(
                          f"{k} (trial {f['trial']}, {f['status'].replace('_', ' ')})" for k, f in unmeasured.items())
                  + "."]
    failed = {f["knob"]: f for f in (analysis.get("ablation") or {}).get("failed") or ()
              if f.get("knob") and not f.get("remeasure") and f["knob"] not in listed and f["knob"] not in unmeasured}
    if failed:
        lines += ["", "Their revert at this config failed, so the ablation could not measure them (the recommended "
                      "level is the one that runs here): " + "; ".join(
                          f"{k} (trial {f['trial']}, {_STATUS_WORDS.get(f['status'], f['status'])})"
                          for k, f in failed.items()) + "."]
        unmeasured = {**unmeasured, **failed}
    undecided = {d["knob"]: d for d in analysis.get("undecided") or () if d["knob"] not in unmeasured}
    if undecided:
        lines += ["", "Undecided: neither channel lists them, but the ablation cannot rule out a one-knob effect of "
                      "10% or more at this config (too few runs to tell; measure them again before fixing them): "
                  + "; ".join(f"{k} ({d['impact']:+.1%}, 95% CI {d['ci95'][0]:+.1%} to {d['ci95'][1]:+.1%})"
                              for k, d in undecided.items()) + "."]
    quiet = [k for k in quiet if k not in unmeasured and k not in undecided]
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
    return lines


def _provenance(analysis, model, cluster, data, sim, today) -> list[str]:
    n_fail = analysis.get("n_failed", {})
    return ["", "## Provenance", "",
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


def _data_name(source: str) -> str:
    return Path(source).name if source.startswith("/") else source
