"""Published FSDP training throughputs: the default calibration's data and the validation set.

Every row is a figure someone published, with its URL and the table or sentence it comes from.
``role="calibration"`` rows (model sizes other than 7B/13B) are what
``bench/validate_model.py --write-default`` fits ``default_calibration.json`` to;
``role="validation"`` rows (7B- and 13B-class jobs) are held out and only compared against;
``role="reference"`` rows are end-to-end figures (failures, evaluation and checkpointing
included) shown for context. Fields are measurement dicts for ``fit_calibration`` plus
``ref``/``figure``/``note`` (and ``peak_mem_gib``/``memory_figure`` where the source
publishes a peak, ``memory_capacity_gb`` where its GPU's memory differs from helper's GPU),
``stack`` (the :mod:`helper.stacks` preset the publisher ran) and ``source`` (one published
table: the unit ``bench/validate_model.py`` leaves out of a fit to score it).
Data loading is pre-tokenised in all of them (``num_workers=8``,
``data_cost_s_per_example`` negligible); ``gpus_per_node=8`` (DGX/HGX nodes).
"""

from __future__ import annotations

import dataclasses

from helper.gpus import get_gpu, power_capped
from helper.presets import REFERENCE_ARCHS, get_preset
from helper.published_mosaic import MOSAIC_ROWS, MOSAIC_TABLE_NAMES, MOSAIC_TABLES
from helper.sizes import ModelShape

__all__ = ["PUBLISHED", "GRAND_TETON_H100", "MOSAIC", "MOSAIC_TABLES", "TORCHTITAN", "TORCHTITAN_H100", "FMS_FSDP", "LLAMA2"]

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

GRAND_TETON_H100 = dataclasses.replace(
    power_capped(get_gpu("H100-80GB"), watts=500, tdp_watts=700),
    memory_gb=96 * 2**30 / 1e9, hbm_gbs=2400.0,
    peak_rel_sd=(989e12 - 835e12) / 2 / 884e12,  # between the NVL's and the SXM's peak: +-8.7%
    source="torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Hardware: H100 with 96GB HBM2e "
           "at 2.4 TB/s, 400 Gb/s per GPU, default 500 W power limit (TDP 700 W); peak between "
           "NVL and SXM per its footnote 2; helper.gpus.power_capped gives 884 TFLOP/s")
"""The H100 of torchtitan's December 2024 benchmarks (Meta's Grand Teton), not the 700 W HBM3
80 GB part: it keeps the name ``H100-80GB`` so the H100's fitted constants apply to it."""


def _titan_2404(preset: str) -> ModelShape:
    """A preset as torchtitan's April 2024 train_configs build it: ``norm_type = "fused_rmsnorm"``
    (train_configs/llama2_13b.toml and llama3_8b.toml at 0413364), so no fp32 norm copies."""
    arch = dataclasses.replace(get_preset(preset), fused_norm=True)
    return ModelShape(n_params=float(arch.n_params), arch=arch, label=preset,
                      note=f"{preset} with torchtitan's fused RMSNorm")


LLAMA3_70B = ModelShape(
    n_params=float(dataclasses.replace(get_preset("llama-2-70b"), name="llama-3-70b", vocab=128256,
                                       max_seq_len=8192).n_params),
    arch=dataclasses.replace(get_preset("llama-2-70b"), name="llama-3-70b", vocab=128256, max_seq_len=8192),
    label="llama-3-70b", note="torchtitan llama3 70B flavor: Llama 2 70B's blocks, 128,256-token vocabulary")


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
            # Composer's FSDP (1) reduce-scatters every micro-batch (the llm-foundry stack's
            # accumulation), in bf16 (mixed_precision PURE): no unsharded accumulation buffer.
            "stack": "llm-foundry", "source": f"llm-foundry {heading}",
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
             "80 GB part: modelled as GRAND_TETON_H100 (peak 884 TFLOP/s by helper.gpus.power_capped, "
             "inside the footnote's 835-989 range; 2.4 TB/s HBM); torchtitan 9dec370's llama3_8b.toml "
             "uses the unfused rmsnorm (HF-like memory); selective AC is its op policy (the toml's "
             "selective_ac_option 'op'): helper's selective_op",
     "stack": "torchtitan", "source": "torchtitan llama3_h100_202412",
     "preset": "llama-3-8b", "gpu": GRAND_TETON_H100, "gpu_label": "H100-96GB (500 W)", "gpu_count": 8,
     "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "selective_op",
     "num_workers": 8, "tokens_per_sec_per_gpu": 5762,
     "peak_mem_gib": 82.4, "memory_figure": "Table 1, FSDP: Memory(GiB) 82.4 (96 GB H100)",
     "memory_capacity_gb": 96 * 2**30 / 1e9},
    {"role": "validation", "ref": TORCHTITAN_H100, "label": "Llama 3.1 8B (torchtitan)",
     "figure": "Table 3, 1D FSDP, Llama 3.1 8B, 128 GPUs, local batch 2, selective AC: FSDP 5,605 TPS/GPU",
     "note": "as above (500 W H100 modelled as GRAND_TETON_H100, op-level selective AC)",
     "stack": "torchtitan", "source": "torchtitan llama3_h100_202412",
     "preset": "llama-3-8b", "gpu": GRAND_TETON_H100, "gpu_label": "H100-96GB (500 W)", "gpu_count": 128,
     "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "selective_op",
     "num_workers": 8, "tokens_per_sec_per_gpu": 5605,
     "peak_mem_gib": 67.0, "memory_figure": "Table 3, FSDP: Memory(GiB) 67.0 (96 GB H100)",
     "memory_capacity_gb": 96 * 2**30 / 1e9},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 3 8B (torchtitan)",
     "figure": "Llama 3 performance numbers, FSDP2 on 64 A100 (80GB): 8B, batch 1, selective op AC: 2973 WPS",
     "note": "the table's selective op row (llama3_8b.toml at 0413364: selective_ac_option 'op', seq_len "
             "8192, fused_rmsnorm); until issue 13's follow-up this row was the table's selective layer "
             "figure (2904), whose every-n-layer period the source does not give",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "model_size": _titan_2404("llama-3-8b"), "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": "selective_op",
     "num_workers": 8, "tokens_per_sec_per_gpu": 2973},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 3 70B (torchtitan)",
     "figure": "Llama 3 performance numbers, FSDP2 on 64 A100 (80GB): 70B, batch 1, full AC: 331 WPS",
     "note": "llama3_70b.toml at 0413364: seq_len 8192, rmsnorm (unfused), mode 'full'",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "model_size": LLAMA3_70B, "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": "full",
     "num_workers": 8, "tokens_per_sec_per_gpu": 331},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 2 13B (torchtitan)",
     "figure": "Llama 2 performance numbers, FSDP2 on 64 A100 (80GB): 13B, batch 2, selective op AC: 1904 WPS",
     "note": "llama2_13b.toml at 0413364: seq_len 4096, fused_rmsnorm, selective_ac_option 'op'",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "model_size": _titan_2404("llama-2-13b"), "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "selective_op",
     "num_workers": 8, "tokens_per_sec_per_gpu": 1904},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 2 70B (torchtitan)",
     "figure": "Llama 2 performance numbers, FSDP2 on 64 A100 (80GB): 70B, batch 1, selective op AC: 355 WPS",
     "note": "llama2_70b.toml at 0413364: seq_len 4096, rmsnorm (unfused); batch 2 with selective AC "
             "ran out of memory (the table's footnote 1)",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "preset": "llama-2-70b", "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": "selective_op",
     "num_workers": 8, "tokens_per_sec_per_gpu": 355},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 2 70B (torchtitan)",
     "figure": "Llama 2 performance numbers, FSDP2 on 64 A100 (80GB): 70B, batch 2, full AC: 353 WPS",
     "note": "llama2_70b.toml at 0413364: seq_len 4096, rmsnorm (unfused), mode 'full'",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "preset": "llama-2-70b", "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": "full",
     "num_workers": 8, "tokens_per_sec_per_gpu": 353},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 2 13B (torchtitan)",
     "figure": "Llama 2 performance numbers, FSDP2 on 64 A100 (80GB): 13B, batch 2, no AC: 2162 WPS",
     "note": "torchtitan's train_configs/llama2_13b.toml at that commit: seq_len 4096, fused_rmsnorm, "
             "compile false (the table varies only batch and AC)",
     "stack": "torchtitan", "source": "torchtitan performance.md (A100)",
     "model_size": _titan_2404("llama-2-13b"), "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2162},
    {"role": "validation", "ref": FMS_FSDP, "label": "Llama 2 7B (IBM fms-fsdp)",
     "figure": "README table: 7b, 128 * A100, HSDP, activation checkpointing False, batch 2: 3760 token/gpu/sec",
     "note": "HSDP (sharded in a node, replicated across) modelled as zero3 over all GPUs; "
             "A100 80 GB assumed; seq 4096 (Llama 2)",
     "stack": "fms-fsdp", "source": "fms-fsdp README",
     "preset": "llama-2-7b", "gpu": "A100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 3760},
    {"role": "validation", "ref": FMS_FSDP, "label": "Llama 2 13B (IBM fms-fsdp)",
     "figure": "README table: 13b, 128 * A100, HSDP, activation checkpointing False, batch 1: 1700 token/gpu/sec",
     "note": "as above",
     "stack": "fms-fsdp", "source": "fms-fsdp README",
     "preset": "llama-2-13b", "gpu": "A100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 1700},
    # --- end-to-end references: GPU-hours of whole pre-training runs -------------------------
    {"role": "reference", "ref": LLAMA2, "label": "Llama 2 7B pre-training",
     "figure": "Table 2: 7B, 184,320 A100-80GB GPU-hours for 2.0T tokens -> 3,014 tokens/s/GPU",
     "note": "end to end (restarts, evaluation, checkpoints, 350-400 W power caps); GPU count "
             "and micro-batch not published (2,048 GPUs and micro-batch 1 assumed)",
     "source": "Llama 2 paper", "preset": "llama-2-7b", "gpu": "A100-80GB", "gpu_count": 2048, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2.0e12 / (184320 * 3600)},
    {"role": "reference", "ref": LLAMA2, "label": "Llama 2 13B pre-training",
     "figure": "Table 2: 13B, 368,640 A100-80GB GPU-hours for 2.0T tokens -> 1,507 tokens/s/GPU",
     "note": "as above",
     "source": "Llama 2 paper", "preset": "llama-2-13b", "gpu": "A100-80GB", "gpu_count": 2048, "gpus_per_node": 8,
     "seq_len": 4096, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 2.0e12 / (368640 * 3600)},
]
