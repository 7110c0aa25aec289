"""Pure functions of the GPU kit: rows from trial records, predicted vs measured, the markdown
section (for docs/validation.md) and the terminal table. Plain data in, plain data out.

Memory units: helper predicts GB (1e9 bytes), the trial measures GiB (2**30 bytes); rows are
in GB. ``max_memory_allocated`` counts live tensors, so it is compared with the prediction's
tensors (``total - overhead``); ``max_memory_reserved`` adds the caching allocator's free
blocks, so it is compared with tensors plus helper's fragmentation allowance (``total -
framework_overhead_gb``); neither counts the CUDA context, which ``total`` includes.

Example:
    >>> rows = memory_rows({"a": {"analytic": {"total": 11.0, "overhead": 1.5}}},
    ...                    [{"name": "a", "status": "ok", "peak_mem_gib": 8.0, "peak_mem_reserved_gib": 9.0}],
    ...                    framework_overhead_gb=1.0, capacity_gb=80.0)
    >>> round(rows[0]["analytic_tensors_gb"], 1), round(rows[0]["measured_allocated_gb"], 2)
    (9.5, 8.59)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["throughput_row", "cold_reference", "switch_row", "memory_rows", "headlines", "markdown", "table",
           "GIB_PER_GB"]

GIB_PER_GB = 1e9 / 2**30
_GB_PER_GIB = 2**30 / 1e9


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def throughput_row(run, rec: Mapping[str, Any], predicted: Mapping[str, Any]) -> dict[str, Any]:
    """Check 2's row: the trial's measurements beside helper's prediction."""
    s = rec.get("summary") or {}
    tps = s.get("tokens_per_sec_per_gpu")
    return {"name": run.name, "params": dict(run.params), "attention": run.attention, "status": rec["status"],
            "tokens_per_sec_per_gpu": tps, "mfu": s.get("mfu"), "mfu_peak_flops": s.get("mfu_peak_flops"),
            "step_time_s": s.get("step_time_s"), "measured_steps": s.get("measured_steps"),
            "peak_mem_gib": s.get("peak_mem_gib"), "peak_mem_reserved_gib": s.get("peak_mem_reserved_gib"),
            "peak_mem_kind": s.get("peak_mem_kind"), "padding_efficiency": s.get("padding_efficiency"),
            "data_wait_frac": s.get("data_wait_frac"), "startup_seconds": s.get("startup_seconds"),
            "n_params": s.get("n_params"), "dtype": s.get("dtype"), "attention_in_model": s.get("attention"),
            "device": s.get("device"), "wall_s": rec["wall_s"], "to_first_step_s": rec.get("to_first_step_s"),
            "error": rec.get("error"), "log": rec.get("log"), "predicted": dict(predicted),
            "measured_over_predicted": _ratio(tps, predicted.get("tokens_per_sec_per_gpu"))}


def cold_reference(name: str, measured: Sequence[Mapping[str, Any]],
                   twins: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The cold start of config ``name``: check 2's trial, else the warm check's own cold twin."""
    row = next((m for m in measured if m.get("name") == name and m.get("status") == "ok"), None)
    if row is not None:
        return {"source": "throughput check", "to_first_step_s": row.get("to_first_step_s"),
                "startup_s": row.get("startup_seconds"), "tokens_per_sec_per_gpu": row.get("tokens_per_sec_per_gpu")}
    twin = twins.get(name)
    if twin is not None and twin.get("status") == "ok":
        s = twin.get("summary") or {}
        return {"source": "cold twin", "to_first_step_s": twin.get("to_first_step_s"),
                "startup_s": s.get("startup_seconds"), "tokens_per_sec_per_gpu": s.get("tokens_per_sec_per_gpu")}
    return None


def switch_row(run, prev, rec: Mapping[str, Any], expected_level: str,
               cold: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check 4's row for one job of the resident worker.

    ``warm_to_first_step_s``: job file written -> first measured step starts (the worker's
    poll, the reconfiguration, one warm-up step); ``cold_to_first_step_s``: torchrun launched
    -> first measured step starts (interpreter, imports, rendezvous, data, model, warm-up)."""
    s = rec.get("summary") or {}
    row: dict[str, Any] = {"job": rec.get("job"), "from": prev.name if prev else None, "to": run.name,
                           "level": rec.get("level") or expected_level, "expected_level": expected_level,
                           "status": rec["status"], "error": rec.get("error"),
                           "tokens_per_sec_per_gpu": s.get("tokens_per_sec_per_gpu")}
    row["level_as_expected"] = rec.get("level") == expected_level if rec["status"] == "ok" else None
    if prev is None:  # job 0 is the worker's own cold start
        row.update(cold_source="this worker's first job", cold_to_first_step_s=rec.get("to_first_step_s"),
                   cold_startup_s=s.get("startup_seconds"))
        return row
    cold = cold or {}
    row.update(warm_setup_s=(s.get("resident") or {}).get("setup_seconds"), warm_startup_s=s.get("startup_seconds"),
               warm_to_first_step_s=rec.get("to_first_step_s"), cold_source=cold.get("source"),
               cold_to_first_step_s=cold.get("to_first_step_s"), cold_startup_s=cold.get("startup_s"),
               cold_tokens_per_sec_per_gpu=cold.get("tokens_per_sec_per_gpu"))
    row["cold_over_warm"] = _ratio(row["cold_to_first_step_s"], row["warm_to_first_step_s"])
    # does a warm trial measure what a cold one does: its tokens/s over the cold start's, same config
    row["warm_over_cold_tokens"] = _ratio(row["tokens_per_sec_per_gpu"], row["cold_tokens_per_sec_per_gpu"])
    return row


def memory_rows(predictions: Mapping[str, Mapping[str, Any]], measured: Sequence[Mapping[str, Any]], *,
                framework_overhead_gb: float, capacity_gb: float | None) -> list[dict[str, Any]]:
    """Check 3's rows: each config's predictions (analytic, trace) against its measured peaks."""
    rows = []
    for m in measured:
        row: dict[str, Any] = {"name": m["name"], "status": m.get("status"), "peak_mem_kind": m.get("peak_mem_kind"),
                               "capacity_gb": capacity_gb}
        alloc, reserved = m.get("peak_mem_gib"), m.get("peak_mem_reserved_gib")
        row["measured_allocated_gb"] = alloc * _GB_PER_GIB if alloc is not None else None
        row["measured_reserved_gb"] = reserved * _GB_PER_GIB if reserved is not None else None
        for method in ("analytic", "trace"):
            est = (predictions.get(m["name"]) or {}).get(method) or {}
            if "total" not in est:
                row[f"{method}_error"] = est.get("error", "not predicted (the memory check did not reach it)")
                continue
            tensors = est["total"] - est["overhead"]
            row[f"{method}_tensors_gb"] = tensors
            row[f"{method}_reserved_gb"] = est["total"] - framework_overhead_gb
            row[f"{method}_total_gb"] = est["total"]
            row[f"{method}_over_measured"] = _ratio(tensors, row["measured_allocated_gb"])
            row[f"{method}_reserved_over_measured"] = _ratio(row[f"{method}_reserved_gb"], row["measured_reserved_gb"])
            row[f"{method}_fits"] = est["total"] <= capacity_gb if capacity_gb else None
        row["measured_fits"] = {"ok": True, "oom": False}.get(m.get("status"))
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the prose

def _f(value: Any, spec: str = ".3g", none: str = "-") -> str:
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def headlines(doc: Mapping[str, Any]) -> dict[str, str]:
    """One line per check for the terminal table."""
    checks = doc["checks"]
    res = {name: (c.get("result") or {}) for name, c in checks.items()}
    d = res["device"]
    lines = {"device": f"{d.get('name', '?')}, {_f(d.get('memory_gib'), '.1f')} GiB, driver {_f(d.get('driver'))}, "
                       f"CUDA {_f(d.get('cuda'))}, torch {_f(d.get('torch'))}, NCCL {_f(d.get('nccl'))}"}
    rows = res["throughput"].get("rows") or []
    ok = [r for r in rows if r["status"] == "ok"]
    best = max(ok, key=lambda r: r["tokens_per_sec_per_gpu"] or 0, default=None)
    counts = ", ".join(f"{n} {s}" for s in ("oom", "error", "timeout", "skipped")
                       if (n := sum(r["status"] == s for r in rows)))
    lines["throughput"] = (f"{len(ok)}/{len(rows)} ok{' (' + counts + ')' if counts else ''}"
                           + (f"; best {best['name']}: {_f(best['tokens_per_sec_per_gpu'], ',.0f')} tok/s/GPU, "
                              f"MFU {_f(best['mfu'], '.2f')}" if best else ""))
    mem = res["memory"].get("rows") or []
    lines["memory"] = (f"{len(mem)} rows; predicted/measured allocated, median: analytic "
                       f"{_f(_median([r.get('analytic_over_measured') for r in mem]), '.2f')}, trace "
                       f"{_f(_median([r.get('trace_over_measured') for r in mem]), '.2f')}")
    sw = res["warm_switches"].get("switches") or []
    lines["warm_switches"] = "; ".join(f"{r['level']} {_f(r.get('warm_to_first_step_s'), '.1f')} s vs cold "
                                       f"{_f(r.get('cold_to_first_step_s'), '.1f')} s" for r in sw if r.get("job"))
    ck = res["checkpoint"]
    pred = ck.get("predicted") or {}
    lines["checkpoint"] = (f"sync save {_f(ck.get('sync_save_blocking_s'), '.2f')} s (helper {_f(pred.get('write_s'), '.2f')}), "
                           f"async blocking {_f(ck.get('async_save_blocking_s'), '.2f')} s (helper "
                           f"{_f(pred.get('stall_s'), '.2f')}), load {_f(ck.get('load_s'), '.2f')} s (helper "
                           f"{_f(pred.get('reload_s'), '.2f')})")
    env, rej = res["nccl"].get("env") or {}, res["nccl"].get("rejected") or {}
    one_rank = " (one rank: never read)" if env.get("note", "") and str(env["note"]).startswith("one rank") else ""
    lines["nccl"] = (f"env as set: {_f(env.get('as_set'))}, read by NCCL: {_f(env.get('read_by_nccl'), none='n/a')}"
                     f"{one_rank}; {rej.get('nccl_algo', '?')} reported as the trial's error: "
                     f"{_f(rej.get('reported_as_trial_error'))}" + (" (emulated on gloo)" if rej.get("emulated") else ""))
    return lines


def table(doc: Mapping[str, Any]) -> str:
    """The terminal table: check, status, seconds, headline."""
    heads = headlines(doc)
    out = [f"{'check':<14} {'status':<8} {'seconds':>8}  result", "-" * 100]
    for name, c in doc["checks"].items():
        out.append(f"{name:<14} {c['status']:<8} {_f(c.get('seconds'), '8.1f'):>8}  {heads.get(name, '')}")
    return "\n".join(out)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines + [""]


def markdown(doc: Mapping[str, Any]) -> str:
    """The section for docs/validation.md: device, MFU per config, memory predicted vs
    measured, switch and checkpoint seconds, NCCL pass-through."""
    checks = doc["checks"]
    res = {name: (c.get("result") or {}) for name, c in checks.items()}
    d, plan = res["device"], doc["plan"]
    title = "GPU check (dry run on CPU: code paths only, not measurements)" if doc["dry_run"] else "GPU check"
    out = [f"### {title}: {d.get('name', '?')}, {doc.get('started', '?')}", "",
           f"`bench/gpu_check.py` ({doc.get('elapsed_s') and round(doc['elapsed_s'])} s of a {plan['budget_s']:.0f} s "
           f"budget): {plan['preset']} (random weights), seq {plan['seq_len']}, FSDP2 on one "
           f"{'GPU' if not doc['dry_run'] else 'CPU process'}, {plan['backend']}, {plan['warmup_steps']} warm-up + "
           f"{plan['measure_steps']} measured steps per trial.", ""]
    out += _md_table(["device", "memory GiB", "driver", "CUDA", "torch", "NCCL", "transformers"],
                     [[d.get("name"), _f(d.get("memory_gib"), ".1f"), _f(d.get("driver")), _f(d.get("cuda")),
                       _f(d.get("torch")), _f(d.get("nccl")), _f(d.get("transformers"))]])
    out += ["Check status: " + ", ".join(f"{n} {c['status']}" for n, c in checks.items()) + ".", ""]

    def selected(name: str) -> bool:  # a check this run did not select has no section
        return checks[name]["status"] != "not selected"

    if selected("throughput"):
        rows = res["throughput"].get("rows") or []
        out += ["Throughput (tokens/s/GPU counts non-padding tokens; MFU counts all computed tokens, "
                "recomputation excluded; helper = `predict_throughput`):", ""]
        out += _md_table(["config", "status", "tokens/s/GPU", "MFU", "step s", "peak alloc GiB", "peak reserved GiB",
                          "helper tokens/s/GPU", "helper MFU", "measured/helper"],
                         [[r["name"], r["status"], _f(r.get("tokens_per_sec_per_gpu"), ",.0f"), _f(r.get("mfu"), ".3f"),
                           _f(r.get("step_time_s"), ".3f"), _f(r.get("peak_mem_gib"), ".2f"),
                           _f(r.get("peak_mem_reserved_gib"), ".2f"),
                           _f((r.get("predicted") or {}).get("tokens_per_sec_per_gpu"), ",.0f"),
                           _f((r.get("predicted") or {}).get("mfu"), ".3f"), _f(r.get("measured_over_predicted"), ".2f")]
                          for r in rows])
    if selected("memory"):
        mem = res["memory"].get("rows") or []
        out += ["Memory, GB (1e9 B): helper `estimate_memory` tensors (total - overhead) against "
                "`max_memory_allocated`, tensors + fragmentation allowance against `max_memory_reserved`:", ""]
        out += _md_table(["config", "status", "allocated", "analytic", "trace", "reserved", "analytic +frag",
                          "trace +frag", "analytic/alloc", "trace/alloc"],
                         [[r["name"], r["status"], _f(r.get("measured_allocated_gb"), ".2f"),
                           _f(r.get("analytic_tensors_gb"), ".2f"), _f(r.get("trace_tensors_gb"), ".2f"),
                           _f(r.get("measured_reserved_gb"), ".2f"), _f(r.get("analytic_reserved_gb"), ".2f"),
                           _f(r.get("trace_reserved_gb"), ".2f"), _f(r.get("analytic_over_measured"), ".2f"),
                           _f(r.get("trace_over_measured"), ".2f")] for r in mem])
    if selected("warm_switches"):
        sw = res["warm_switches"]
        out += [f"Warm switches (one resident worker; helper's cold start-up estimate "
                f"{_f(sw.get('predicted_cold_startup_s'), '.1f')} s):", ""]
        out += _md_table(["job", "level", "to", "status", "warm s to first step", "warm set-up s",
                          "cold s to first step", "cold source", "cold/warm", "warm tok/s/GPU",
                          "cold tok/s/GPU", "warm/cold tok/s"],
                         [[r.get("job"), r.get("level"), r.get("to"), r.get("status"),
                           _f(r.get("warm_to_first_step_s"), ".2f"), _f(r.get("warm_setup_s"), ".2f"),
                           _f(r.get("cold_to_first_step_s"), ".2f"), _f(r.get("cold_source")),
                           _f(r.get("cold_over_warm"), ".1f"), _f(r.get("tokens_per_sec_per_gpu"), ",.0f"),
                           _f(r.get("cold_tokens_per_sec_per_gpu"), ",.0f"), _f(r.get("warm_over_cold_tokens"), ".2f")]
                          for r in sw.get("switches") or []])
    if selected("checkpoint"):
        ck = res["checkpoint"]
        pred = ck.get("predicted") or {}
        out += [f"Checkpoints (DCP, model + optimizer, {_f((ck.get('bytes') or 0) / 1e9 or None, '.2f')} GB measured, "
                f"{_f(pred.get('size_gb'), '.2f')} GB predicted; {ck.get('predicted_assumes', '')}):", ""]
        out += _md_table(["what", "measured s", "helper s"],
                         [["sync save (blocking)", _f(ck.get("sync_save_blocking_s"), ".2f"), _f(pred.get("write_s"), ".2f")],
                          ["async save, blocking part", _f(ck.get("async_save_blocking_s"), ".2f"),
                           _f(pred.get("stall_s"), ".2f")],
                          ["async save, background", _f(ck.get("async_save_background_s"), ".2f"),
                           _f(pred.get("write_s"), ".2f")],
                          ["load", _f(ck.get("load_s"), ".2f"), _f(pred.get("reload_s"), ".2f")]])
    if selected("nccl"):
        env, rej = res["nccl"].get("env") or {}, res["nccl"].get("rejected") or {}
        out += [f"NCCL: the trial's environment showed {env.get('in_trial')} (as set: {_f(env.get('as_set'))}); "
                f"NCCL said so itself: {_f(env.get('read_by_nccl'), none='not applicable on gloo')} "
                f"({'; '.join(env.get('nccl_log_lines') or []) or 'no NCCL log lines'}). "
                f"NCCL_ALGO={rej.get('nccl_algo')}: status {rej.get('status')}, reported as the trial's error: "
                f"{_f(rej.get('reported_as_trial_error'))} ({((rej.get('error') or {}).get('message') or '')[:300]})"
                + (f" [{rej['emulated']}]" if rej.get("emulated") else "") + "."
                + (f" Note: {env['note']}." if env.get("note") and not rej.get("emulated") else ""), ""]
    return "\n".join(out)
