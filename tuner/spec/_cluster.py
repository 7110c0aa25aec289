"""What a cluster and model can run, against helper's tables: checked once, when a spec is loaded.

A preset must be one helper knows, and the sim launcher needs helper's spec of the GPU.

The layout knobs (``sharding``, ``shard_group_size``, ``tp_degree``; tuner.knobs) combine:
``world = dp_replicate x dp_shard x tp`` (helper.mesh.Layout). A combination the cluster
cannot hold is refused at spec load with one line naming the key, instead of failing
trial after trial:

- ``tp_degree`` must divide the GPUs per node (TP's per-layer all-reduces belong on
  NVLink; torchtitan and Megatron keep TP inside a node) and the model's attention and
  key/value heads (each TP rank holds whole heads);
- an HSDP shard group must divide the data-parallel ranks (``world / tp_degree``);
- the sim launcher models every layout knob and checkpointing (helper.layouts,
  helper.checkpointing via tuner/model/_predict.py); :func:`sim_problem` is where a knob
  it cannot model would be refused.

The layout itself is helper's :class:`~helper.mesh.Layout`, the one type the workload, the sim and
helper's layout model use too.

Example:
    >>> layout_problem({"tp_degree": 3}, world_size=8, gpus_per_node=8)
    'tp_degree 3 does not divide the 8 GPUs per node'
    >>> layout_problem({"sharding": "hybrid_shard", "shard_group_size": 3}, world_size=8, gpus_per_node=8)
    'HSDP shard_group_size 3 does not divide the 8 data-parallel ranks (world 8 / tp_degree 1)'
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from helper.collectives import ALGOS, PROTOS, parse_nccl_setting
from helper.gpus import GPUS
from helper.mesh import Layout
from helper.presets import MODEL_PRESETS, get_preset
from helper.stacks import STACKS

__all__ = ["LAYOUT_KNOBS", "nccl_problem", "stack_problem", "preset_problem", "unknown_gpu_note", "slurm_time_problem",
           "sim_gpu_problem", "sim_physics_problem", "layout_problem", "space_layout_problem", "sim_problem",
           "checkpoint_problem", "CHECKPOINT_MODES"]

LAYOUT_KNOBS = ("sharding", "shard_group_size", "tp_degree")
"""The knobs that choose the mesh."""


def stack_problem(name: str) -> str | None:
    """Why ``name`` is not one of helper's training-stack presets (``helper.stacks``), or None.

    Example:
        >>> stack_problem("hf-sdpa") is None, stack_problem("nemo").startswith("unknown stack 'nemo'")
        (True, True)
    """
    return None if name in STACKS else f"unknown stack {name!r}; one of {', '.join(STACKS)}"
CHECKPOINT_MODES = ("sync", "async")
"""[trial] checkpoint_mode: torch.distributed.checkpoint.save or async_save."""


def nccl_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a setting NCCL reads for knob ``name`` (``nccl_algo``: NCCL_ALGO,
    ``nccl_proto``: NCCL_PROTO; helper.collectives' grammar, NCCL's own), or None.

    Example:
        >>> nccl_problem("nccl_algo", "^Tree") is None, nccl_problem("nccl_proto", "LL256")
        (True, "unknown NCCL value(s) ['ll256'] in 'LL256'; known: simple, ll128, ll")
    """
    universe = {"nccl_algo": ALGOS, "nccl_proto": PROTOS}.get(name)
    if universe is None or not isinstance(value, str):
        return None
    try:
        parse_nccl_setting(value, universe)
    except ValueError as exc:
        return str(exc)
    return None


def preset_problem(preset: str) -> str | None:
    """Why helper has no such model preset, or None."""
    if preset in MODEL_PRESETS:
        return None
    return f"unknown preset {preset!r}; known: {', '.join(MODEL_PRESETS)}"


_SLURM_TIME = re.compile(r"(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|UNLIMITED|INFINITE)", re.IGNORECASE)


def slurm_time_problem(value: str) -> str | None:
    """Why ``value`` is not a Slurm ``--time`` (sbatch(1): minutes, MM:SS, HH:MM:SS, D-HH,
    D-HH:MM, D-HH:MM:SS), or None.

    Example:
        >>> slurm_time_problem("02:00:00") is None, slurm_time_problem("1-12") is None
        (True, True)
        >>> slurm_time_problem("12h")
        "'12h' is not a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 12:00:00)"
    """
    if _SLURM_TIME.fullmatch(str(value).strip()):
        return None
    return (f"{value!r} is not a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS "
            "(e.g. 12:00:00)")


def unknown_gpu_note(gpu: str) -> str | None:
    """What a study on a GPU helper has no model of goes without, or None for one it knows (a
    real cluster's GPU need not be one; a misspelt name should not pass unseen).

    Example:
        >>> unknown_gpu_note("H100-80GB") is None
        True
        >>> unknown_gpu_note("H100-80G").split(";")[0]
        "cluster.gpu 'H100-80G' is not a GPU helper models (did you mean 'H100-80GB'?)"
    """
    if gpu in GPUS:
        return None
    close = difflib.get_close_matches(gpu, list(GPUS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (it models {', '.join(GPUS)})"
    return (f"cluster.gpu {gpu!r} is not a GPU helper models{hint}; the search runs without helper's "
            "predictions and memory screening (TPE under sampler `auto`)")


def sim_gpu_problem(gpu: str) -> str | None:
    """Why the sim launcher cannot model this GPU, or None: it needs the helper's spec of it."""
    if gpu in GPUS:
        return None
    return f"the sim launcher has no model of GPU {gpu!r}; one of {', '.join(GPUS)}"


def sim_physics_problem(value: str) -> str | None:
    """The problem with a [cluster] `sim_physics` value (tuner.sim), or None when it is valid.

    Example:
        >>> sim_physics_problem("perturbed:3") is None, sim_physics_problem("perturbed:x")
        (True, "must be 'matched' or 'perturbed:SEED' (SEED an integer >= 0), got 'perturbed:x'")
    """
    if value == "matched":
        return None
    kind, _, seed = str(value).partition(":")
    if kind == "perturbed" and seed.isdigit():
        return None
    return f"must be 'matched' or 'perturbed:SEED' (SEED an integer >= 0), got {value!r}"


def layout_problem(params: Mapping[str, Any], *, world_size: int, gpus_per_node: int,
                   n_heads: int | None = None, n_kv_heads: int | None = None) -> str | None:
    """Why the cluster cannot run this layout, or None (missing knobs take their defaults)."""
    tp = int(params.get("tp_degree") or 1)
    if gpus_per_node % tp:
        return f"tp_degree {tp} does not divide the {gpus_per_node} GPUs per node"
    for what, heads in (("attention heads", n_heads), ("key/value heads", n_kv_heads)):
        if heads and heads % tp:
            return f"tp_degree {tp} does not divide the model's {heads} {what}"
    try:
        Layout.from_knobs(params, world_size=world_size, gpus_per_node=gpus_per_node)
    except ValueError as exc:
        return str(exc)
    return None


def space_layout_problem(choices: Mapping[str, Sequence[Any]], baseline: Mapping[str, Any], *,
                         world_size: int, gpus_per_node: int, n_heads: int | None = None,
                         n_kv_heads: int | None = None) -> tuple[str, str] | None:
    """(key, problem) for the first layout the space or the baseline could run and the
    cluster cannot, else None. ``choices`` holds each searched layout knob's values.

    Every combination of the searched layout knobs is checked (there are few of them), so
    a study never samples a layout that can only fail.

    Example:
        >>> space_layout_problem({"tp_degree": [1, 2], "sharding": ["full_shard", "hybrid_shard"],
        ...                       "shard_group_size": [4]}, {}, world_size=4, gpus_per_node=4)
        ('space.shard_group_size', 'HSDP shard_group_size 4 does not divide the 2 data-parallel ranks (world 4 / tp_degree 2)')
    """
    heads = {"n_heads": n_heads, "n_kv_heads": n_kv_heads}
    if baseline and (problem := layout_problem(baseline, world_size=world_size, gpus_per_node=gpus_per_node,
                                               **heads)):
        return "baseline", problem
    names = [n for n in LAYOUT_KNOBS if n in choices]
    for combo in itertools.product(*(choices[n] for n in names)):
        params = dict(zip(names, combo))
        if problem := layout_problem(params, world_size=world_size, gpus_per_node=gpus_per_node, **heads):
            key = "tp_degree" if problem.startswith("tp_degree") else (
                "shard_group_size" if "shard_group_size" in names else "sharding")
            return f"space.{key}", problem
    return None


def sim_problem(choices: Mapping[str, Sequence[Any]], *, checkpoint_every: int) -> tuple[str, str] | None:
    """(key, problem) when the sim launcher would have to ignore a layout or checkpointing, else None.

    Nothing today: the sim models HSDP, tensor parallelism and DCP saves through helper.layouts
    and helper.checkpointing (tuner/model/_predict.py). A layout knob the sim cannot model
    (a future ``pp_degree``) is refused here.
    """
    return None


def checkpoint_problem(*, checkpoint_every: int, checkpoint_mode: str, checkpoint_dir: str | None) -> tuple[str, str] | None:
    """(key, problem) for bad [trial] checkpoint settings, else None."""
    if checkpoint_every < 0:
        return "trial.checkpoint_every", f"must be >= 0 (0 turns checkpointing off), got {checkpoint_every}"
    if checkpoint_mode not in CHECKPOINT_MODES:
        return "trial.checkpoint_mode", f"{checkpoint_mode!r}: one of {', '.join(CHECKPOINT_MODES)}"
    if checkpoint_every and not checkpoint_dir:
        return "trial.checkpoint_dir", "checkpoint_every > 0 needs a checkpoint_dir (a folder every node sees)"
    return None


def check_spec(space, baseline: Mapping[str, Any], cluster, preset: str | None, trial,
               fail: Callable[[str, str], Exception]) -> None:
    """Raise ``fail(key, problem)`` for the spec's first layout or checkpoint problem.

    ``space`` is the parsed [space] (objects with ``name`` and ``values_for_grid()``);
    ``preset`` the [model] preset, whose heads TP must divide (a `path` model is checked by
    the workload when it builds the mesh).
    """
    model_heads: tuple[int | None, int | None] = (None, None)
    if preset:
        arch = get_preset(preset)
        model_heads = (arch.n_heads, arch.n_kv_heads)
    for k in space:
        for v in (k.choices or ()):
            if (problem := nccl_problem(k.name, v)):
                raise fail(f"space.{k.name}", problem)
    choices = {k.name: list(k.values_for_grid()) for k in space if k.name in LAYOUT_KNOBS}
    found = checkpoint_problem(checkpoint_every=trial.checkpoint_every, checkpoint_mode=trial.checkpoint_mode,
                               checkpoint_dir=trial.checkpoint_dir)
    found = found or space_layout_problem(choices, {k: v for k, v in baseline.items() if k in LAYOUT_KNOBS},
                                          world_size=cluster.world_size, gpus_per_node=cluster.gpus_per_node,
                                          n_heads=model_heads[0], n_kv_heads=model_heads[1])
    if not found and cluster.launcher == "sim":
        found = sim_problem({**choices, **{k: [v] for k, v in baseline.items() if k in LAYOUT_KNOBS}},
                            checkpoint_every=trial.checkpoint_every)
    if found:
        raise fail(*found)
