"""tuner's helper: a calibrated performance model of FSDP fine-tuning, and ``suggest_config``.

Pure numpy/scipy: importing it never imports torch, optuna or transformers.

Example:
    >>> from helper import suggest_config, estimate_memory, predict_throughput
    >>> round(estimate_memory("13b", 8, sharding="zero2")["static"], 2)
    48.75
    >>> cfg = suggest_config("7b", 32, "52k")
    >>> sorted(k for k in cfg if k.startswith("nccl"))
    ['nccl_algo', 'nccl_proto']
"""

from helper.calibration import CONSTANTS, DEFAULT_CALIBRATION_PATH, calibration_source, load_calibration, resolve_constants
from helper.checkpointing import LLAMA3_FAILURES_PER_GPU_HOUR, checkpoint_plan
from helper.collectives import UnsupportedCollective
from helper.gpus import GPUS, GpuSpec, get_gpu
from helper.layouts import Layout, candidate_layouts, layout_memory, layout_step_time
from helper.measurements import measurement_plan
from helper.memory import SHARDINGS, estimate_memory, normalize_sharding
from helper.padding import DEFAULT_MEAN_TOKENS_PER_EXAMPLE, estimate_padding_efficiency, padded_rows
from helper.plan import critical_batch_tokens, plan_training
from helper.sizes import ModelShape, parse_dataset_size, parse_model_size
from helper.stacks import DEFAULT_STACK, STACKS, Stack, get_stack
from helper.suggest import explain, format_breakdown, suggest_config
from helper.throughput import (
    Prediction,
    estimate_startup_seconds,
    flops_per_token,
    predict_step_time,
    predict_throughput,
)

__all__ = [
    "suggest_config", "estimate_memory", "predict_throughput", "predict_step_time",
    "estimate_startup_seconds", "estimate_padding_efficiency", "flops_per_token",
    "fit_calibration", "load_calibration", "resolve_constants", "calibration_source",
    "measurement_plan", "explain", "format_breakdown", "padded_rows",
    "parse_model_size", "parse_dataset_size", "normalize_sharding",
    "GPUS", "GpuSpec", "get_gpu", "ModelShape", "Prediction", "UnsupportedCollective",
    "CONSTANTS", "SHARDINGS", "DEFAULT_CALIBRATION_PATH", "DEFAULT_MEAN_TOKENS_PER_EXAMPLE",
    "plan_training", "critical_batch_tokens", "checkpoint_plan", "LLAMA3_FAILURES_PER_GPU_HOUR",
    "Layout", "candidate_layouts", "layout_memory", "layout_step_time",
    "Stack", "STACKS", "DEFAULT_STACK", "get_stack",
]


def __getattr__(name: str):
    # helper.fitting pulls in scipy.optimize (over a second to import): load it on first use so
    # `tuner plan` and `suggest_config` stay fast.
    if name == "fit_calibration":
        from helper import fitting
        return getattr(fitting, name)
    raise AttributeError(f"module 'helper' has no attribute {name!r}")
