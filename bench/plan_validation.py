"""`tuner plan`'s numbers against published runs (the planner section of docs/validation.md).

    python bench/plan_validation.py

Rows, each read from the file named (permalinks in the table):
- MosaicML llm-foundry, scripts/train/benchmarking/README.md, table "H100 80GB BF16": MPT-13B,
  SeqLen 2048, FULL_SHARD, MicroBatchSize 2, GradAccum 1, no activation checkpointing, on 8, 16,
  32 and 64 GPUs (held out of helper's default calibration).
- torchtitan docs/performance.md (2024-12; now benchmarks/llama3_h100_202412_torchtitan.md),
  Table 4: Llama 3.1 70B, 256 H100 (FSDP 32, TP 8), local batch 16, seq 8192, full activation
  checkpointing, torch.compile + Float8: 829 TPS/GPU, 71.9 GiB.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helper import plan_training  # noqa: E402
from helper.calibration import resolve_constants  # noqa: E402
from helper.layouts import Layout, layout_memory, layout_step_time  # noqa: E402
from helper.presets import ModelArch  # noqa: E402
from helper.sizes import ModelShape, parse_model_size  # noqa: E402

COMMAND = "python bench/plan_validation.py"
MOSAIC = ("https://github.com/mosaicml/llm-foundry/blob/495218376830947dce625efabc4d86be7c47cc45/"
          "scripts/train/benchmarking/README.md")
TITAN = ("https://github.com/pytorch/torchtitan/blob/bf835b59d6897949ee5d1cb9ce7aa2b6dc84860c/"
         "docs/performance.md")
MPT13 = [(8, 2, False, 4792), (16, 2, False, 4767), (32, 2, False, 4811), (64, 2, False, 4800),  # MFU 39.6-40.0 %
         # table "H100 80GB BF16 (Large Scale, >= 128 GPUs)": MicroBatchSize 16, checkpointing True
         (128, 16, True, 5080), (256, 16, True, 4989), (512, 16, True, 4952)]
# Llama 3.1 70B's config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads, MLP 28672, vocab 128256
LLAMA31_70B = ModelShape(n_params=70.55e9, label="llama-3.1-70b", note="Llama 3.1 70B config.json",
                         arch=ModelArch(name="llama-3.1-70b", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
                                        intermediate=28672, vocab=128256, max_seq_len=8192))


def main() -> None:
    h100, source = resolve_constants(None, "H100-80GB")
    shape13 = parse_model_size(12853954560)
    print(f"# {COMMAND} (calibration: {source})\n")
    print("## MPT-13B, FSDP (FULL_SHARD), seq 2048, grad_accum 1 (llm-foundry)\n")
    print(f"Source: {MOSAIC}\n")
    print("| GPUs | micro-batch | act. ckpt | published tok/s/GPU | predicted | error | predicted MFU | memory GB/GPU |")
    print("|---|---|---|---|---|---|---|---|")
    for gpus, mb, ac, tps in MPT13:
        t = layout_step_time(shape13, Layout(dp_shard=gpus), constants=h100, micro_batch=mb, seq_len=2048,
                             activation_checkpointing=ac)
        m = layout_memory(shape13, Layout(dp_shard=gpus), micro_batch=mb, seq_len=2048, activation_checkpointing=ac)
        p = t["tokens_per_sec_per_gpu"]
        print(f"| {gpus} | {mb} | {ac} | {tps:,} | {p:,.0f} | {100 * (p / tps - 1):+.1f}% | {t['mfu']:.1%} | "
              f"{m['total']:.1f} |")

    plan = plan_training("13b", 32, gpu="H100-80GB", tokens=100e9)
    print("\n## `tuner plan --model-size 13b --gpus 32 --gpu H100-80GB --tokens 100e9`\n")
    print("| layout | fits | memory GiB/GPU | micro-batch | grad_accum | act. ckpt | tok/s/GPU | band | MFU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in plan["layouts"]:
        band = f"{r['band'][0]:,.0f}-{r['band'][1]:,.0f}" if r["band"] else "-"
        print(f"| {r['layout']}{' (chosen)' if r is plan['chosen'] else ''} | {'yes' if r['fits'] else 'no'} | "
              f"{r['memory_gib']['total']:.1f} | {r['micro_batch']} | {r['grad_accum']} | "
              f"{'on' if r['activation_checkpointing'] else 'off'} | "
              + (f"{r['tokens_per_sec_per_gpu']:,.0f} | {band} | {r['mfu']:.0%} |" if r["tokens_per_sec_per_gpu"]
                 else "- | - | - |"))
    print("\nWhy the others lose (the plan's own sentences):\n")
    for r in plan["layouts"]:
        if r["why_not"]:
            print(f"- {r['why_not']}")
    ck = plan["checkpoint"]
    print(f"\nCheckpoint: every {ck['interval_steps']} steps ({ck['interval_s'] / 60:.1f} min), worst case "
          f"{ck['worst_case_lost_s'] / 60:.1f} min; Young/Daly {ck['young_daly_interval_s'] / 60:.0f} min at "
          f"MTBF {ck['job_mtbf_hours']:,.0f} h")

    print("\n## Llama 3.1 70B, FSDP 32 x TP 8 on 256 H100 (torchtitan Table 4)\n")
    grand_teton = dataclasses.replace(resolve_gpu("H100-80GB"), memory_gb=96 * 2**30 / 1e9)
    lay = Layout(dp_shard=32, tp=8)
    t = layout_step_time(LLAMA31_70B, lay, constants=h100, gpu=grand_teton, micro_batch=16, seq_len=8192,
                         activation_checkpointing=True)
    m = layout_memory(LLAMA31_70B, lay, gpu=grand_teton, micro_batch=16, seq_len=8192, activation_checkpointing=True)
    print(f"Source: {TITAN}\n")
    print("| quantity | published | predicted (bf16 model) |")
    print("|---|---|---|")
    print(f"| tokens/s/GPU | 829 (Float8 + compile, 500 W) | {t['tokens_per_sec_per_gpu']:,.0f} |")
    print(f"| memory GiB/GPU | 71.9 | {m['total'] * 1e9 / 2**30:.1f} |")
    print(f"| TP share of the step | - | {t['tp_comm_s'] / t['step_time_s']:.0%} |")
    p70 = plan_training(LLAMA31_70B, 256, gpu=grand_teton, tokens=1e12, seq_len=8192, global_batch_tokens=512 * 8192)
    print("\nThe planner on the same job (tokens 1e12, global batch 512 x 8192):\n")
    for r in p70["layouts"]:
        perf = f"{r['tokens_per_sec_per_gpu']:,.0f} tok/s/GPU" if r["tokens_per_sec_per_gpu"] else "-"
        print(f"- {r['layout']}{' (chosen)' if r is p70['chosen'] else ''}: fits {r['fits']}, "
              f"{r['memory_gib']['total']:.1f} GiB, mb {r['micro_batch']}, AC {r['activation_checkpointing']}, {perf}")


def resolve_gpu(name: str):
    from helper import get_gpu
    return get_gpu(name)


if __name__ == "__main__":
    main()
