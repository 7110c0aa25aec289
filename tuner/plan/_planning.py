"""``tuner plan``: helper's training plan as text, its proxy validation, and the runbook.

``run_plan`` is the one function the CLI calls. The plan itself is ``helper.plan_training``
(pure arithmetic, well under a second); ``--validate`` runs the plan's proxy for real through
the study machinery (``tuner.study.run_study``: local torchrun here, Slurm on a cluster)
and refits the calibration on what it measured (``helper.fit_calibration``); ``--runbook``
writes RUNBOOK.md and runbook.html (``tuner.plan``, which alone imports plotly).
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
from pathlib import Path
from typing import Any

import helper
from helper import LLAMA3_FAILURES_PER_GPU_HOUR, plan_training
from tuner.errors import TunerError
from tuner.model import gib
from tuner.plan._runbook_pages import validation_banner

__all__ = ["run_plan", "format_plan", "validate_plan", "proxy_spec", "format_validation", "suggest",
           "LLAMA3_FAILURES_PER_GPU_HOUR"]


def _fmt_h(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as text a team lead reads in a terminal: every point of the question answered."""
    i, c, ck = plan["inputs"], plan["chosen"], plan["checkpoint"]
    bg = plan["batch_guidance"]
    out = [f"Plan: {i['model']} ({i['n_params'] / 1e9:.3g}e9 params) on {i['gpu_count']} x {i['gpu']} "
           f"({i['nodes']} node(s) x {i['gpus_per_node']}, {i['inter_node_gbps']:.0f} Gb/s per GPU between nodes), "
           f"seq_len {i['seq_len']}, {i['tokens']:.3g} tokens",
           f"calibration: {plan['source']}", validation_banner(plan) or "validated on a proxy on this GPU", "",
           f"DECISION: {c['layout']} ({c['description']})"]
    out += [f"  - {r}" for r in plan["reasons"]]
    out += ["", "Layouts (memory per GPU, GiB; tokens/s/GPU with the held-out band; one global batch for all)",
            f"  {'layout':<14}{'fits':<6}{'GiB':>8}{'spare':>7}  {'mb':>3} {'ga':>3} {'AC':<4}"
            f"{'tok/s/GPU':>10} {'band':>15} {'MFU':>5} {'wall':>9} {'GPU-h':>9}"
            + (f" {'cost':>10}" if i["cost_per_gpu_hour"] else "")]
    for r in plan["layouts"]:
        mark = "*" if r is c else " "
        if r["tokens_per_sec_per_gpu"]:
            lo, hi = r["band"]
            perf = (f"{r['tokens_per_sec_per_gpu']:>10,.0f} {f'{lo:,.0f}-{hi:,.0f}':>15} {r['mfu']:>5.0%} "
                    f"{_fmt_h(r['wall_hours']):>9} {r['gpu_hours']:>9,.0f}"
                    + (f" {r['cost']:>10,.0f}" if r["cost"] is not None else ""))
        else:
            perf = f"{'-':>10} {'-':>15} {'-':>5} {'-':>9} {'-':>9}"
        out.append(f"{mark} {r['layout']:<14}{'yes' if r['fits'] else 'NO':<6}{r['memory_gib']['total']:>8.1f}"
                   f"{r['headroom_gib']:>7.1f}  {r['micro_batch']:>3} {r['grad_accum']:>3} "
                   f"{'on' if r['activation_checkpointing'] else 'off':<4}{perf}")
    m = c["memory_gib"]
    out += ["", f"Memory per GPU of {c['layout']} (GiB; capacity {i['memory_capacity_gib']:.1f}, "
                f"{c['usable_gib']:.1f} usable with {i['memory_headroom']:.0%} headroom)",
            "  " + ", ".join(f"{k} {v:.1f}" for k, v in m.items() if k != "static"),
            f"  fits: {'yes' if c['fits'] else 'NO'}, {c['headroom_gib']:.1f} GiB to spare"]
    out += ["", "Batch",
            f"  guidance: {bg['target_tokens'] / 1e6:.2f}M tokens per step ({bg['target_source']}; compute-optimal "
            f"{bg['critical_batch_tokens'] / 1e6:.2f}M)",
            f"  micro-batch {c['micro_batch']} x grad_accum {c['grad_accum']} x {c['dp_shard'] * c['dp_replicate']} "
            f"data-parallel ranks = global batch {c['global_batch']} sequences ({c['global_batch_tokens'] / 1e6:.2f}M tokens)",
            f"  {c['steps']:,} optimizer steps for the run"]
    out += [f"  WARNING: {w}" for w in c["warnings"]]
    lo, hi = c["band"]
    out += ["", "Throughput and time",
            f"  {c['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU (band {lo:,.0f}-{hi:,.0f}, +/-{c['band_pct']:.1f}%: "
            f"{plan['band_source']}), MFU {c['mfu']:.0%}, {c['step_time_s']:.2f} s per step",
            f"  wall {_fmt_h(c['wall_hours'])} (band {_fmt_h(c['wall_hours_band'][0])}-{_fmt_h(c['wall_hours_band'][1])}), "
            f"{c['gpu_hours']:,.0f} GPU-hours"
            + (f", cost {c['cost']:,.0f} at {i['cost_per_gpu_hour']:g} per GPU-hour" if c["cost"] is not None else "")]
    p = ck["worst_case_parts_s"]
    out += ["", "Checkpoints (async torch.distributed.checkpoint)",
            f"  {ck['size_gb']:.0f} GB per checkpoint ({ck['size_gb_per_node']:.0f} GB per node): write {ck['write_s']:.0f} s "
            f"in the background, training stalls ~{ck['stall_s']:.1f} s per save",
            f"  every {ck['interval_steps']} steps ({ck['interval_s'] / 60:.1f} min); Young/Daly would say "
            f"{ck['young_daly_interval_s'] / 60:.0f} min for a job MTBF of {ck['job_mtbf_hours']:,.0f} h"
            + (" (capped by the lost-work limit)" if ck["limit_bound"] else ""),
            f"  where: {ck['where']}; keep the last {ck['keep']}",
            f"  worst-case lost work {ck['worst_case_lost_s'] / 60:.1f} min "
            f"{'<=' if ck['meets_limit'] else '>'} limit {ck['max_lost_work_minutes']:.0f} min: "
            + " + ".join(f"{k[:-2]} {v / 60:.1f}" for k, v in p.items()) + " (min)",
            f"  detection: collective timeout {ck['collective_timeout_s']:.0f} s (train.py sets it) + teardown "
            f"{ck['teardown_s']:.0f} s, or SlurmdTimeout {ck['slurmd_timeout_s']:.0f} s; restart: {ck['restart_policy']}"]
    if not ck["meets_limit"]:
        out.append("  WARNING: the limit cannot be met: add a spare node (--spare-nodes), shorten SlurmdTimeout, "
                   "or add storage bandwidth")
    if plan.get("validation"):
        out += ["", format_validation(plan["validation"])]
    return "\n".join(out)


def format_validation(v: dict[str, Any]) -> str:
    lines = [f"Proxy validation ({v['where']}): {v['note']}"]
    for r in v["rows"]:
        lines.append(f"  {r['config']}: measured {r['measured']:,.1f} tok/s/GPU, predicted {r['predicted']:,.1f} "
                     f"({r['error_pct']:+.0f}%), after recalibration {r['refit']:,.1f} ({r['refit_error_pct']:+.0f}%); "
                     f"peak memory {_gib(r['peak_mem_gib'])} GiB measured, {r['predicted_mem_gib']:.2f} predicted")
    lines.append(f"  band after validation: +/-{v['band_pct_after']:.0f}% (was +/-{v['band_pct_before']:.0f}%)")
    return "\n".join(lines)


def _gib(value: float | None) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def proxy_spec(plan: dict[str, Any], *, name: str, micro_batches=(2, 4, 8), target: str = "cpu",
               launcher: str = "local") -> tuple[dict[str, Any], list[str]]:
    """The proxy study (raw spec dict) in the chosen layout, and notes on any fallback.

    The layout's knobs are the workload's (``sharding``, ``shard_group_size``, ``tp_degree``),
    scaled to the proxy by :func:`tuner.plan.proxy_layout_knobs`; PP falls back to
    FSDP (a note says so). ``target="cpu"``: the tiny preset on 2 CPU processes (4 for HSDP
    with TP; gloo). ``target="gpu"``: the ~1.1B
    ``llama-1b`` preset (the nearest preset to a 1.3B proxy) on 4 of the plan's GPUs (NCCL),
    at the plan's sequence length, through ``launcher`` (``local`` or ``slurm``).

    The grid holds one micro-batch more than is run (``max_trials`` = ``len(micro_batches)``):
    Optuna's GridSampler calls ``study.stop()`` when its grid is used up, which raises outside
    ``study.optimize`` (the coordinator's ask/tell loop)."""
    from helper.presets import get_preset
    from tuner.plan._proxy import proxy_layout_knobs, proxy_world_size
    if target not in ("cpu", "gpu"):
        raise TunerError(f"--proxy: {target!r} is not cpu or gpu")
    preset = "tiny" if target == "cpu" else "llama-1b"
    plan_knobs = plan["chosen"]["workload_knobs"]
    world = proxy_world_size(plan_knobs) if target == "cpu" else 4
    arch = get_preset(preset)
    knobs, notes = proxy_layout_knobs(plan_knobs, world_size=world, gpus_per_node=world,
                                      n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads)
    space = {"micro_batch": [*micro_batches, 2 * micro_batches[-1]], "padding": ["packed"], "grad_accum": [1], "num_workers": [0],
             **{k: [v] for k, v in knobs.items()}}
    raw = {"study": {"name": name, "sampler": "grid", "seed": 0, "ablation_share": 0.0},
           "budget": {"limit": "0.5gpuh"},
           "model": {"preset": "tiny", "seq_len": 256, "dtype": "auto"},
           "data": {"source": "synthetic", "tokenizer": "train", "vocab_size": 8000, "num_examples": 2000},
           "cluster": {"launcher": launcher, "nodes": 1, "gpus_per_node": world, "backend": "gloo", "gpu": "cpu"},
           "trial": {"warmup_steps": 2, "measure_steps": 6, "timeout_s": 300, "estimate_gpu_seconds": 30 * world},
           "space": space}
    if target == "gpu":
        raw["model"] = {"preset": preset, "seq_len": plan["inputs"]["seq_len"], "dtype": "auto"}
        raw["cluster"] = {"launcher": launcher, "nodes": 1, "gpus_per_node": 4, "backend": "nccl",
                          "gpu": plan["inputs"]["gpu"]}
        space["num_workers"] = [4]
    return raw, notes


def validate_plan(plan: dict[str, Any], plan_args: dict[str, Any], *, out_dir: Path,
                  storage_url: str | None = None, target: str = "cpu", launcher: str = "local") -> dict[str, Any]:
    """Run the proxy for real, compare measured with predicted, refit, and re-plan with the refit."""
    from helper.calibration import resolve_constants
    from helper.throughput import step_time_breakdown
    from tuner.plan._distill import study_measurements
    from tuner.plan._proxy import layout_rows
    from tuner.spec import parse_spec
    from tuner.study import RunOptions, load_existing_study, run_study

    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"plan-proxy-{_dt.datetime.now(_dt.UTC):%Y%m%d-%H%M%S}"  # a fresh grid every run
    raw, notes = proxy_spec(plan, name=name, target=target, launcher=launcher)
    spec = parse_spec(raw, base_dir=out_dir, origin="plan-proxy")
    url = storage_url or f"sqlite:///{(out_dir / 'proxy.db').resolve()}"
    run_study(spec, RunOptions(storage_url=url, study_name=name, runs_dir=out_dir / "runs",
                               max_trials=len(raw["space"]["micro_batch"]) - 1, ablation=False),
              on_event=lambda e: print(f"proxy trial {e.number}: {e.kind}", flush=True) if e.kind == "end" else None)
    study = load_existing_study(url, name)
    measurements = study_measurements(study)  # HSDP/TP trials too: fit through helper.layouts
    if not measurements:
        raise TunerError(f"plan --validate: no proxy trial finished ok; see the logs under {out_dir / 'runs'}")
    base = helper.load_calibration(plan_args.get("calibration"))
    refit = helper.fit_calibration(measurements, base=base)
    # the band stays the held-out one (helper.band): a few proxy trials cannot narrow it
    refit["quality"]["held_out"] = (base.get("quality") or {}).get("held_out")
    rows = layout_rows(study, raw, {"before": base, "after": refit})  # HSDP/TP rows: helper.layouts
    peaks = {t.number: t.user_attrs.get("peak_mem_gib") for t in study.trials}
    for m in (m for m in measurements if not m.get("layout")):  # FSDP rows
        step_plan, _ = helper.measurement_plan(m)
        before = step_time_breakdown(step_plan, resolve_constants(base, m["gpu"])[0])["tokens_per_sec_per_gpu"]
        after = step_time_breakdown(step_plan, resolve_constants(refit, m["gpu"])[0])["tokens_per_sec_per_gpu"]
        meas = m["tokens_per_sec_per_gpu"]
        rows.append({"config": f"tiny, {m['gpu_count']} CPU processes, micro_batch {m['micro_batch']}, "
                               f"{m.get('sharding', 'zero3')}",
                     "measured": meas, "predicted": float(before), "error_pct": 100 * (before / meas - 1),
                     "refit": float(after), "refit_error_pct": 100 * (after / meas - 1),
                     "peak_mem_gib": peaks.get(m["trial"]),
                     "predicted_mem_gib": gib(helper.estimate_memory(
                         step_plan.shape, m["gpu_count"], sharding="zero3", micro_batch=m["micro_batch"],
                         seq_len=m["seq_len"], grad_accum=m["grad_accum"], gpu=m["gpu"],
                         activation_checkpointing=m["activation_checkpointing"],
                         reshard_after_forward=m.get("reshard_after_forward", True))["total"])})
    residual = sorted(abs(r["refit_error_pct"]) for r in rows)[len(rows) // 2]
    proxy_gpu = raw["cluster"]["gpu"]
    same_gpu = proxy_gpu == plan["inputs"]["gpu"]
    new_plan = plan_training(**{**plan_args, "calibration": refit}) if same_gpu else copy.deepcopy(plan)
    before_band = plan["chosen"]["band_pct"]
    note = ("the proxy ran on the plan's GPU: the plan is re-computed with the refitted calibration"
            if same_gpu else
            f"the proxy ran on {proxy_gpu}, not {plan['inputs']['gpu']}: it checks the model's "
            "structure (FLOPs, collectives, memory), not the GPU's constants, so the plan's numbers stay, the band "
            "widens by the proxy's remaining error, and the plan counts as not validated on its GPU")
    for r in new_plan["layouts"]:  # on the plan's GPU: never under the proxy's residual; else widened by it
        if r["tokens_per_sec_per_gpu"]:
            b = (max(r["band_pct"], residual) if same_gpu else math.hypot(r["band_pct"], residual)) / 100
            r.update(band_pct=b * 100, band=[r["tokens_per_sec_per_gpu"] * (1 - b),
                                             r["tokens_per_sec_per_gpu"] * (1 + b)],
                     wall_hours_band=[r["wall_hours"] / (1 + b), r["wall_hours"] / (1 - b)])
    validation = {"where": (f"CPU processes via the {launcher} launcher" if not same_gpu
                            else f"4 x {plan['inputs']['gpu']} via the {launcher} launcher"),
                  "note": note + ("; " + "; ".join(notes) if notes else ""), "fallbacks": notes, "rows": rows,
                  "same_gpu": same_gpu, "band_pct_before": before_band,
                  "band_pct_after": new_plan["chosen"]["band_pct"], "storage": url}
    new_plan["validation"] = validation
    return new_plan


def run_plan(*, validate: bool = False, runbook_dir: str | Path | None = None, study_dir: str | Path | None = None,
             storage_url: str | None = None, tuning_study: str | None = None, proxy: str = "cpu",
             launcher: str = "local", time_limit_hours: float = 48.0, **plan_args: Any) -> tuple[str, list[Path]]:
    """``tuner plan``: the plan (validated when asked), as text, and the runbook files written."""
    if runbook_dir:
        from tuner.report import output_dir
        output_dir(runbook_dir, flag="--runbook")  # a folder it can write, before any work
    try:
        plan = plan_training(**plan_args)
    except ValueError as exc:
        raise TunerError(str(exc)) from None
    if validate:
        out = Path(study_dir or (Path(runbook_dir) / "proxy" if runbook_dir else Path("runs") / "plan-proxy"))
        plan = validate_plan(plan, plan_args, out_dir=out, target=proxy, launcher=launcher)
    paths: list[Path] = []
    if runbook_dir:
        from tuner.plan._runbook import write_runbook
        tuning = None
        if tuning_study:
            from tuner.plan._runbook import tuning_settings
            tuning = tuning_settings(storage_url, tuning_study)
        paths = write_runbook(plan, runbook_dir, tuning=tuning, time_limit_hours=time_limit_hours)
    return format_plan(plan), paths


def suggest(*, model_size: str, gpu_count: int, dataset_size: str | int | None = None, seq_len: int | None = None,
            gpu: str | None = None, gpus_per_node: int | None = None, global_batch: int | None = None,
            calibration: str | Path | None = None, stack: str | None = None) -> tuple[dict[str, Any], str]:
    """``helper.suggest_config`` with a calibration file (``tuner suggest``), and its explanation.

    Raises:
        TunerError: bad input, named in one line (helper answers it with ValueError).
    """
    kwargs = {k: v for k, v in dict(dataset_size=dataset_size, seq_len=seq_len, gpu=gpu,
                                    gpus_per_node=gpus_per_node, global_batch=global_batch,
                                    stack=stack).items() if v is not None}
    try:
        cal = helper.load_calibration(calibration) if calibration else None
        cfg = helper.suggest_config(model_size=model_size, gpu_count=gpu_count, calibration=cal, **kwargs)
    except ValueError as exc:
        raise TunerError(str(exc)) from None
    return cfg, helper.explain(cfg)
