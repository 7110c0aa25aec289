"""tuner's one view of helper's performance model: knob values -> the model's inputs
(:func:`model_inputs`, the one translation), its predictions and feasibility (memory, NCCL's
rules, layouts), and the model refitted to a study.

Every other package that needs helper's model goes through here, so a change of helper's
interface is absorbed in one place.

Example:
    >>> inp = model_inputs({"micro_batch": 2, "padding": "max_length"}, model="llama-2-7b", gpu="H100-80GB",
    ...                    world_size=32, gpus_per_node=8, seq_len=2048)
    >>> inp.padding_efficiency, predict(inp) > 0
    (0.125, True)
"""

from tuner.model._inputs import ModelInputs, model_inputs, spec_model_inputs
from tuner.model._predict import (
    DEFAULT_MEAN_TOKENS_PER_EXAMPLE,
    FIT_ON_BEST,
    SIM_STORAGE_WRITE_GBS_PER_NODE,
    UnsupportedCollective,
    breakdown,
    calibrated_constants,
    calibration_trials,
    checkpoint_cost,
    default_constants,
    fit_calibration,
    fit_memory_scale,
    gib,
    gpu_memory_gb,
    layout_adjustment,
    layout_memory_delta_gb,
    layout_memory_gb,
    layout_tokens_per_sec_per_gpu,
    load_calibration,
    mean_tokens,
    measured_mean_tokens,
    memory_gb,
    model_knows,
    n_params,
    nccl_problem,
    predict,
    predicted_memory_gb,
    startup_parts,
    step_plan,
)

__all__ = [
    "ModelInputs",
    "model_inputs",
    "spec_model_inputs",
    "predict",
    "step_plan",
    "breakdown",
    "memory_gb",
    "predicted_memory_gb",
    "layout_adjustment",
    "layout_tokens_per_sec_per_gpu",
    "layout_memory_gb",
    "layout_memory_delta_gb",
    "nccl_problem",
    "gpu_memory_gb",
    "gib",
    "startup_parts",
    "n_params",
    "checkpoint_cost",
    "default_constants",
    "UnsupportedCollective",
    "SIM_STORAGE_WRITE_GBS_PER_NODE",
    "model_knows",
    "mean_tokens",
    "measured_mean_tokens",
    "calibrated_constants",
    "calibration_trials",
    "fit_calibration",
    "load_calibration",
    "fit_memory_scale",
    "DEFAULT_MEAN_TOKENS_PER_EXAMPLE",
    "FIT_ON_BEST",
]
