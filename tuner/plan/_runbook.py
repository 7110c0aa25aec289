"""RUNBOOK.md: the plan as about six printed pages, for two readers.

Page one is for a reader without a systems background: what the run is, how long, what it costs,
what can go wrong, and a glossary (``_runbook_pages``). Then the go/no-go checks (commands
with thresholds), the decision and its reasons, memory and throughput tables, the Slurm batch
script (``_runbook_script``) and what ``train.py`` must do, checkpoints and the lost-work
bound, a failure playbook, monitoring with GPU health, and the proxy validation.
``_runbook_html`` renders it with a plot (and a PDF where Chromium is installed). Pure text
over the plan dict: nothing here recomputes the model.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from tuner.knobs import LAUNCH_KNOBS
from tuner.plan._runbook_pages import duration, go_no_go, health_rows, plain_page, validation_banner
from tuner.plan._runbook_script import DEFAULT_TIME_LIMIT_HOURS, BatchScript, batch_script, plan_batch_script

__all__ = ["render_runbook", "write_runbook", "tuning_settings", "SLOW_NODE_FACTOR", "MFU_ALERT_SHARE"]

SLOW_NODE_FACTOR = 1.15
"""A rank whose step time exceeds the median rank's by 15 % is a straggler to drain: FSDP runs at
the slowest rank's pace, so one slow GPU slows every GPU (an operating threshold, not a measurement)."""
MFU_ALERT_SHARE = 0.85
"""Alert when throughput falls under 85 % of the plan's lower band for 10 minutes."""
_LOADER = ("num_workers", "prefetch_factor")
_MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "gathered_params", "grad_accum_buffer", "overhead")


def tuning_settings(storage_url: str | None, study_name: str) -> dict[str, Any]:
    """The best ok trial's launch and loader knobs of a finished tuning study."""
    from tuner.storage import resolve_storage_url
    from tuner.study import load_existing_study
    study = load_existing_study(resolve_storage_url(storage_url), study_name)
    ok = [t for t in study.trials if t.user_attrs.get("status") == "ok" and t.value]
    if not ok:
        return {"study": study_name, "params": {}, "tokens_per_sec_per_gpu": None}
    best = max(ok, key=lambda t: t.value)
    keep = {k: v for k, v in best.params.items() if k in LAUNCH_KNOBS or k in _LOADER}
    return {"study": study_name, "trial": best.number, "params": keep, "tokens_per_sec_per_gpu": best.value}


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(map(str, r)) + " |" for r in rows]


_CONTRACT = (
    "`train.py` is your training script; the flags name what it must do:",
    "",
    "- `--init-timeout-s` / `--collective-timeout-s`: `init_process_group(timeout=timedelta(seconds=init))`, then after "
    "the first step a barrier and `torch.distributed.distributed_c10d._set_pg_timeout(timedelta(seconds=collective), "
    "group)` on every process group (torchtitan's `set_pg_timeouts`). This timeout, not `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`"
    " (the watchdog's own heartbeat), is how long a dead peer stays unnoticed.",
    "- `--stop-file`: each step rank 0 checks the file and broadcasts the answer; when it exists, save a checkpoint "
    "(blocking `dcp.save`) and exit 0. When the run is complete (or `--max-steps`, the checks' limit, is reached), "
    "write `$CKPT_DIR/DONE` and exit 0.",
    "- `--resume latest`: build the model on the meta device (no full initialisation: the restart time counts "
    "only start-up and the reload), load the newest complete checkpoint (`dcp.load`; a folder without "
    "`.metadata` is incomplete) and the data loader's position.",
    "- `--grad-accum`: FSDP2 reduce-scatters every micro-batch (the plan's memory counts the sharded gradients); "
    "under HSDP call `model.set_requires_all_reduce(False)` on all but the last micro-batch.",
)


def _mesh(c: dict[str, Any]) -> str:
    if c["dp_replicate"] > 1:
        return f"The mesh is `(dp_replicate, dp_shard)` = `({c['dp_replicate']}, {c['dp_shard']})`."
    return f"The mesh is `(pp, dp_shard, tp)` = `({c['pp']}, {c['dp_shard']}, {c['tp']})`."


def _banner(plan: dict[str, Any]) -> list[str]:
    """Cleared only by a proxy on the plan's own GPU kind."""
    text = validation_banner(plan)
    if not text:
        return []
    head, _, rest = text.partition(":")
    return [f"> **{head}:**{rest}", ""]


def _launch(plan: dict[str, Any], tuning: dict[str, Any] | None, script: BatchScript) -> list[str]:
    c = plan["chosen"]
    src = (f"NCCL and loader settings from tuning study `{tuning['study']}` (trial {tuning.get('trial')})."
           if tuning and tuning.get("params") else "NCCL and loader settings: no tuning study given; NCCL's own "
           "choices and 8 workers (`tuner run` on this cluster, then `--tuning-study`, fills them in).")
    return [src + f" Save as `train.sbatch`; submit once with `sbatch train.sbatch`. {_mesh(c)}", "",
            "```bash", batch_script(script).rstrip("\n"), "```", "", *_CONTRACT, ""]


def _checkpoints(plan: dict[str, Any], script: BatchScript) -> list[str]:
    ck = plan["checkpoint"]
    p = ck["worst_case_parts_s"]
    what = {"interval_s": "work since the last save (the interval)", "write_s": "the save being written when it fails",
            "detection_s": f"noticing: the later of the collective timeout ({ck['collective_timeout_s']:.0f} s) + "
                           f"torchrun's {ck['teardown_s']:.0f} s teardown, and Slurm's SlurmdTimeout "
                           f"({ck['slurmd_timeout_s']:.0f} s)",
            "restart_s": f"restart: {ck['restart_policy']}"
                         + (f" (~{ck['requeue_wait_s'] / 60:.0f} min, an allowance)" if ck["requeue_wait_s"] else "")
                         + f", then start-up to the first step ({ck['startup_s']:.0f} s)",
            "reload_s": "reading the checkpoint back",
            "margin_s": f"margin ({ck['margin']:.0%}: the parts above are timeouts and allowances)"}
    return [
        "## 6. Checkpoints and restart", "",
        f"- **What, where**: model and optimizer with `torch.distributed.checkpoint` (`dcp.async_save`), "
        f"{ck['size_gb']:.0f} GB ({ck['size_gb_per_node']:.0f} GB per node), on {ck['where']}. Keep the last {ck['keep']}.",
        f"- **When**: every {ck['interval_steps']} steps ({ck['interval_s'] / 60:.1f} min); training stalls "
        f"~{ck['stall_s']:.1f} s per save, the {ck['write_s']:.0f} s write runs in the background. Young/Daly's optimum "
        f"for a job MTBF of {ck['job_mtbf_hours']:,.0f} h ({ck['failures_per_day']:.2f} failures/day at "
        f"{ck['failures_per_gpu_hour']:.3g} per GPU-hour, Llama 3's rate) is {ck['young_daly_interval_s'] / 60:.0f} min"
        + ("; the lost-work limit caps it." if ck["limit_bound"] else "."),
        f"- **Worst case lost per failure**: {ck['worst_case_lost_s'] / 60:.1f} min "
        f"({'within' if ck['meets_limit'] else 'OVER'} the {ck['max_lost_work_minutes']:.0f} min limit), each part "
        "set by the script above:", "",
        *_table(["part", "minutes"], [[what[k], f"{v / 60:.1f}"] for k, v in p.items()]), "",
        "**Restart**: at the time-limit warning the job saves and requeues itself; on a failure the batch shell "
        f"relaunches the step (up to {script.max_relaunches} times, on the spare node when one is held), then "
        "requeues. Each start loads the newest complete checkpoint (DCP reshards on load); check that the first "
        "step after a resume continues the step count and the loss.", ""]


def _playbook(plan: dict[str, Any]) -> list[str]:
    c, ck = plan["chosen"], plan["checkpoint"]
    return [
        "## 7. Failure playbook", "",
        "| symptom | what it means | do |", "|---|---|---|",
        "| a node disappears (`srun: error: Node failure`) | hardware or kernel fault | nothing at once: the job "
        "relaunches or requeues itself; drain the node (`scontrol update nodename=X state=drain reason=...`) and "
        "open a ticket with its `dmesg` and `nvidia-smi -q` |",
        f"| `Watchdog caught collective operation timeout` (no step for {ck['collective_timeout_s'] / 60:.1f} min) | a "
        "peer died or a link is stuck | the job restarts from the last checkpoint; rerun `all_reduce_perf` (section 2) "
        "on the suspect nodes before returning them |",
        f"| CUDA out of memory | a longer batch or fragmentation | the plan leaves {c['headroom_gib']:.1f} GiB spare; "
        "halve micro-batch and double grad_accum (same global batch), or turn on activation checkpointing |",
        f"| one rank's step time > {SLOW_NODE_FACTOR:.2f} x the median | throttling, a bad NIC | FSDP runs at the "
        "slowest rank's pace: drain the node at the next checkpoint |",
        "| loss spike (> 2 x its running median) or NaN | bad batch, too high a learning rate | skip the batch if it "
        "recurs at the same sample; otherwise roll back to the checkpoint before the spike and lower the learning rate |",
        "| `N allocations used: not requeueing` in the log | more failures than planned | raise `MAX_ALLOCATIONS` in "
        "the script and resubmit: it resumes |", ""]


def _monitor(plan: dict[str, Any]) -> list[str]:
    c, ck = plan["chosen"], plan["checkpoint"]
    lo, hi = c["band"]
    return [
        "## 8. What to monitor", "",
        "| metric | expected | alert when |", "|---|---|---|",
        f"| tokens/s/GPU | {c['tokens_per_sec_per_gpu']:,.0f} ({lo:,.0f}-{hi:,.0f}) | under {MFU_ALERT_SHARE * lo:,.0f} "
        "for 10 min |",
        f"| MFU | {c['mfu']:.0%} | under {MFU_ALERT_SHARE * c['mfu'] * lo / c['tokens_per_sec_per_gpu']:.0%} for 10 min |",
        f"| step time | {c['step_time_s']:.2f} s | a step over {2 * c['step_time_s']:.1f} s, or any rank over "
        f"{SLOW_NODE_FACTOR:.2f} x the median rank |",
        f"| peak memory per GPU | {c['memory_gib']['total']:.1f} GiB | over {c['usable_gib']:.1f} GiB |",
        f"| checkpoint age | under {ck['interval_s'] / 60:.0f} min | over {2 * ck['interval_s'] / 60:.0f} min |",
        "| loss | decreasing | NaN, or over 2 x its running median |", *health_rows(), ""]


def render_runbook(plan: dict[str, Any], *, tuning: dict[str, Any] | None = None, today: str | None = None,
                   time_limit_hours: float = DEFAULT_TIME_LIMIT_HOURS) -> str:
    """RUNBOOK.md text from a ``helper.plan_training`` result (validated or not)."""
    i, c = plan["inputs"], plan["chosen"]
    script = plan_batch_script(plan, tuning, time_limit_hours=time_limit_hours)
    today = today or _dt.date.today().isoformat()
    lo, hi = c["band"]
    L = [f"# Runbook: {i['model']} on {i['gpu_count']} x {i['gpu']}", "",
         f"Written {today} by `tuner plan`. Page one is for everyone; the rest is for the engineer who runs it.", "",
         *_banner(plan)]
    L += plain_page(plan, script) + go_no_go(plan, script)

    L += ["## 3. Decision", "",
          f"{i['tokens']:.3g} tokens, seq_len {i['seq_len']}, {i['nodes']} node(s) x {i['gpus_per_node']} GPUs, "
          f"{i['inter_node_gbps']:.0f} Gb/s per GPU between nodes; calibration: {plan['source']}.", "",
          f"**Use {c['layout']}**: {c['description']}.", ""]
    L += [f"- {r}" for r in plan["reasons"]] + [""]
    L += [f"Expected **{c['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU** ({lo:,.0f} to {hi:,.0f}: +/-{c['band_pct']:.1f} %, "
          f"{plan['band_source']}), MFU {c['mfu']:.0%}; {duration(c['wall_hours'])} wall, {c['gpu_hours']:,.0f} GPU-hours"
          + (f", cost {c['cost']:,.0f}." if c["cost"] is not None else "."), ""]

    bg = plan["batch_guidance"]
    L += ["## 4. Memory, batch and throughput", "",
          f"Every layout runs the same global batch: {bg['global_batch']} sequences ({bg['global_batch_tokens'] / 1e6:.2f}M "
          f"tokens; target {bg['target_tokens'] / 1e6:.2f}M, {bg['target_source']}), {c['steps']:,} steps. Chosen: "
          f"micro-batch {c['micro_batch']} x grad_accum {c['grad_accum']} x {c['dp_shard'] * c['dp_replicate']} "
          "data-parallel ranks.", ""]
    L += [f"> **Warning:** {w}" for w in c["warnings"]] + ([""] if c["warnings"] else [])
    L += _table(["layout", "fits", "GiB/GPU", "spare GiB", "micro-batch", "grad_accum", "act. ckpt", "tokens/s/GPU",
                 "band", "MFU", "wall", "GPU-h"],
                [[("**" + r["layout"] + "**") if r is c else r["layout"], "yes" if r["fits"] else "no",
                  f"{r['memory_gib']['total']:.1f}", f"{r['headroom_gib']:.1f}", r["micro_batch"], r["grad_accum"],
                  "on" if r["activation_checkpointing"] else "off",
                  f"{r['tokens_per_sec_per_gpu']:,.0f}" if r["tokens_per_sec_per_gpu"] else "-",
                  f"{r['band'][0]:,.0f}-{r['band'][1]:,.0f}" if r["band"] else "-",
                  f"{r['mfu']:.0%}" if r["mfu"] else "-", duration(r["wall_hours"]),
                  f"{r['gpu_hours']:,.0f}" if r["gpu_hours"] else "-"] for r in plan["layouts"]])
    m = c["memory_gib"]
    L += ["", f"Memory per GPU of {c['layout']}, GiB (capacity {i['memory_capacity_gib']:.1f}, usable "
              f"{c['usable_gib']:.1f}), and step time, seconds per optimizer step:", ""]
    mem_rows = [[k, f"{m[k]:.1f}"] for k in _MEMORY_PARTS if k in m] + [["**total**", f"**{m['total']:.1f}**"]]
    time_rows = [[k, f"{v:.2f}"] for k, v in c["time"].items() if k.endswith("_s")]
    L += _table(["memory part", "GiB", "step part", "s"],
                [[*(mem_rows[k] if k < len(mem_rows) else ["", ""]), *(time_rows[k] if k < len(time_rows) else ["", ""])]
                 for k in range(max(len(mem_rows), len(time_rows)))]) + [""]

    L += ["## 5. Launch", ""] + _launch(plan, tuning, script)
    L += _checkpoints(plan, script) + _playbook(plan) + _monitor(plan)

    L += ["## 9. Proxy validation", ""]
    v = plan.get("validation")
    if v:
        L += [v["note"] + ".", ""]
        L += _table(["proxy config", "measured tok/s/GPU", "predicted", "error", "after refit", "error",
                     "peak GiB measured", "predicted"],
                    [[r["config"], f"{r['measured']:,.1f}", f"{r['predicted']:,.1f}", f"{r['error_pct']:+.0f}%",
                      f"{r['refit']:,.1f}", f"{r['refit_error_pct']:+.0f}%",
                      f"{r['peak_mem_gib']:.2f}" if isinstance(r["peak_mem_gib"], (int, float)) else "-",
                      f"{r['predicted_mem_gib']:.2f}"] for r in v["rows"]])
        L += ["", f"Band after validation: +/-{v['band_pct_after']:.0f}% (before: +/-{v['band_pct_before']:.0f}%)."]
    else:
        L += ["Not run. `tuner plan ... --validate --proxy gpu` runs a ~1.1B proxy on 4 of the plan's GPUs through the "
              "study machinery and refits the model; `--proxy cpu` checks the structure on CPU processes only."]
    return "\n".join(L) + "\n"


def write_runbook(plan: dict[str, Any], out_dir: str | Path, *, tuning: dict[str, Any] | None = None,
                  pdf: bool = True, time_limit_hours: float = DEFAULT_TIME_LIMIT_HOURS) -> list[Path]:
    """RUNBOOK.md, runbook.html, and (``pdf``) runbook.pdf where Chromium is installed; the paths written."""
    from tuner.plan._runbook_html import render_runbook_html, write_pdf
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = render_runbook(plan, tuning=tuning, time_limit_hours=time_limit_hours)
    paths = [out / "RUNBOOK.md", out / "runbook.html"]
    paths[0].write_text(md)
    paths[1].write_text(render_runbook_html(plan, md))
    printed = write_pdf(paths[1], out / "runbook.pdf") if pdf else None
    return paths + ([printed] if printed else [])
