"""RUNBOOK.md: the plan as about six pages a research team executes.

Sections: the decision and its reasons; memory and throughput tables; launch scripts (sbatch +
torchrun, environment, NCCL and loader settings from a tuning study when there is one); the
checkpoint and restart procedure; a failure playbook; what to monitor, with thresholds; the
proxy validation. ``tuner.plan`` renders it with a plot (and a PDF where Chromium is
installed). Pure text over the plan dict: nothing here recomputes the model.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from tuner.knobs import ENV_DEFAULT, KNOBS, LAUNCH_KNOBS

__all__ = ["render_runbook", "write_runbook", "tuning_settings", "SLOW_NODE_FACTOR", "MFU_ALERT_SHARE"]

SLOW_NODE_FACTOR = 1.15
"""A rank whose step time exceeds the median rank's by 15 % is a straggler to drain: FSDP runs at
the slowest rank's pace, so one slow GPU slows every GPU (an operating threshold, not a measurement)."""
MFU_ALERT_SHARE = 0.85
"""Alert when throughput falls under 85 % of the plan's lower band for 10 minutes."""
_LOADER = ("num_workers", "prefetch_factor")


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


def _h(hours: float | None) -> str:
    if hours is None:
        return "-"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def _launch(plan: dict[str, Any], tuning: dict[str, Any] | None) -> list[str]:
    i, c, ck = plan["inputs"], plan["chosen"], plan["checkpoint"]
    params = (tuning or {}).get("params", {})
    env = []
    for k in LAUNCH_KNOBS:
        v = params.get(k, ENV_DEFAULT)
        env.append(f"export {KNOBS[k].env_var}={v}" if v != ENV_DEFAULT else f"unset {KNOBS[k].env_var}   # leave it to NCCL")
    workers = params.get("num_workers", 8)
    prefetch = params.get("prefetch_factor", 2)
    src = (f"NCCL and loader settings: from tuning study `{tuning['study']}` (trial {tuning.get('trial')})"
           if tuning and params else "NCCL and loader settings: no tuning study given; NCCL's own choices and "
           "8 workers (run `tuner run` on this cluster and pass `--tuning-study` to fill these in)")
    knobs = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in c["workload_knobs"].items())
    minutes = max(60, int(c["wall_hours"] * 60 * 1.1) + 30) if c["wall_hours"] else 60
    limit = min(minutes, 48 * 60)
    return [
        src, "", "```bash",
        "#!/bin/bash",
        f"#SBATCH --job-name=train-{i['model']}",
        f"#SBATCH --nodes={i['nodes']}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={i['gpus_per_node']}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={limit // 60:02d}:{limit % 60:02d}:00   # requeue continues from the last checkpoint",
        "#SBATCH --requeue",
        "#SBATCH --signal=USR1@120   # two minutes' warning: take a final checkpoint",
        "set -euo pipefail",
        "export CKPT_DIR=/shared/checkpoints/$SLURM_JOB_NAME   # shared storage, never node-local disk",
        *env,
        "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1     # fail fast on a dead peer instead of hanging",
        f"export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={int(ck['worst_case_parts_s']['detection_s'])}",
        "export NCCL_DEBUG=WARN",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # less fragmentation",
        "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)",
        "srun torchrun \\",
        f"  --nnodes={i['nodes']} --nproc-per-node={i['gpus_per_node']} \\",
        "  --rdzv-backend=c10d --rdzv-endpoint=$head:29500 --rdzv-id=$SLURM_JOB_ID \\",
        "  --max-restarts=3 \\",
        "  train.py \\",
        f"  --layout {c['layout']} {knobs} \\",
        f"  --seq-len {i['seq_len']} --micro-batch {c['micro_batch']} --grad-accum {c['grad_accum']} \\",
        f"  --activation-checkpointing {str(c['activation_checkpointing']).lower()} \\",
        f"  --num-workers {workers} --prefetch-factor {prefetch} \\",
        f"  --checkpoint-dir $CKPT_DIR --checkpoint-every {ck['interval_steps']} --checkpoint-keep {ck['keep']} "
        "--async-checkpoint --resume latest",
        "```", "",
        "`train.py` is your training script; the flags name what it must set. In a tuner workload they are "
        f"the knobs {', '.join(f'`{k}`' for k in c['workload_knobs'])}. "
        + ("The mesh is `(dp_replicate, dp_shard)` = "
           f"`({c['dp_replicate']}, {c['dp_shard']})`" if c["dp_replicate"] > 1 else
           f"The mesh is `(pp, dp_shard, tp)` = `({c['pp']}, {c['dp_shard']}, {c['tp']})`") + ".",
    ]


def render_runbook(plan: dict[str, Any], *, tuning: dict[str, Any] | None = None, today: str | None = None) -> str:
    """RUNBOOK.md text from a ``helper.plan_training`` result (validated or not)."""
    i, c, ck = plan["inputs"], plan["chosen"], plan["checkpoint"]
    today = today or _dt.date.today().isoformat()
    lo, hi = c["band"]
    L = [f"# Runbook: {i['model']} on {i['gpu_count']} x {i['gpu']}", "",
         f"{i['tokens']:.3g} tokens, seq_len {i['seq_len']}, {i['nodes']} node(s) x {i['gpus_per_node']} GPUs, "
         f"{i['inter_node_gbps']:.0f} Gb/s per GPU between nodes. Written {today} by `tuner plan`; "
         f"performance model calibration: {plan['source']}.", ""]
    if not plan.get("validation"):
        L += ["> Not validated on a proxy yet: run `tuner plan ... --validate` before launching.", ""]

    L += ["## 1. Decision", "", f"**Use {c['layout']}**: {c['description']}.", ""]
    L += [f"- {r}" for r in plan["reasons"]] + [""]
    L += [f"Expected **{c['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU** (band {lo:,.0f} to {hi:,.0f}, "
          f"+/-{c['band_pct']:.0f}%), MFU {c['mfu']:.0%}; {_h(c['wall_hours'])} wall, {c['gpu_hours']:,.0f} GPU-hours"
          + (f", cost {c['cost']:,.0f}." if c["cost"] is not None else "."), ""]

    bg = plan["batch_guidance"]
    L += ["## 2. Memory, batch and throughput", "",
          f"Global batch target {bg['target_tokens'] / 1e6:.2f}M tokens ({bg['target_source']}). "
          f"Chosen: micro-batch {c['micro_batch']} x grad_accum {c['grad_accum']} x "
          f"{c['dp_shard'] * c['dp_replicate']} data-parallel ranks = {c['global_batch']} sequences "
          f"({c['global_batch_tokens'] / 1e6:.2f}M tokens), {c['steps']:,} steps.", ""]
    L += [f"> **Warning:** {w}" for w in c["warnings"]] + ([""] if c["warnings"] else [])
    L += _table(["layout", "fits", "memory GB/GPU", "spare GB", "micro-batch", "grad_accum", "act. ckpt",
                 "tokens/s/GPU", "band", "MFU", "wall", "GPU-h"],
                [[("**" + r["layout"] + "**") if r is c else r["layout"], "yes" if r["fits"] else "no",
                  f"{r['memory']['total']:.1f}", f"{r['headroom_gb']:.1f}", r["micro_batch"], r["grad_accum"],
                  "on" if r["activation_checkpointing"] else "off",
                  f"{r['tokens_per_sec_per_gpu']:,.0f}" if r["tokens_per_sec_per_gpu"] else "-",
                  f"{r['band'][0]:,.0f}-{r['band'][1]:,.0f}" if r["band"] else "-",
                  f"{r['mfu']:.0%}" if r["mfu"] else "-", _h(r["wall_hours"]),
                  f"{r['gpu_hours']:,.0f}" if r["gpu_hours"] else "-"] for r in plan["layouts"]])
    L += ["", f"Memory per GPU of {c['layout']}, GB ({i['memory_capacity_gb']:.0f} GB capacity, "
              f"{c['usable_gb']:.0f} usable):", ""]
    L += _table(["part", "GB"], [[k, f"{v:.1f}"] for k, v in c["memory"].items()])
    t = c["time"]
    L += ["", f"Step time of {c['layout']}, seconds per optimizer step:", ""]
    L += _table(["part", "s"], [[k, f"{v:.3f}"] for k, v in t.items() if k.endswith("_s")]) + [""]

    L += ["## 3. Launch", ""] + _launch(plan, tuning) + [""]

    p = ck["worst_case_parts_s"]
    L += ["## 4. Checkpoints and restart", "",
          f"- **What**: model and optimizer state with `torch.distributed.checkpoint` (`dcp.async_save`): "
          f"{ck['size_gb']:.0f} GB, {ck['size_gb_per_node']:.0f} GB per node; each rank writes its own shards.",
          f"- **Where**: {ck['where']}. Keep the last {ck['keep']}; delete older ones only after a newer one "
          "is complete (DCP writes `.metadata` last: a folder without it is incomplete).",
          f"- **When**: every {ck['interval_steps']} steps ({ck['interval_s'] / 60:.1f} min). Young/Daly's optimum for a "
          f"job MTBF of {ck['job_mtbf_hours']:,.0f} h ({ck['failures_per_day']:.2f} failures/day at "
          f"{ck['failures_per_gpu_hour']:.3g} per GPU-hour, Llama 3's rate unless overridden) is "
          f"{ck['young_daly_interval_s'] / 60:.0f} min" + ("; the lost-work limit caps it." if ck["limit_bound"] else "."),
          f"- **Cost**: training stalls ~{ck['stall_s']:.1f} s per save while shards are copied to host memory; "
          f"the {ck['write_s']:.0f} s write runs in the background and must finish before the next save.",
          f"- **Worst-case lost work**: {ck['worst_case_lost_s'] / 60:.1f} min "
          f"({'within' if ck['meets_limit'] else 'OVER'} the {ck['max_lost_work_minutes']:.0f} min limit):", ""]
    L += _table(["part", "minutes"], [[k[:-2], f"{v / 60:.1f}"] for k, v in p.items()])
    L += ["", "**Restart procedure**", "",
          "1. Slurm requeues the job (`--requeue`) or torchrun restarts the workers (`--max-restarts`).",
          "2. Every rank loads the newest complete checkpoint (`dcp.load` into the sharded model and optimizer; "
          "the layout may differ: DCP reshards on load).",
          "3. Check the first logged step after resume: its loss should match the loss logged at the checkpoint's "
          "step within noise; its step index continues from the checkpoint.",
          "4. Resume the data loader from the checkpoint's sample offset so no example is seen twice.", ""]

    L += ["## 5. Failure playbook", "",
          "| symptom | what it means | do |", "|---|---|---|",
          "| a node disappears (job fails, `srun: error: Node failure`) | hardware or kernel fault | Slurm requeues "
          "without that node (`scontrol update nodename=X state=drain reason=...`); resume from the last checkpoint; "
          "open a ticket with the node's `dmesg`/`nvidia-smi -q` |",
          f"| NCCL timeout or hang (no step logged for {p['detection_s'] / 60:.0f} min; watchdog `Watchdog caught collective "
          "operation timeout`) | a peer died or a link is stuck | the watchdog kills the job; restart from the last "
          "checkpoint; rerun `nccl-tests` all_reduce_perf on the suspect nodes before returning them |",
          f"| CUDA out of memory | a longer batch or fragmentation | the plan leaves {c['headroom_gb']:.0f} GB spare; "
          "halve micro-batch and double grad_accum (same global batch), or turn on activation checkpointing; "
          "`expandable_segments:True` is already set |",
          f"| a slow node (one rank's step time > {SLOW_NODE_FACTOR:.2f} x the median) | thermal throttling, a bad "
          "NIC, a noisy neighbour | FSDP runs at the slowest rank's pace: drain the node at the next checkpoint "
          "and restart without it |",
          "| loss spike (loss > 2 x its running median, or NaN) | bad batch, too high a learning rate | skip "
          "the batch if it recurs at the same sample; otherwise roll back to the checkpoint before the spike "
          "and lower the learning rate or re-order the data |", ""]

    L += ["## 6. What to monitor", "",
          "| metric | expected | alert when |", "|---|---|---|",
          f"| tokens/s/GPU | {c['tokens_per_sec_per_gpu']:,.0f} ({lo:,.0f}-{hi:,.0f}) | under "
          f"{MFU_ALERT_SHARE * lo:,.0f} for 10 min |",
          f"| MFU | {c['mfu']:.0%} | under {MFU_ALERT_SHARE * c['mfu'] * lo / c['tokens_per_sec_per_gpu']:.0%} for 10 min |",
          f"| step time | {c['step_time_s']:.2f} s | a step over {2 * c['step_time_s']:.1f} s (outlier), "
          f"or any rank over {SLOW_NODE_FACTOR:.2f} x the median rank |",
          f"| peak memory per GPU | {c['memory']['total']:.0f} GB | over {c['usable_gb']:.0f} GB |",
          f"| checkpoint age | under {ck['interval_s'] / 60:.0f} min | over {2 * ck['interval_s'] / 60:.0f} min |",
          "| loss | decreasing | NaN, or over 2 x its running median |", ""]

    L += ["## 7. Proxy validation", ""]
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
        L += ["Not run. `tuner plan ... --validate` runs the proxy (1.3B on 4 GPUs on a GPU cluster; here the "
              "tiny model on 2 CPU processes) through the study machinery and fills this table."]
    return "\n".join(L) + "\n"


def write_runbook(plan: dict[str, Any], out_dir: str | Path, *, tuning: dict[str, Any] | None = None,
                  pdf: bool = True) -> list[Path]:
    """RUNBOOK.md, runbook.html, and (``pdf``) runbook.pdf where Chromium is installed; the paths written."""
    from tuner.plan._runbook_html import render_runbook_html, write_pdf
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = render_runbook(plan, tuning=tuning)
    paths = [out / "RUNBOOK.md", out / "runbook.html"]
    paths[0].write_text(md)
    paths[1].write_text(render_runbook_html(plan, md))
    printed = write_pdf(paths[1], out / "runbook.pdf") if pdf else None
    return paths + ([printed] if printed else [])
