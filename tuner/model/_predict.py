"""helper's predictions for one configuration (:class:`~tuner.model.ModelInputs`): throughput,
step plans, memory, what an HSDP or tensor-parallel layout changes, NCCL's rules, start-up and
checkpoint saves; and helper's model refitted to a study's trials.

helper predicts a trial as FSDP over every GPU (``helper.predict_throughput``,
``helper.estimate_memory``). For an HSDP or tensor-parallel trial :func:`layout_adjustment`
moves that prediction by what :mod:`helper.layouts` says the layout changes:

- step time x ``layout_step_time(layout) / layout_step_time(fsdp)`` (same model, calibration
  and batch: TP splits the compute and adds exposed per-block all-reduces; HSDP shards in a
  node and all-reduces the shards across replicas);
- peak memory + ``layout_memory(layout) - layout_memory(fsdp)`` (TP splits stored activations
  and the gathered blocks; HSDP shards the states over fewer GPUs);
- tokens counted once per TP group (the ranks of a TP group read the same rows, as the
  workload counts them: objectives/fsdp_finetune.py).

Checkpoints ([trial] checkpoint_every) are saved outside the timed step in the workload, so
they do not change tokens/s; :func:`checkpoint_cost` is their blocking time
(helper.checkpointing.checkpoint_plan's write time, or the host-copy stall of an async save).

The refit is ``helper.fit_calibration`` (``tuner distill`` runs it over finished studies; the
model-guided sampler runs it online after every trial) over the trials' measurement dicts
(:meth:`~tuner.model.ModelInputs.measurement`).

Example:
    >>> from tuner.model import model_inputs
    >>> inp = model_inputs({"micro_batch": 1}, model="llama-2-7b", gpu="H100-80GB", world_size=8,
    ...                    gpus_per_node=8, seq_len=2048)
    >>> 20 < memory_gb(inp) < 40, layout_adjustment(inp) is None
    (True, True)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from typing import Any

import helper
from helper import (
    DEFAULT_MEAN_TOKENS_PER_EXAMPLE,
    GPUS,
    UnsupportedCollective,
    checkpoint_plan,
    estimate_memory,
    estimate_startup_seconds,
    get_gpu,
    layout_memory,
    layout_step_time,
    load_calibration,
    parse_model_size,
    predict_throughput,
    resolve_constants,
)
from helper.collectives import choose_collective, parse_nccl_setting
from helper.gpus import gib
from helper.measurements import fit_memory_scale
from helper.mesh import Layout
from helper.step import StepPlan
from helper.throughput import Prediction, plan_step, step_time_breakdown
from tuner.model._inputs import ModelInputs, spec_model_inputs
from tuner.spec import StudySpec, complete_params

__all__ = ["gib", "predict", "step_plan", "breakdown", "memory_gb", "predicted_memory_gb", "layout_adjustment",
           "layout_tokens_per_sec_per_gpu", "layout_memory_gb",
           "layout_memory_delta_gb", "nccl_problem", "gpu_memory_gb", "startup_parts", "n_params",
           "checkpoint_cost", "default_constants", "SIM_STORAGE_WRITE_GBS_PER_NODE", "UnsupportedCollective",
           "model_knows", "mean_tokens", "measured_mean_tokens", "calibration_trials", "calibrated_constants",
           "fit_calibration", "load_calibration",
           "fit_memory_scale", "DEFAULT_MEAN_TOKENS_PER_EXAMPLE", "FIT_ON_BEST"]

SIM_STORAGE_WRITE_GBS_PER_NODE = 2.0
"""Shared-storage write rate per node the sim assumes, GB/s: helper.checkpointing's default
(``checkpoint_plan``), an assumption for a parallel file system's share per node, not a
measurement."""


def predict(inputs: ModelInputs) -> Prediction:
    """helper's tokens/s/GPU for FSDP over every GPU (details: step time, data stall, MFU).

    Raises:
        UnsupportedCollective: a forced NCCL setting a collective lacks.
    """
    return predict_throughput(**inputs.step_kwargs())


def step_plan(inputs: ModelInputs) -> StepPlan | None:
    """helper's step plan (what no calibration changes), or None when NCCL cannot run it."""
    try:
        return plan_step(**inputs.step_kwargs())
    except UnsupportedCollective:
        return None


def breakdown(plan: StepPlan, constants: dict[str, float]) -> dict[str, float]:
    """A step plan's time, part by part, under ``constants`` (helper.throughput.step_time_breakdown)."""
    return step_time_breakdown(plan, constants)


def default_constants(gpu: str) -> dict[str, float]:
    """helper's shipped calibration constants for a GPU (what predict uses by default)."""
    return resolve_constants(None, gpu)[0]


def memory_gb(inputs: ModelInputs) -> float:
    """Peak memory per GPU (GB) of FSDP over every GPU."""
    return _fsdp_memory(inputs.model, inputs.gpu_count, inputs.gpu, inputs.micro_batch, inputs.seq_len,
                        inputs.activation_checkpointing, inputs.grad_accum, inputs.reshard_after_forward,
                        inputs.stack)


@functools.lru_cache(maxsize=4096)
def _fsdp_memory(model: str, world: int, gpu: str, micro_batch: int, seq_len: int, ckpt: bool, grad_accum: int,
                 reshard: bool, stack: str) -> float:
    return float(estimate_memory(model, world, sharding="zero3", micro_batch=micro_batch, seq_len=seq_len,
                                 activation_checkpointing=ckpt, grad_accum=grad_accum,
                                 reshard_after_forward=reshard, gpu=gpu, stack=stack)["total"])


def predicted_memory_gb(inputs: ModelInputs) -> float:
    """Peak memory per GPU (GB) of the configuration, its layout included."""
    return memory_gb(inputs) + layout_memory_delta_gb(inputs)


def gpu_memory_gb(gpu: str) -> float:
    """The GPU's memory as helper states it, GB."""
    return get_gpu(gpu).memory_gb


def layout_memory_delta_gb(inputs: ModelInputs) -> float:
    """Peak memory per GPU of the inputs' layout minus FSDP's over every GPU (helper.layouts; 0
    for FSDP): what the layout adds to an FSDP memory prediction (the sim, screening)."""
    fsdp = Layout(dp_shard=inputs.gpu_count)
    if inputs.layout == fsdp:
        return 0.0
    common = inputs.layout_kwargs()
    return (layout_memory(inputs.model, inputs.layout, **common)["total"]
            - layout_memory(inputs.model, fsdp, **common)["total"])


def layout_tokens_per_sec_per_gpu(inputs: ModelInputs, *, calibration: dict[str, Any] | None = None) -> float:
    """helper.layouts' tokens/s/GPU for the inputs' layout itself (not as a ratio to FSDP)."""
    return layout_step_time(inputs.model, inputs.layout, constants=resolve_constants(calibration, inputs.gpu)[0],
                            gpus_per_node=inputs.gpus_per_node, reshard_after_forward=inputs.reshard_after_forward,
                            **inputs.layout_kwargs())["tokens_per_sec_per_gpu"]


def layout_memory_gb(inputs: ModelInputs) -> float:
    """helper.layouts' peak memory per GPU (GB) for the inputs' layout itself."""
    return layout_memory(inputs.model, inputs.layout, **inputs.layout_kwargs())["total"]


def layout_adjustment(inputs: ModelInputs) -> dict[str, Any] | None:
    """How the layout moves the FSDP prediction, or None for FSDP over every GPU.

    Returns ``step_time_ratio``, ``memory_delta_gb``, ``tp`` (ranks sharing a batch) and
    ``layout`` (helper's name and mesh).
    """
    layout, fsdp = inputs.layout, Layout(dp_shard=inputs.gpu_count)
    if layout == fsdp:
        return None
    constants = default_constants(inputs.gpu)  # what predict_throughput uses by default
    times = [layout_step_time(inputs.model, lay, constants=constants, gpus_per_node=inputs.gpus_per_node,
                              reshard_after_forward=inputs.reshard_after_forward,
                              **inputs.layout_kwargs())["step_time_s"]
             for lay in (layout, fsdp)]
    return {"step_time_ratio": times[0] / times[1], "memory_delta_gb": layout_memory_delta_gb(inputs),
            "tp": layout.tp, "layout": {"name": layout.name, "mesh": [layout.dp_replicate, layout.dp_shard, layout.tp]}}


def nccl_problem(*, gpu: str, world_size: int, gpus_per_node: int, backend: str, nccl_algo: str,
                 nccl_proto: str) -> tuple[str, bool] | None:
    """(NCCL's error, whether the rule holds on every NCCL version) for a forced setting FSDP's
    all-gather or reduce-scatter lacks, or None when it runs (or the cluster is not NCCL's)."""
    spec = get_gpu(gpu)
    if spec.nccl_arch == "none" or backend != "nccl":
        return None
    g = min(gpus_per_node, world_size)
    for coll in ("allgather", "reducescatter"):
        try:
            choose_collective(coll, 1e8, nccl_algo=nccl_algo, nccl_proto=nccl_proto, n=world_size,
                              nodes=math.ceil(world_size / g), gpus_per_node=g, gpu=spec, reduce_fp32=True)
        except UnsupportedCollective as exc:
            algos = (parse_nccl_setting(nccl_algo, ("ring", "tree", "nvls", "pat", "collnetdirect",
                                                    "collnetchain", "nvlstree")) or {}).get(coll)
            protos = (parse_nccl_setting(nccl_proto, ("simple", "ll128", "ll")) or {}).get(coll)
            simple_ok = protos is None or "simple" in protos
            version_dependent = algos is not None and simple_ok and (
                algos <= {"tree"} or (coll == "reducescatter" and algos <= {"nvls", "nvlstree"} and spec.nvls))
            return str(exc), not version_dependent
    return None


def startup_parts(model: str, *, world_size: int, gpu: str, gpus_per_node: int) -> dict[str, float]:
    """A cold trial's start-up, second by second (helper.estimate_startup_seconds' details)."""
    return estimate_startup_seconds(model, world_size, gpu=gpu, gpus_per_node=gpus_per_node).details


def n_params(model: str) -> float:
    """The model's parameter count (helper.parse_model_size)."""
    return parse_model_size(model).n_params


def checkpoint_cost(n_params: float, *, mode: str, every: int, steps: int, world_size: int, nodes: int,
                    step_time_s: float) -> dict[str, Any]:
    """A trial's predicted DCP saves: count, blocking and background seconds each, size.

    Saves fall where the workload makes them: before steps ``every, 2 x every, ...`` below ``steps``.

    Example:
        >>> c = checkpoint_cost(1e9, mode="async", every=5, steps=12, world_size=8, nodes=1, step_time_s=1.0)
        >>> c["saves"], round(c["blocking_s"], 3), round(c["background_s"], 1)
        (2, 0.15, 6.0)
    """
    plan = checkpoint_plan(n_params, gpu_count=world_size, nodes=nodes, step_time_s=step_time_s,
                           storage_write_gbs_per_node=SIM_STORAGE_WRITE_GBS_PER_NODE)
    saves = len(range(every, steps, every)) if every > 0 else 0
    blocking = plan["write_s"] if mode == "sync" else plan["stall_s"]
    return {"mode": mode, "every": every, "saves": saves, "blocking_s": blocking,
            "background_s": 0.0 if mode == "sync" else plan["write_s"], "size_gb": plan["size_gb"],
            "total_blocking_s": saves * blocking, "storage_write_gbs_per_node": SIM_STORAGE_WRITE_GBS_PER_NODE}


# ------------------------------------------------------------------ the model refitted to a study

FIT_ON_BEST = 16
"""The refit uses the best this many ok trials (and the baseline): it calibrates the model
where the optimum is, and keeps each refit's cost flat as the study grows."""


def fit_calibration(measurements: Sequence[dict[str, Any]], **options: Any) -> dict[str, Any]:
    """``helper.fit_calibration`` (its scipy optimizer is imported on the first fit, not with tuner)."""
    return helper.fit_calibration(list(measurements), **options)


def model_knows(spec: StudySpec) -> bool:
    """True when helper can model the spec: a preset model on a GPU helper knows, over NCCL."""
    return bool(spec.model.preset) and spec.cluster.gpu in GPUS and spec.cluster.backend == "nccl"


def mean_tokens(spec: StudySpec, ok: Sequence[Any]) -> float:
    """Mean real tokens per example of the spec's data, from its ok trials (Optuna trials):
    :func:`measured_mean_tokens` over their padding modes and measured ``padding_efficiency``."""
    return measured_mean_tokens(spec.model.seq_len, [(complete_params(t.params, spec).get("padding"),
                                                      t.user_attrs.get("padding_efficiency")) for t in ok])


def measured_mean_tokens(seq_len: int, measured: Sequence[tuple[str | None, Any]]) -> float:
    """Mean real tokens per example: the median measured padding efficiency of ``max_length``
    rows x seq_len (each row one example), else helper's default.

    Example:
        >>> measured_mean_tokens(2048, [("max_length", 0.25), ("packed", 1.0), ("max_length", 0.125)])
        384.0
    """
    seen = [float(eff) * seq_len for mode, eff in measured
            if mode == "max_length" and isinstance(eff, (int, float))]
    return float(statistics.median(seen)) if seen else float(DEFAULT_MEAN_TOKENS_PER_EXAMPLE)


def calibration_trials(ok: Sequence[Any]) -> list[Any]:
    """The ok trials a refit uses: the :data:`FIT_ON_BEST` best, and the baseline.

    Example:
        >>> from types import SimpleNamespace as T
        >>> ok = [T(number=n, value=v, user_attrs={}) for n, v in enumerate([5.0, 9.0, 7.0])]
        >>> [t.number for t in calibration_trials(ok)]
        [1, 2, 0]
    """
    best = sorted(ok, key=lambda t: -t.value)[:FIT_ON_BEST]
    return best + [t for t in ok if t.user_attrs.get("role") == "baseline" and t not in best]


def calibrated_constants(spec: StudySpec, ok: Sequence[Any], mean_tokens: float,
                         warm: dict[str, Any] | None = None) -> tuple[dict[str, float], dict[str, Any] | None]:
    """helper's constants for the spec's GPU refitted to the ok trials (MAP), and the calibration.

    Uses the :data:`FIT_ON_BEST` best ok trials and the baseline. ``warm``: the previous refit,
    whose values centre the priors (their widths are helper's): each refit starts where the
    last ended, so a few descent steps suffice.
    """
    base, _ = resolve_constants(warm, spec.cluster.gpu)
    measurements = [
        spec_model_inputs(t.params, spec, mean_tokens=mean_tokens,
                          padding_efficiency=t.user_attrs.get("padding_efficiency") or None).measurement(t.value)
        for t in calibration_trials(ok)]
    if not measurements:
        return base, warm
    try:
        cal = fit_calibration(measurements, base=warm, n_starts=1, max_nfev=10 if warm else 30)
    except ValueError:
        return base, warm
    return resolve_constants(cal, spec.cluster.gpu)[0], cal
