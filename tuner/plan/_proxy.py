"""The plan's chosen layout on the proxy (``tuner plan --validate``), and its predicted side.

A plan's layout is for its cluster (say HSDP with shard groups of 8 on 32 GPUs, or FSDP x TP8);
the proxy runs on a few processes. :func:`proxy_layout_knobs` keeps the layout's kind and
scales its degrees to the proxy:

- HSDP stays HSDP: two replicas of ``world / 2`` shards (the plan's replicas are whole nodes);
- TP stays TP: the plan's ``tp_degree``, lowered to the largest degree the proxy's processes
  and the proxy model's attention and key/value heads allow (said in a note when lowered);
- PP is dropped (the workload has no ``pp_degree``), said in a note.

The result is checked by :func:`tuner.spec.layout_problem` (and again at spec load).
:func:`layout_rows` predicts the proxy's HSDP/TP trials through :mod:`helper.layouts`
(``helper.fit_calibration`` fits them as FSDP x ``helper.layouts.layout_speed_ratio``).

Example:
    >>> proxy_layout_knobs({"sharding": "hybrid_shard", "shard_group_size": 8, "tp_degree": 8},
    ...                    world_size=4, gpus_per_node=4, n_heads=4, n_kv_heads=4)[0]
    {'sharding': 'hybrid_shard', 'tp_degree': 2, 'shard_group_size': 1}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner import model as tuner_model
from tuner.errors import TunerError
from tuner.spec import layout_problem

__all__ = ["proxy_layout_knobs", "proxy_world_size", "layout_rows"]


def proxy_world_size(knobs: Mapping[str, Any], *, default: int = 2) -> int:
    """CPU processes the proxy needs: 4 for HSDP (2 replicas x 2 shards, or x TP), else ``default``."""
    return max(default, 4) if knobs.get("sharding") == "hybrid_shard" else default


def proxy_layout_knobs(knobs: Mapping[str, Any], *, world_size: int, gpus_per_node: int,
                       n_heads: int, n_kv_heads: int) -> tuple[dict[str, Any], list[str]]:
    """The workload's knobs for the plan's layout on the proxy's ``world_size`` ranks, and notes."""
    notes: list[str] = []
    out: dict[str, Any] = {"sharding": knobs.get("sharding", "full_shard")}
    plan_tp = int(knobs.get("tp_degree") or 1)
    tp = 1
    if plan_tp > 1:
        tp = max(t for t in range(1, plan_tp + 1)
                 if gpus_per_node % t == 0 and n_heads % t == 0 and n_kv_heads % t == 0 and world_size % t == 0)
        if out["sharding"] == "hybrid_shard":  # keep two replicas beside TP
            tp = max(t for t in range(1, tp + 1) if tp % t == 0 and world_size // t >= 2)
        if tp != plan_tp:
            notes.append(f"tp_degree {plan_tp} measured as tp_degree {tp} on the proxy's {world_size} processes")
        if tp > 1:
            out["tp_degree"] = tp
    if out["sharding"] == "hybrid_shard":
        dp = world_size // tp
        out["shard_group_size"] = max(1, dp // 2)
        notes.append(f"HSDP shard groups of {knobs.get('shard_group_size', 'a node')} measured as "
                     f"{dp // out['shard_group_size']} replicas x {out['shard_group_size']} shards")
    if int(knobs.get("pp_degree") or 1) > 1:
        notes.append(f"the workload has no pp_degree knob; pp_degree {knobs['pp_degree']} measured without "
                     "pipeline stages (FSDP over the stage's ranks)")
    problem = layout_problem(out, world_size=world_size, gpus_per_node=gpus_per_node, n_heads=n_heads,
                             n_kv_heads=n_kv_heads)
    if problem:  # a mapping bug, not a user error; still one line
        raise TunerError(f"plan --validate: the proxy cannot run the plan's layout: {problem}")
    return out, notes


def layout_rows(study, raw_spec: Mapping[str, Any], calibrations: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Measured vs predicted (helper.layouts) for the proxy study's ok HSDP/TP trials.

    ``calibrations``: ``{"before": cal, "after": cal}``; a row gets ``predicted`` and ``refit``.
    """
    from tuner.stats import trial_status

    model, cluster, space = raw_spec["model"], raw_spec["cluster"], raw_spec["space"]
    world, gpn, gpu = cluster["nodes"] * cluster["gpus_per_node"], cluster["gpus_per_node"], cluster["gpu"]
    fixed = {k: v[0] for k, v in space.items() if len(v) == 1}
    rows = []
    for t in study.trials:
        if trial_status(t) != "ok" or not t.value:
            continue
        params = {**fixed, **t.params}
        # the proxy's rows are full (packed), with no activation checkpointing
        inputs = tuner_model.model_inputs({**params, "padding": "packed", "activation_checkpointing": False},
                                          model=model["preset"], gpu=gpu, world_size=world, gpus_per_node=gpn,
                                          seq_len=int(model["seq_len"]))
        layout = inputs.layout
        if layout.dp_replicate == 1 and layout.tp == 1:
            continue  # FSDP: study_measurements and fit_calibration take it
        pred = {k: tuner_model.layout_tokens_per_sec_per_gpu(inputs, calibration=cal) for k, cal in calibrations.items()}
        meas = float(t.value)
        rows.append({"config": f"{model['preset']}, {world} CPU processes, micro_batch {inputs.micro_batch}, "
                               f"{layout.name} (mesh {layout.dp_replicate}x{layout.dp_shard}x{layout.tp})",
                     "measured": meas, "predicted": pred["before"], "error_pct": 100 * (pred["before"] / meas - 1),
                     "refit": pred["after"], "refit_error_pct": 100 * (pred["after"] / meas - 1),
                     "peak_mem_gib": t.user_attrs.get("peak_mem_gib"),
                     "predicted_mem_gib": tuner_model.gib(tuner_model.layout_memory_gb(inputs))})
    return rows
