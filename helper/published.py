"""Published FSDP training throughputs: the default calibration's data and the validation set.

Every row is a figure someone published, with its URL and the table or sentence it comes from.
``role="calibration"`` rows (model sizes other than 7B/13B) are what
``bench/validate_model.py --write-default`` fits ``default_calibration.json`` to;
``role="validation"`` rows (7B- and 13B-class jobs) are held out and only compared against;
``role="reference"`` rows are end-to-end figures (failures, evaluation and checkpointing
included) shown for context. Fields are measurement dicts for ``fit_calibration`` plus
``ref``/``figure``/``note`` (and ``peak_mem_gib``/``memory_figure`` where the source
publishes a peak, ``memory_capacity_gb`` where its GPU's memory differs from helper's GPU).
Data loading is pre-tokenised in all of them (``num_workers=8``,
``data_cost_s_per_example`` negligible); ``gpus_per_node=8`` (DGX/HGX nodes).
"""

from __future__ import annotations

import dataclasses

from helper.presets import REFERENCE_ARCHS
from helper.published_mosaic import MOSAIC_ROWS, MOSAIC_TABLE_NAMES, MOSAIC_TABLES
from helper.sizes import ModelShape

__all__ = ["PUBLISHED", "MOSAIC", "MOSAIC_TABLES", "TORCHTITAN", "TORCHTITAN_H100", "FMS_FSDP", "LLAMA2"]

# Permalinks to the versions read (tables move between versions).
MOSAIC = ("https://github.com/mosaicml/llm-foundry/blob/061f2c7ce64e655100286584a7629e2a09f827ba/"
          "scripts/train/benchmarking/README.md")
TORCHTITAN_H100 = ("https://github.com/pytorch/torchtitan/blob/31a17bfdb70bab6f62a13d21816a5339b911d6e3/"
                   "benchmarks/llama3_h100_202412_torchtitan.md")
TORCHTITAN = ("https://github.com/pytorch/torchtitan/blob/041336434916bdc0f88c1f89fda176fd3c2092e4/"
              "docs/performance.md")
FMS_FSDP = ("https://github.com/foundation-model-stack/fms-fsdp/blob/0d319983c4b3b7f7b3b5e2c5e7f746746b6f73a9/"
            "README.md")
LLAMA2 = "https://arxiv.org/abs/2307.09288"

def _mosaic_row(table: str, model: str, seq: int, gpus: int, mb: int, ga: int, ac: bool,
                sharding: str, tps: int, n_params: int) -> dict:
    heading, gpu = MOSAIC_TABLE_NAMES[table]
    arch = dataclasses.replace(REFERENCE_ARCHS[f"mpt-{model}"], max_seq_len=max(2048, seq))
    shape = ModelShape(n_params=float(n_params), arch=arch, label=f"mpt-{model}",
                       note=f"MPT-{model} (llm-foundry yaml shape), NumParams {n_params:,}")
    role = "validation" if model in _HELD_OUT else "calibration"
    return {"role": role, "ref": MOSAIC_TABLES, "label": f"MPT-{model}",
            "figure": f"table '{heading}': {model}, SeqLen {seq}, {gpus} GPUs, MicroBatchSize {mb}, "
                      f"GradAccum {ga}, Activation Checkpointing {ac}: {tps:,} T/s/GPU",
            "model_size": shape, "gpu": gpu, "gpu_count": gpus, "gpus_per_node": 8,
            "seq_len": seq, "micro_batch": mb, "grad_accum": ga, "activation_checkpointing": ac,
            "num_workers": 8, "sharding": sharding, "reshard_after_forward": sharding == "zero3",
            # Composer's FSDP (1) reduce-scatters every micro-batch: no unsharded accumulation.
            "reduce_scatter_every_micro_step": True,
            "tokens_per_sec_per_gpu": float(tps)}


_HELD_OUT = ("7b", "13b")
"""MPT sizes never fitted to: every 7B and 13B row is held out (with the Llama rows below)."""

PUBLISHED: list[dict] = [
    # --- MosaicML llm-foundry MPT: sizes other than 7B/13B calibrate, 7B/13B are held out ----
    *(_mosaic_row(*r) for r in MOSAIC_ROWS),
    # --- validation set (held out): 7B- and 13B-class jobs --------------------------------
    {"role": "validation", "ref": TORCHTITAN_H100, "label": "Llama 3.1 8B (torchtitan)",
     "figure": "Table 1, 1D FSDP, Llama 3.1 8B, 8 GPUs, local batch 2, selective AC: FSDP 5,762 TPS/GPU",
     "note": "H100 SXM with 96 GB HBM2e at a 500 W power limit (Grand Teton), not the 700 W "
             "80 GB part: its footnote puts the real peak between SXM (989) and NVL (835 TFLOP/s); "
             "selective (op) AC modelled as helper's selective mode",
     "preset": "llama-3-8b", "gpu": "H100-80GB", "gpu_count": 8, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "selective",
     "num_workers": 8, "tokens_per_sec_per_gpu": 5762,
     "peak_mem_gib": 82.4, "memory_figure": "Table 1, FSDP: Memory(GiB) 82.4 (96 GB H100)",
     "memory_capacity_gb": 96 * 2**30 / 1e9},
    {"role": "validation", "ref": TORCHTITAN_H100, "label": "Llama 3.1 8B (torchtitan)",
     "figure": "Table 3, 1D FSDP, Llama 3.1 8B, 128 GPUs, local batch 2, selective AC: FSDP 5,605 TPS/GPU",
     "note": "as above (500 W H100, selective AC)",
     "preset": "llama-3-8b", "gpu": "H100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "selective",
     "num_workers": 8, "tokens_per_sec_per_gpu": 5605,
     "peak_mem_gib": 67.0, "memory_figure": "Table 3, FSDP: Memory(GiB) 67.0 (96 GB H100)",
     "memory_capacity_gb": 96 * 2**30 / 1e9},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 3 8B (torchtitan)",
     "figure": "Llama 3 performance numbers, FSDP2 on 64 A100 (80GB): 8B, batch 1, selective layer AC: 2904 WPS",
     "preset": "llama-3-8b", "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": "selective",
     "num_workers": 8, "tokens_per_sec_per_gpu": 2904},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 2 13B (torchtitan)",
     "figure": "Llama 2 performance numbers, FSDP2 on 64 A100 (80GB): 13B, batch 2, no AC: 2162 WPS",
     "preset": "llama-2-13b", "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2162},
    {"role": "validation", "ref": FMS_FSDP, "label": "Llama 2 7B (IBM fms-fsdp)",
     "figure": "README table: 7b, 128 * A100, HSDP, activation checkpointing False, batch 2: 3760 token/gpu/sec",
     "note": "HSDP (sharded in a node, replicated across) modelled as zero3 over all GPUs; "
             "A100 80 GB assumed; seq 4096 (Llama 2)",
     "preset": "llama-2-7b", "gpu": "A100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 3760},
    {"role": "validation", "ref": FMS_FSDP, "label": "Llama 2 13B (IBM fms-fsdp)",
     "figure": "README table: 13b, 128 * A100, HSDP, activation checkpointing False, batch 1: 1700 token/gpu/sec",
     "note": "as above",
     "preset": "llama-2-13b", "gpu": "A100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 1700},
    # --- end-to-end references: GPU-hours of whole pre-training runs -------------------------
    {"role": "reference", "ref": LLAMA2, "label": "Llama 2 7B pre-training",
     "figure": "Table 2: 7B, 184,320 A100-80GB GPU-hours for 2.0T tokens -> 3,014 tokens/s/GPU",
     "note": "end to end (restarts, evaluation, checkpoints, 350-400 W power caps); GPU count "
             "and micro-batch not published (2,048 GPUs and micro-batch 1 assumed)",
     "preset": "llama-2-7b", "gpu": "A100-80GB", "gpu_count": 2048, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2.0e12 / (184320 * 3600)},
    {"role": "reference", "ref": LLAMA2, "label": "Llama 2 13B pre-training",
     "figure": "Table 2: 13B, 368,640 A100-80GB GPU-hours for 2.0T tokens -> 1,507 tokens/s/GPU",
     "note": "as above",
     "preset": "llama-2-13b", "gpu": "A100-80GB", "gpu_count": 2048, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2.0e12 / (368640 * 3600)},
]
