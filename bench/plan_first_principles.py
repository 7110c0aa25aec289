"""`tuner plan` against first-principles arithmetic: memory per GPU, step time, lost work.

    python bench/plan_first_principles.py          # the table (markdown)

For each case the plan picks a layout and batch; this script recomputes, by its own arithmetic
and from cited sources only (it calls no helper function; it reads the model's architecture, a
table of numbers, and the plan's choices and the batch script it writes):

- **memory per GPU**: 16 B per parameter for mixed-precision Adam (Rajbhandari et al. 2020,
  ZeRO, Sec. 3.1: 2 + 2 + 12 B), sharded over the GPUs that shard it, all of it live under gradient
  accumulation; activations counted the way Korthikanti et al. 2022 (arXiv 2205.05198, Sec. 4.1)
  count them, for the Hugging Face Llama block (flash attention keeps no s x s matrix); full
  recomputation keeps 2 s b h bytes per layer (their Sec. 4.2) plus one layer recomputed; the
  logits at the loss; FSDP's gathered blocks (the current one and the prefetched next in bf16, one
  block's fp32 gradient, the root); 1 GB of CUDA context and NCCL buffers.
- **step time**: executed FLOPs (6 N per token, attention 6 L h s for causal flash attention,
  8 N and 8 L h s with full recomputation: Kaplan et al. 2020; Chowdhery et al. 2022, App. B) at
  the hardware FLOPs utilisation MosaicML published for the nearest-sized MPT on H100 at seq
  2048 (llm-foundry benchmarks, the figures helper.published holds); plus communication the
  compute cannot hide (ring collectives move ``(n-1)/n`` of the buffer; NCCL reaches ~80 % of the
  node's NIC or NVLink bandwidth, an assumption the go/no-go nccl-tests check measures); plus
  the optimizer (28 B per local parameter at HBM bandwidth, datasheet) and a 1F1B bubble.
- **lost work**: interval (the script's ``--checkpoint-every`` x this step time) + the in-flight
  write (12 B per parameter over 2 GB/s per node) + detection (the script's collective timeout +
  torchrun's 30 s, or Slurm's 300 s SlurmdTimeout, slurm.conf(5)) + restart (the plan's 10-minute
  requeue allowance without a spare node, plus 60 s to the first step: an assumption) + reload,
  all times 1.2 (the plan's stated margin).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helper import plan_training  # noqa: E402  (the plan under check)
from helper.sizes import parse_model_size  # noqa: E402  (the architecture table only)
from tuner.plan import batch_script, plan_batch_script  # noqa: E402

COMMAND = "python bench/plan_first_principles.py"
CASES = (("13b", 32, 100e9), ("7b", 8, 20e9), ("70b", 64, 200e9), ("175b", 256, 300e9), ("1.3b", 4, 26e9))
"""(model, H100 GPUs, tokens): the five cases of issue 31."""

PEAK_FLOPS = 989e12  # H100 SXM dense BF16 (NVIDIA H100 datasheet: 1,979 TFLOPS with sparsity)
HBM_BYTES_S = 3.35e12  # H100 SXM HBM3 (datasheet)
NVLINK_BYTES_S = 450e9  # per GPU per direction (datasheet: 900 GB/s total)
NIC_BYTES_S = 50e9  # one 400 Gb/s ConnectX-7 per GPU (DGX H100 user guide)
NCCL_SHARE = 0.80  # of nominal link bandwidth a large collective reaches: an assumption, measured at go/no-go
CONTEXT_GB = 1.0  # CUDA context, cuBLAS workspaces, NCCL buffers: an allowance
LOGIT_BYTES = 12.0  # HF Llama at the loss: bf16 logits (2) + fp32 upcast (4) + fp32 log-softmax (4) + bf16 grad (2)

# MosaicML llm-foundry H100 BF16 table, seq 2048, fewest GPUs (commit 8c8dd48f):
# (NumParams, layers, d_model, GPUs, tokens/s/GPU, activation checkpointing)
MPT_H100 = {1.3e9: (1315950592, 24, 2048, 8, 45455, False), 6.7e9: (6658859008, 32, 4096, 8, 10643, False),
            12.9e9: (12853954560, 40, 5120, 8, 4792, False), 64.9e9: (64862437376, 80, 8192, 64, 1039, True)}


def executed_flops_per_token(n_matmul: float, layers: int, hidden: int, seq: int, recompute: bool) -> float:
    """6 N + 6 L h s (causal flash attention does half of PaLM's 12 L h s), x 4/3 with full recomputation."""
    f = 6 * n_matmul + 6 * layers * hidden * seq
    return f * 4 / 3 if recompute else f


def hardware_utilisation(n_params: float) -> float:
    """Executed FLOP/s over peak of the nearest-sized published MPT run on H100 (MPT ties its head: N is matmul)."""
    n, layers, hidden, _, tps, ac = MPT_H100[min(MPT_H100, key=lambda k: abs(k - n_params) / k)]
    return tps * executed_flops_per_token(n, layers, hidden, 2048, ac) / PEAK_FLOPS


def layer_activation_bytes_per_token(h: int, i: int) -> float:
    """HF Llama block, Korthikanti's method: two RMSNorms keep an fp32 upcast input (4 h) and a bf16 normalised
    copy (2 h) each; attention keeps its bf16 input (2 h), q, k, v (6 h), the flash output (2 h) and its copy into
    o_proj (2 h); SwiGLU keeps its input (2 h), gate, up, silu(gate) and their product (8 i)."""
    return 2 * (4 * h + 2 * h) + (2 * h + 6 * h + 2 * h + 2 * h) + (2 * h + 8 * i)


def memory_gb(plan: dict, shape) -> float:
    c, a = plan["chosen"], shape.arch
    n, L, h, seq = shape.n_params, a.n_layers, a.hidden, plan["inputs"]["seq_len"]
    t, p, mb, ga = c["tp"], c["pp"], c["micro_batch"], c["grad_accum"]
    shards = c["dp_shard"] * t * p
    states = 16 * n / shards  # all live under accumulation (ga > 1 in every case)
    tokens = mb * seq
    per_layer = tokens * layer_activation_bytes_per_token(h, a.intermediate)
    logits = tokens * a.vocab * LOGIT_BYTES
    if c["activation_checkpointing"]:
        kept = 2 * tokens * h * L / p * min(p, ga)  # block inputs of the micro-batches in flight
        act = kept + (per_layer if p > 1 else max(per_layer, logits))
    else:
        act = per_layer * L / p * min(p, ga) + (0 if p > 1 else logits)
    root = 2 * a.vocab * h
    block = (n - root) / L
    gathered = (2 * 2 * block + 4 * block + 2 * root / (2 if p > 1 else 1)) if c["dp_shard"] > 1 else 0.0
    return (states + act / t + gathered / t) / 1e9 + CONTEXT_GB


def ring_s(nbytes: float, ranks: int, nodes: int, per_node: int, all_reduce: bool = False) -> float:
    if ranks <= 1:
        return 0.0
    link = NVLINK_BYTES_S if nodes <= 1 else min(NVLINK_BYTES_S, per_node * NIC_BYTES_S)
    return (2 if all_reduce else 1) * nbytes * (ranks - 1) / ranks / (link * NCCL_SHARE)


def step_s(plan: dict, shape) -> float:
    c, a, i = plan["chosen"], shape.arch, plan["inputs"]
    n, L, h, seq = shape.n_params, a.n_layers, a.hidden, i["seq_len"]
    t, p, mb, ga = c["tp"], c["pp"], c["micro_batch"], c["grad_accum"]
    n_matmul = n - a.vocab * h  # the input embedding is a lookup
    tokens_per_gpu = mb * seq * ga / (t * p)
    flops = executed_flops_per_token(n_matmul, L, h, seq, c["activation_checkpointing"]) * tokens_per_gpu
    compute = flops / (PEAK_FLOPS * hardware_utilisation(n))
    nodes, gpn = i["nodes"], i["gpus_per_node"]
    shard_nodes = 1 if c["dp_replicate"] > 1 or c["dp_shard"] * t <= gpn else nodes
    per_mb = (2 * ring_s(2 * n / (t * p), c["dp_shard"], shard_nodes, gpn) + ring_s(4 * n / (t * p), c["dp_shard"],
                                                                                    shard_nodes, gpn))
    comm = ga * per_mb
    if c["dp_replicate"] > 1:  # HSDP: one all-reduce of the fp32 shard across nodes per step
        comm += ring_s(4 * n / c["dp_shard"], c["dp_replicate"], c["dp_replicate"], 1, all_reduce=True)
    if t > 1:  # 4 all-reduces of b s h per layer (6 with recomputation), on the critical path
        comm_tp = ga * L / p * (6 if c["activation_checkpointing"] else 4) * ring_s(mb * seq * h * 2, t, 1, t, True)
    else:
        comm_tp = 0.0
    exposed = max(0.0, comm - compute) + comm_tp
    optimizer = 28 * n / (c["dp_shard"] * t * p) / HBM_BYTES_S
    work = compute + exposed
    bubble = work * (p - 1) / ga if p > 1 else 0.0  # 1F1B: (p - 1) / m of the work (Narayanan et al. 2021)
    return work + bubble + optimizer


def lost_work_min(plan: dict, step: float) -> float:
    i = plan["inputs"]
    script = batch_script(plan_batch_script(plan))
    every = int(re.search(r"--checkpoint-every (\d+)", script).group(1))
    timeout = int(re.search(r"--collective-timeout-s (\d+)", script).group(1))
    spare = "--no-kill" in script
    write = 12 * i["n_params"] / i["nodes"] / 2e9
    detection = max(timeout + 30, 300)
    restart = 60 + (0 if spare else 600)
    return 1.2 * (every * step + write + detection + restart + write) / 60


def check(model: str, gpus: int, tokens: float) -> dict:
    """Plan vs first principles for one case: {part: (plan, first principles)}."""
    plan = plan_training(model, gpus, tokens=tokens)
    shape = parse_model_size(model)
    c = plan["chosen"]
    step = step_s(plan, shape)
    return {"case": f"{model} on {gpus} H100 ({c['layout']}, mb {c['micro_batch']} x ga {c['grad_accum']}, "
                     f"AC {'on' if c['activation_checkpointing'] else 'off'})",
            "memory per GPU, GB": (c["memory_gib"]["total"] * 2**30 / 1e9, memory_gb(plan, shape)),
            "step time, s": (c["step_time_s"], step),
            "lost work, min": (plan["checkpoint"]["worst_case_lost_s"] / 60, lost_work_min(plan, step))}


def main() -> int:
    print(f"Command: {COMMAND}\n\n| case | part | plan | first principles | difference |\n|---|---|---:|---:|---:|")
    worst = 0.0
    for case in CASES:
        row = check(*case)
        for part, (planned, fp) in ((k, v) for k, v in row.items() if k != "case"):
            diff = planned / fp - 1
            worst = max(worst, abs(diff))
            print(f"| {row['case']} | {part} | {planned:,.1f} | {fp:,.1f} | {diff:+.1%} |")
    print(f"\nworst |difference| {worst:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
