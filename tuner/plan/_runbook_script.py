"""The runbook's Slurm batch script: a multi-day job that runs unattended across allocations.

Slurm does not requeue a job that reaches its time limit, and a signal without ``B:`` goes to
the job step (torchrun, which does not catch SIGUSR1, and dies without a checkpoint). So:

- ``--signal=B:USR1@<warning>`` sends the warning to this batch shell. Its trap writes the stop
  file; the training script checks it every step (rank 0 reads it and broadcasts), saves a
  checkpoint and exits 0 (it writes ``$CKPT_DIR/DONE`` once the run is complete); the shell then
  ``scontrol requeue``s the job, which starts again from
  that checkpoint in the next allocation (``--resume latest``). If the step has not ended 30 s
  before the limit, the shell stops it and requeues anyway (the last periodic checkpoint stays).
- A failed step (a dead rank, a collective timeout) ends the step (torchrun
  ``--max-restarts=0``: a restart inside torchrun's fixed ``--nnodes`` waits on a dead node); the
  shell relaunches it, on the spare node when the job holds one (``--no-kill`` keeps the
  allocation when a node dies; ``srun --nodes`` picks healthy ones), up to ``max_relaunches``
  times, then requeues for fresh nodes.
- ``--requeue`` lets Slurm requeue the job itself on a node failure; ``SLURM_RESTART_COUNT``
  caps the allocations.
- Slurm sends the warning signal from its periodic check, so it can arrive up to ~30 s (22.05's
  ``PERIODIC_TIMEOUT``; the sbatch manual says up to 60 s) before ``warning_s``: with a short
  limit, right at the allocation's start. The trap is therefore the script's first command, and a
  warning that comes before the step starts still stops it at its first step.

:func:`batch_script` renders a :class:`BatchScript`; :func:`plan_batch_script` fills one from a
plan. tests/plan/test_runbook_script.py runs the rendered script on a real local Slurm with a
one-minute limit: three allocations, each continuing from the last one's checkpoint.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any

from tuner.knobs import ENV_DEFAULT, KNOBS, LAUNCH_KNOBS

__all__ = ["BatchScript", "batch_script", "plan_batch_script", "DEFAULT_TIME_LIMIT_HOURS", "STOP_GRACE_S"]

DEFAULT_TIME_LIMIT_HOURS = 48
"""Per-allocation limit: a common partition ``MaxTime``; pass your partition's (``sinfo -o %l``)."""
STOP_GRACE_S = 30
"""Seconds before the limit at which a step that has not stopped on the warning is killed."""


@dataclass(frozen=True, kw_only=True)
class BatchScript:
    """Everything the batch script says, as data."""

    job_name: str
    """Slurm job name (letters, digits, ``-``, ``_``, ``.``)."""
    nodes: int
    """Nodes the training step runs on."""
    gpus_per_node: int
    """Processes (GPUs) per node: ``nodes x gpus_per_node`` is the world size planned."""
    spare_nodes: int = 0
    """Extra idle nodes held in the allocation for a relaunch after a node failure."""
    time_limit_minutes: int
    """``--time`` of one allocation."""
    warning_s: int
    """Seconds before the limit that Slurm signals the batch shell (``--signal=B:USR1@...``)."""
    max_allocations: int
    """Allocations (requeues + 1) after which the job stops requeueing itself."""
    max_relaunches: int = 3
    """Failed steps relaunched inside one allocation before it requeues."""
    stop_grace_s: int = STOP_GRACE_S
    """Seconds before the limit at which a step that has not stopped on the warning is killed."""
    gres: bool = True
    """Request GPUs (``--gpus-per-node``); False on a CPU-only cluster."""
    exclusive: bool = True
    """Whole nodes (no other job shares their NVLink and NICs)."""
    ckpt_dir: str = "/shared/checkpoints/$SLURM_JOB_NAME"
    """Checkpoint folder on shared storage; the stop file lives there too."""
    env: tuple[str, ...] = ()
    """``export`` / ``unset`` lines, with comments."""
    launcher: tuple[str, ...] = ("torchrun",)
    """How torchrun is invoked (``python -m torch.distributed.run`` works too)."""
    entry: tuple[str, ...]
    """The training command after torchrun's flags: script and arguments (``$STOP_FILE`` and
    ``$CKPT_DIR`` are expanded by the shell)."""

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.job_name):
            raise ValueError(f"job_name {self.job_name!r}: use letters, digits, '-', '_' or '.'")
        for name in ("nodes", "gpus_per_node", "time_limit_minutes", "warning_s", "max_allocations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.stop_grace_s < 1:
            raise ValueError(f"stop_grace_s must be >= 1, got {self.stop_grace_s}")
        if self.warning_s <= self.stop_grace_s or self.warning_s >= self.time_limit_minutes * 60:
            raise ValueError(f"warning_s {self.warning_s} must lie between stop_grace_s ({self.stop_grace_s} s) and the "
                             f"{self.time_limit_minutes} min limit")


def _hms(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def batch_script(s: BatchScript) -> str:
    """The sbatch script text."""
    allocated = s.nodes + s.spare_nodes
    launch = " ".join(shlex.quote(a) for a in s.launcher)
    entry = " ".join(a if a.startswith("$") or a.startswith('"$') else shlex.quote(a) for a in s.entry)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={s.job_name}",
        f"#SBATCH --nodes={allocated}" + (f"   # {s.nodes} training + {s.spare_nodes} spare" if s.spare_nodes else ""),
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gpus-per-node={s.gpus_per_node}"] if s.gres else []),
        *(["#SBATCH --exclusive"] if s.exclusive else []),
        f"#SBATCH --time={_hms(s.time_limit_minutes)}   # one allocation; the job continues in the next",
        f"#SBATCH --signal=B:USR1@{s.warning_s}   # B: the batch shell gets the warning, not torchrun",
        "#SBATCH --requeue                  # Slurm may requeue it (node failure); the trap requeues at the limit",
        "#SBATCH --open-mode=append         # one log across allocations",
        "#SBATCH --output=%x-%j.out",
        *(["#SBATCH --no-kill                  # a dead node leaves the allocation; the spare takes over"]
          if s.spare_nodes else []),
        "stopping=0; step_pid=",
        "on_warning() {   # Slurm's warning: checkpoint, stop, requeue (set first: it may come at once)",
        '  echo "$(date -Is) allocation ${ALLOCATION:-?}: time limit near, asking training to checkpoint and stop"',
        '  stopping=1; [ -n "${STOP_FILE:-}" ] && touch "$STOP_FILE"',
        f'  [ -n "$step_pid" ] && ( sleep {s.warning_s - s.stop_grace_s}; kill -TERM "$step_pid" 2>/dev/null ) &',
        "}",
        "trap on_warning USR1",
        "set -uo pipefail   # no -e: this shell must outlive a failed step to relaunch or requeue",
        f"export CKPT_DIR=${{CKPT_DIR:-{s.ckpt_dir}}}   # shared storage, never node-local disk; the checks set their own",
        'mkdir -p "$CKPT_DIR"',
        f"TRAIN_NODES={s.nodes}",
        f"MAX_ALLOCATIONS={s.max_allocations}",
        f"MAX_RELAUNCHES={s.max_relaunches}",
        "ALLOCATION=${SLURM_RESTART_COUNT:-0}",
        'export STOP_FILE="$CKPT_DIR/STOP.$SLURM_JOB_ID.$ALLOCATION"   # written by the trap, read by train.py',
        'rm -f "$STOP_FILE"; [ "$stopping" = 1 ] && touch "$STOP_FILE"   # a warning before this line still counts',
        *s.env,
        "",
        "requeue() {",
        '  if [ "$ALLOCATION" -ge $((MAX_ALLOCATIONS - 1)) ]; then',
        '    echo "$(date -Is) $MAX_ALLOCATIONS allocations used: not requeueing (raise MAX_ALLOCATIONS to go on)"; exit 1',
        "  fi",
        '  echo "$(date -Is) allocation $ALLOCATION: requeueing; the next allocation resumes from the last checkpoint"',
        '  scontrol requeue "$SLURM_JOB_ID"; exit 0   # Slurm holds a requeued job ~2 min before it starts again',
        "}",
        "",
        "relaunch=0",
        "while :; do",
        "  head=$(hostname)   # this node hosts the rendezvous and is always in the step",
        "  srun --nodes=$TRAIN_NODES --ntasks=$TRAIN_NODES --ntasks-per-node=1 --nodelist=\"$SLURMD_NODENAME\" \\",
        "       --cpus-per-task=\"$SLURM_CPUS_ON_NODE\" --kill-on-bad-exit=1"
        + (f" --gpus-per-node={s.gpus_per_node}" if s.gres else "") + " \\",
        f"    {launch} --nnodes=$TRAIN_NODES --nproc-per-node={s.gpus_per_node} \\",
        "      --rdzv-backend=c10d --rdzv-endpoint=$head:$((29500 + (ALLOCATION * 10 + relaunch) % 500)) \\",
        "      --rdzv-id=$SLURM_JOB_ID-$ALLOCATION-$relaunch --max-restarts=0 \\",
        f"      {entry} ${{EXTRA_ARGS:-}} &   # EXTRA_ARGS: e.g. --max-steps 60 for the go/no-go run",
        "  step_pid=$!",
        '  while :; do wait "$step_pid"; rc=$?; kill -0 "$step_pid" 2>/dev/null || break; done   # a trap interrupts wait',
        '  if [ -e "$CKPT_DIR/DONE" ]; then echo "$(date -Is) training finished"; rm -f "$STOP_FILE"; exit 0; fi',
        '  [ "$stopping" = 1 ] && requeue',
        '  [ "$rc" = 0 ] && { echo "$(date -Is) step ended without DONE: requeueing"; requeue; }',
        "  relaunch=$((relaunch + 1))",
        '  [ "$relaunch" -gt "$MAX_RELAUNCHES" ] && requeue',
        '  echo "$(date -Is) step failed (exit $rc): relaunch $relaunch of $MAX_RELAUNCHES from the last checkpoint"',
        "  sleep 10",
        "done",
    ]
    return "\n".join(lines) + "\n"


def plan_batch_script(plan: dict[str, Any], tuning: dict[str, Any] | None = None, *,
                      time_limit_hours: float = DEFAULT_TIME_LIMIT_HOURS) -> BatchScript:
    """The :class:`BatchScript` for a ``helper.plan_training`` result: its nodes, timeouts, checkpoints, knobs."""
    i, c, ck = plan["inputs"], plan["chosen"], plan["checkpoint"]
    params = (tuning or {}).get("params", {})
    env = []
    for k in LAUNCH_KNOBS:
        v = params.get(k, ENV_DEFAULT)
        env.append(f"export {KNOBS[k].env_var}={v}" if v != ENV_DEFAULT else f"unset {KNOBS[k].env_var}   # leave it to NCCL")
    env += ["export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # a failed or timed-out collective ends the process",
            "export NCCL_DEBUG=WARN",
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # less fragmentation"]
    workers = params.get("num_workers", 8)
    prefetch = params.get("prefetch_factor", 2)
    knobs = [a for k, v in c["workload_knobs"].items() for a in (f"--{k.replace('_', '-')}", str(v))]
    limit_min = int(min(time_limit_hours * 60, max(60, math.ceil(c["wall_hours"] * 60 * 1.1) + 30)))
    # the final save must finish before the limit: three background writes' time, at least 2 minutes
    warning_s = int(60 * math.ceil(max(120.0, 3 * ck["write_s"] + ck["teardown_s"] + ck["stall_s"]) / 60))
    usable_h = (limit_min * 60 - warning_s - ck["startup_s"] - ck["reload_s"]) / 3600
    needed = math.ceil(c["wall_hours"] / max(usable_h, 1e-3))
    entry = ("train.py", "--layout", c["layout"], *knobs, "--seq-len", str(i["seq_len"]),
             "--micro-batch", str(c["micro_batch"]), "--grad-accum", str(c["grad_accum"]),
             "--activation-checkpointing", str(c["activation_checkpointing"]).lower(),
             "--num-workers", str(workers), "--prefetch-factor", str(prefetch),
             "--init-timeout-s", str(int(ck["init_timeout_s"])),
             "--collective-timeout-s", str(int(ck["collective_timeout_s"])),
             "--checkpoint-dir", '"$CKPT_DIR"', "--checkpoint-every", str(ck["interval_steps"]),
             "--checkpoint-keep", str(ck["keep"]), "--async-checkpoint", "--resume", "latest",
             "--stop-file", '"$STOP_FILE"')
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"train-{i['model']}").strip("-")
    return BatchScript(job_name=name, nodes=i["nodes"], gpus_per_node=i["gpus_per_node"],
                       spare_nodes=ck["spare_nodes"], time_limit_minutes=limit_min, warning_s=warning_s,
                       max_allocations=needed + max(2, math.ceil(0.5 * needed)), env=tuple(env), entry=entry)
