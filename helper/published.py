"""Published FSDP training throughputs: the default calibration's data and the validation set.

Every row is a figure someone published, with its URL and the table or sentence it comes from.
``role="calibration"`` rows (model sizes other than 7B/13B) are what
``bench/validate_model.py --write-default`` fits ``default_calibration.json`` to;
``role="validation"`` rows (7B- and 13B-class jobs) are held out and only compared against;
``role="reference"`` rows are end-to-end figures (failures, evaluation and checkpointing
included) shown for context. Fields are measurement dicts for ``fit_calibration`` plus
``ref``/``figure``/``note``. Data loading is pre-tokenised in all of them (``num_workers=8``,
``data_cost_s_per_example`` negligible); ``gpus_per_node=8`` (DGX/HGX nodes).
"""

from __future__ import annotations

__all__ = ["PUBLISHED", "MOSAIC", "TORCHTITAN", "TORCHTITAN_H100", "FMS_FSDP", "LLAMA2"]

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

_MOSAIC_COMMON = {"gpus_per_node": 8, "seq_len": 2048, "num_workers": 8, "sharding": "zero3"}


def _mosaic(role: str, table: str, name: str, gpu: str, n_params: int, gpus: int, mb: int,
            ga: int, ac: bool, tps: float) -> dict:
    return {**_MOSAIC_COMMON, "role": role, "ref": MOSAIC, "label": f"MPT-{name}",
            "figure": f"table '{table}': {name}, SeqLen 2048, {gpus} GPUs, MicroBatchSize {mb}, "
                      f"GradAccum {ga}, Activation Checkpointing {ac}: {tps:,.0f} T/s/GPU",
            "model_size": n_params, "gpu": gpu, "gpu_count": gpus, "micro_batch": mb,
            "grad_accum": ga, "activation_checkpointing": ac, "tokens_per_sec_per_gpu": tps}


_H100 = "H100 80GB BF16"
_A80 = "A100 80GB with 1600 Gbps node-node interconnect (RoCE)"
_A40 = "A100 40GB with 1600 Gbps node-node interconnect (RoCE)"

PUBLISHED: list[dict] = [
    # --- calibration set: MosaicML llm-foundry MPT benchmarks, sizes other than 7B/13B ----
    _mosaic("calibration", _H100, "1b", "H100-80GB", 1315950592, 8, 14, 1, False, 45455),
    _mosaic("calibration", _H100, "1b", "H100-80GB", 1315950592, 64, 20, 1, False, 44402),
    _mosaic("calibration", _H100, "3b", "H100-80GB", 2651837440, 16, 10, 3, False, 24142),
    _mosaic("calibration", _H100, "3b", "H100-80GB", 2651837440, 32, 6, 3, False, 23021),
    _mosaic("calibration", _H100, "30b", "H100-80GB", 29975214080, 8, 3, 21, True, 2002),
    _mosaic("calibration", _H100, "30b", "H100-80GB", 29975214080, 32, 14, 3, True, 2308),
    _mosaic("calibration", _H100, "70b", "H100-80GB", 64862437376, 32, 2, 16, True, 882),
    _mosaic("calibration", _H100, "70b", "H100-80GB", 64862437376, 64, 8, 4, True, 1039),
    _mosaic("calibration", _A80, "1b", "A100-80GB", 1315950592, 8, 14, 4, False, 20513),
    _mosaic("calibration", _A80, "3b", "A100-80GB", 2651837440, 8, 10, 2, False, 10811),
    _mosaic("calibration", _A80, "30b", "A100-80GB", 29975214080, 8, 3, 21, True, 916),
    _mosaic("calibration", _A80, "70b", "A100-80GB", 64862437376, 32, 2, 16, True, 373),
    _mosaic("calibration", _A80, "70b", "A100-80GB", 64862437376, 64, 8, 4, True, 410),
    _mosaic("calibration", _A40, "3b", "A100-40GB", 2651837440, 64, 6, 1, False, 9736),
    _mosaic("calibration", _A40, "30b", "A100-40GB", 29975214080, 32, 4, 1, True, 857),
    _mosaic("calibration", _A40, "70b", "A100-40GB", 64862437376, 128, 4, 1, True, 376),
    # --- validation set (held out): 7B- and 13B-class jobs --------------------------------
    _mosaic("validation", _H100, "7b", "H100-80GB", 6658859008, 8, 6, 1, False, 10643),
    _mosaic("validation", _H100, "13b", "H100-80GB", 12853954560, 8, 2, 1, False, 4792),
    _mosaic("validation", _H100, "13b", "H100-80GB", 12853954560, 32, 2, 1, False, 4811),
    _mosaic("validation", _A80, "7b", "A100-80GB", 6658859008, 8, 6, 2, False, 4641),
    _mosaic("validation", _A80, "13b", "A100-80GB", 12853954560, 8, 2, 3, False, 2262),
    _mosaic("validation", _A40, "7b", "A100-40GB", 6658859008, 32, 18, 1, True, 3725),
    _mosaic("validation", _A40, "13b", "A100-40GB", 12853954560, 32, 14, 1, True, 1998),
    {"role": "validation", "ref": TORCHTITAN_H100, "label": "Llama 3.1 8B (torchtitan)",
     "figure": "Table 1, 1D FSDP, Llama 3.1 8B, 8 GPUs, local batch 2, selective AC: FSDP 5,762 TPS/GPU",
     "note": "H100 SXM with 96 GB HBM2e at a 500 W power limit (Grand Teton), not the 700 W "
             "80 GB part: its footnote puts the real peak between SXM (989) and NVL (835 TFLOP/s); "
             "selective AC recomputes little and is modelled as no checkpointing",
     "preset": "llama-3-8b", "gpu": "H100-80GB", "gpu_count": 8, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 5762},
    {"role": "validation", "ref": TORCHTITAN_H100, "label": "Llama 3.1 8B (torchtitan)",
     "figure": "Table 3, 1D FSDP, Llama 3.1 8B, 128 GPUs, local batch 2, selective AC: FSDP 5,605 TPS/GPU",
     "note": "as above (500 W H100, selective AC)",
     "preset": "llama-3-8b", "gpu": "H100-80GB", "gpu_count": 128, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 2, "grad_accum": 1, "activation_checkpointing": False,
     "num_workers": 8, "tokens_per_sec_per_gpu": 5605},
    {"role": "validation", "ref": TORCHTITAN, "label": "Llama 3 8B (torchtitan)",
     "figure": "Llama 3 performance numbers, FSDP2 on 64 A100 (80GB): 8B, batch 1, selective layer AC: 2904 WPS",
     "preset": "llama-3-8b", "gpu": "A100-80GB", "gpu_count": 64, "gpus_per_node": 8,
     "seq_len": 8192, "micro_batch": 1, "grad_accum": 1, "activation_checkpointing": False,
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
