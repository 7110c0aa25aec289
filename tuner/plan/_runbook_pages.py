"""The runbook's pages for the reader who is not a systems engineer, and its launch checks.

:func:`plain_page` is page one: what the run is, how long it takes, what it costs and what can go
wrong, in plain words, with a glossary of every term the later pages use. :func:`go_no_go` lists
the checks to pass before the long run, each a command with a threshold from the plan
(``plan["go_no_go"]``, :mod:`helper.go_no_go`). :func:`health_rows` are the GPU-health rows of the
monitoring table. Pure text over the plan dict.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["plain_page", "glossary", "go_no_go", "health_rows", "duration", "amount", "validation_banner"]

GLOSSARY = (
    ("GPU, node", "The chip that does the arithmetic; a node is one machine with several GPUs on a fast link (NVLink). "
                  "Nodes talk over a slower network."),
    ("token", "A piece of a word, the unit of text; speed is tokens per second per GPU."),
    ("FSDP / HSDP", "Fully / Hybrid Sharded Data Parallel: each GPU keeps a slice of the model and borrows the rest when "
                    "needed; HSDP slices within a node and keeps a copy per node."),
    ("TP, PP", "Tensor / pipeline parallel: every layer split across GPUs / the layers cut into stages."),
    ("micro-batch, grad_accum", "The rows a GPU processes at once; grad_accum: how many micro-batches add up to one "
                                "update (the global batch: all rows of one update)."),
    ("activation checkpointing", "Recomputing instead of storing: a third more arithmetic, much less memory."),
    ("MFU", "The share of the GPUs' peak arithmetic rate used (published runs: 33-64 %)."),
    ("NCCL", "NVIDIA's library for exchanging data between GPUs; its timeout decides how fast a dead peer is noticed."),
    ("checkpoint", "A saved copy of model and optimizer on shared storage; training resumes from it."),
    ("Slurm allocation, requeue", "Slurm is the cluster's queue; an allocation is one time-limited stay on the "
                                  "machines; requeue puts the job back in the queue."),
    ("GiB", "2^30 bytes, the unit nvidia-smi and PyTorch show (an \"80 GB\" H100 has 79.6 GiB)."),
)


def validation_banner(plan: dict[str, Any]) -> str | None:
    """The warning a plan carries until a proxy ran on its own GPU kind (``--validate --proxy gpu``); None after."""
    v, gpu = plan.get("validation"), plan["inputs"]["gpu"]
    if not v:
        return f"Not validated: run `tuner plan ... --validate --proxy gpu` on {gpu}s before launching."
    if not v.get("same_gpu"):
        return (f"Validated on a CPU proxy only: it checks the model's structure, not the {gpu}'s speed. Run "
                f"`tuner plan ... --validate --proxy gpu` on {gpu}s before launching.")
    return None


def duration(hours: float | None) -> str:
    """Hours as minutes, hours or days."""
    if hours is None:
        return "-"
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def amount(n: float) -> str:
    """A count in words a reader without a systems background reads at once.

    Example:
        >>> amount(100e9), amount(1.5e12), amount(26e9)
        ('100 billion', '1.5 trillion', '26 billion')
    """
    for word, div in (("trillion", 1e12), ("billion", 1e9), ("million", 1e6)):
        if n >= div:
            return f"{n / div:.3g} {word}"
    return f"{n:,.0f}"


def glossary() -> list[str]:
    """The glossary as a markdown table."""
    return ["| term | meaning |", "|---|---|"] + [f"| {t} | {m} |" for t, m in GLOSSARY]


def plain_page(plan: dict[str, Any], script: Any) -> list[str]:
    """Page one: the run in plain words, then the glossary."""
    i, c, ck = plan["inputs"], plan["chosen"], plan["checkpoint"]
    lo_h, hi_h = c["wall_hours_band"]
    failures = ck["failures_per_day"] * c["wall_hours"] / 24
    stays = max(1, math.ceil(c["wall_hours"] * 60 / script.time_limit_minutes))
    cost = ""
    if c["cost"] is not None:
        cost = f", about {c['cost']:,.0f} at {i['cost_per_gpu_hour']:g} per GPU-hour"
    spare = (f" The spare node held for failures adds {c['spare_gpu_hours']:,.0f} GPU-hours." if ck["spare_nodes"] else "")
    restart = ("on the spare node it holds" if ck["spare_nodes"] else "once Slurm gives it a free node")
    return [
        "## 1. The run in plain words", "",
        f"**What.** Train a {amount(i['n_params'])}-parameter language model on {amount(i['tokens'])} tokens of "
        f"text, on {i['gpu_count']} {i['gpu']} GPUs ({i['nodes']} node(s) of {i['gpus_per_node']}).", "",
        f"**How long.** About {duration(c['wall_hours'])} of training ({duration(lo_h)} to {duration(hi_h)}: the "
        f"speed estimate's +/-{c['band_pct']:.0f} % band). Slurm lets a job run {duration(script.time_limit_minutes / 60)}"
        f" at a time, so the job saves, goes back in the queue and continues by itself: {stays} stay(s) on the "
        "machines, each followed by a wait in the queue that the estimate does not include.", "",
        f"**What it costs.** {c['gpu_hours']:,.0f} GPU-hours ({c['gpu_hours'] * (1 - c['band_pct'] / 100):,.0f} to "
        f"{c['gpu_hours'] * (1 + c['band_pct'] / 100):,.0f}){cost}.{spare}", "",
        "**What can go wrong, and what happens then.**", "",
        f"- *A machine or GPU fails.* Expect about {failures:.1f} such failures over the run (the rate Llama 3's "
        f"training published). The job notices within {ck['worst_case_parts_s']['detection_s'] / 60:.0f} min, "
        f"restarts by itself {restart}, and loses at most {ck['worst_case_lost_s'] / 60:.0f} min of work each time.",
        f"- *It runs slower than planned.* The checks before launch (section 2) stop it if the first steps run under "
        f"{plan['go_no_go']['tokens_per_sec_per_gpu_floor']:,} tokens/s/GPU; during the run an alert fires (section 8).",
        f"- *It runs out of GPU memory.* The plan keeps {c['headroom_gib']:.1f} GiB spare per GPU; the launch "
        "checks measure the real peak in the first minutes.",
        "- *The training itself goes wrong* (the loss jumps or becomes NaN): not a machine fault; section 7 says how "
        "to roll back to an earlier save.", "",
        "**What the team does.** Pass the checks of section 2 (about an hour), submit the script of section 5 "
        "once, and look at the monitoring of section 8 daily.", "", *glossary(), "",
    ]


def go_no_go(plan: dict[str, Any], script: Any) -> list[str]:
    """The launch checks: commands and the threshold each must clear."""
    i, g = plan["inputs"], plan["go_no_go"]
    n, gpn = i["nodes"], i["gpus_per_node"]
    alloc = script.nodes + script.spare_nodes
    s_ckpt = script.ckpt_dir.replace("$SLURM_JOB_NAME", script.job_name)   # typed in the user's shell
    return [
        "## 2. Go / no-go before the long run", "",
        "Run all four on the nodes the job will use. Any miss is a no-go: fix the cluster, or re-plan with the "
        "measured number (e.g. `--interconnect-gbps`).", "",
        "1. **GPU health** (every node, about 5 min):", "", "```bash",
        f"srun -N{alloc} --ntasks-per-node=1 dcgmi diag -r 2            # every test: Pass",
        f"srun -N{alloc} --ntasks-per-node=1 nvidia-smi --format=csv,noheader \\",
        "  --query-gpu=index,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.hw_slowdown",
        "                                                       # every GPU: 0, Not Active",
        f"srun -N{alloc} --ntasks-per-node=1 sh -c 'journalctl -k | grep -c \"NVRM: Xid\"'   # 0 on every node",
        "```", "",
        f"2. **Network** ([nccl-tests](https://github.com/NVIDIA/nccl-tests), {g['nccl_ranks']} ranks): all-reduce "
        f"bus bandwidth at 4 GiB at least **{g['nccl_busbw_floor_gbs']} GB/s** (the plan assumes "
        f"{g['nccl_busbw_assumed_gbs']:.0f}).", "", "```bash",
        f"srun -N{n} --ntasks-per-node={gpn} --gpus-per-node={gpn} ./build/all_reduce_perf -b 1G -e 4G -f 2 -g 1",
        "```", "",
        f"3. **Speed and memory** ({g['measured_steps'] + g['warmup_steps']} steps, about "
        f"{(g['measured_steps'] + g['warmup_steps']) * plan['chosen']['step_time_s'] / 60 + 10:.0f} min): mean "
        f"tokens/s/GPU over steps {g['warmup_steps'] + 1}-{g['warmup_steps'] + g['measured_steps']} at least "
        f"**{g['tokens_per_sec_per_gpu_floor']:,}**, no step over **{g['step_time_ceiling_s']:.1f} s**; on every rank "
        f"`torch.cuda.max_memory_reserved()` at most **{g['memory_reserved_ceiling_gib']:.1f} GiB** and "
        f"`max_memory_allocated()` at most **{g['memory_allocated_ceiling_gib']:.1f} GiB**.", "", "```bash",
        "# the checks write to their own checkpoint folder, never the real run's; at --max-steps train.py writes",
        "# DONE there (the run is complete), so the script does not requeue it",
        f'CKPT_DIR={s_ckpt}-check-speed EXTRA_ARGS="--max-steps {g["measured_steps"] + g["warmup_steps"]}" \\',
        "  sbatch --time=00:40:00 train.sbatch",
        "```", "",
        f"4. **Save-and-restore drill**: run past step {g['drill_lost_steps_ceiling'] + 5}, kill it, resubmit. It "
        f"must resume from its last checkpoint (at most **{g['drill_lost_steps_ceiling']} steps** redone), log the same "
        f"loss at the first step after the resume as the first run did there (3 significant digits), and log that "
        f"step within **{g['drill_restart_ceiling_s']} s** of starting (the restart and reload the lost-work bound "
        "counts). Then `touch` the stop file: it must save and exit within one step.", "", "```bash",
        f"export CKPT_DIR={s_ckpt}-check-drill EXTRA_ARGS=\"--max-steps 400\"   # sbatch passes both on",
        "JOB=$(sbatch --parsable train.sbatch)",
        f"# after step {g['drill_lost_steps_ceiling'] + 5} is logged:",
        'scancel --signal=KILL --full "$JOB"',
        "JOB=$(sbatch --parsable train.sbatch)   # resumes: check the step, loss and time",
        "# once it logs steps again: the warning path (save, exit 0, requeue); then end the drill",
        'touch "$CKPT_DIR/STOP.$JOB.0"; sleep 120; scancel "$JOB"; unset CKPT_DIR EXTRA_ARGS',
        "```", "",
    ]


def health_rows() -> list[str]:
    """GPU-health rows for the monitoring table (DCGM field names, dcgm-exporter)."""
    return [
        "| Xid errors (`DCGM_FI_DEV_XID_ERRORS`; kernel log `NVRM: Xid`) | none | any: drain the node at the next "
        "checkpoint (`scontrol update nodename=X state=drain reason=xid`) |",
        "| uncorrectable ECC (`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`), row-remap failure (`DCGM_FI_DEV_ROW_REMAP_FAILURE`) "
        "| 0 | any: drain the node |",
        "| throttling (`DCGM_FI_DEV_THERMAL_VIOLATION`, `DCGM_FI_DEV_POWER_VIOLATION`; nvidia-smi "
        "`clocks_throttle_reasons.hw_slowdown`) | not rising | rising on one GPU while its rank is the slowest |",
        "| GPU temperature (`DCGM_FI_DEV_GPU_TEMP`) | steady | 10 C above the node's other GPUs |",
    ]
