"""Why a layout loses, in words built from the plan's own numbers (``helper.plan``).

Every sentence quotes the figures of the table it explains: the step-time parts where the losing
layout spends more than the chosen one (largest difference first), the parts where it spends
less (what it would save), and memory where memory decides. No sentence asserts a mechanism the
numbers do not show: a layout with more communication is never said to "save traffic".
"""

from __future__ import annotations

from typing import Any

__all__ = ["PART_WORDS", "layout_sentence", "why_loses", "compared_parts"]

PART_WORDS = {
    "compute_s": "arithmetic",
    "exposed_comm_s": "waiting on FSDP's weight and gradient exchanges",
    "tp_comm_s": "tensor-parallel exchanges inside every layer",
    "p2p_s": "handing activations between pipeline stages",
    "host_wait_s": "the GPU waiting on the host to dispatch its kernels",
    "bubble_s": "pipeline fill and drain, GPUs idle",
    "optimizer_s": "the optimizer update",
    "overhead_s": "fixed cost per micro-batch (hooks, syncs)",
}
"""Plain words for each step-time part of :func:`helper.layouts.layout_step_time`."""
_MIN_PART_S = 0.01  # differences under 10 ms, or under 0.5 % of the step, are not worth a clause
_MIN_PART_SHARE = 0.005


def layout_sentence(layout: Any) -> str:
    """One line saying how the GPUs share the work."""
    if layout.pp > 1 and layout.tp > 1:
        return (f"3-D: {layout.pp} pipeline stages, each layer split over {layout.tp} GPUs, FSDP over "
                f"{layout.dp_shard} copies")
    if layout.pp > 1:
        return f"the layers cut into {layout.pp} pipeline stages, FSDP over {layout.dp_shard} GPUs in each"
    if layout.tp > 1:
        return f"every layer split over {layout.tp} GPUs of a node (tensor parallel), FSDP over {layout.dp_shard} groups"
    if layout.dp_replicate > 1:
        return (f"model state sharded over the {layout.dp_shard} GPUs of a node and copied on each of "
                f"{layout.dp_replicate} nodes (HSDP)")
    if layout.dp_shard == 1:
        return "the whole model on one GPU"
    return f"model state sharded over all {layout.dp_shard} GPUs (FSDP)"


def compared_parts(row: dict, win: dict) -> list[tuple[str, float, float]]:
    """``(part, row seconds, winner seconds)`` per optimizer step, largest difference first."""
    t, w = row["time"], win["time"]
    floor = max(_MIN_PART_S, _MIN_PART_SHARE * w["step_time_s"])
    parts = [(k, t[k], w.get(k, 0.0)) for k in PART_WORDS if abs(t[k] - w.get(k, 0.0)) >= floor]
    return sorted(parts, key=lambda p: -abs(p[1] - p[2]))


def _why_compute(row: dict, win: dict) -> str:
    causes = []
    if row["activation_checkpointing"] and not win["activation_checkpointing"]:
        causes.append("it recomputes activations to fit")
    if row["tp"] > win["tp"]:
        causes.append(f"its matrix multiplies are {row['tp']} times narrower")
    return f" ({'; '.join(causes)})" if causes else ""


def why_loses(row: dict, win: dict, gpu_name: str) -> str:
    """One or two sentences on ``row`` against the chosen ``win``, quoting the table's numbers."""
    name = row["layout"]
    mem = row["memory_gib"]
    if not row["fits"]:
        return (f"{name} does not fit: its smallest setting (micro-batch {row['micro_batch']}, activation "
                f"checkpointing {'on' if row['activation_checkpointing'] else 'off'}) needs {mem['total']:.1f} GiB "
                f"per GPU, more than the {row['usable_gib']:.1f} GiB an {gpu_name} can safely use.")
    ratio = row["tokens_per_sec_per_gpu"] / win["tokens_per_sec_per_gpu"] - 1
    steps = f"{row['step_time_s']:.2f} s vs {win['step_time_s']:.2f} s per step"
    parts = compared_parts(row, win)
    more = [p for p in parts if p[1] > p[2]][:3]
    less = [p for p in parts if p[1] < p[2]][:2]

    def clause(p: tuple[str, float, float]) -> str:
        extra = _why_compute(row, win) if p[0] == "compute_s" and p[1] > p[2] else ""
        return f"{PART_WORDS[p[0]]} {p[1]:.2f} s vs {p[2]:.2f} s{extra}"

    if ratio >= 0:
        lead = (f"{name} is predicted {ratio:.0%} faster than {win['layout']} ({steps}), inside the band; "
                f"{win['layout']} is simpler to set up and debug, so it is chosen")
    else:
        lead = f"{name} is {-ratio:.0%} slower than {win['layout']} ({steps})"
    text = lead
    if more:
        text += f": it spends more on {'; '.join(clause(p) for p in more)}"
    if less:
        text += f"; it saves on {'; '.join(clause(p) for p in less)}"
    if row["dp_replicate"] > 1 and ratio < 0:
        text += (f". Its communication totals {row['time']['fsdp_comm_s']:.2f} s vs "
                 f"{win['time']['fsdp_comm_s']:.2f} s per step")
    if row["memory_gib"]["static"] > 1.5 * win["memory_gib"]["static"]:
        text += (f". It holds {mem['static']:.1f} GiB of model state per GPU vs {win['memory_gib']['static']:.1f}, "
                 f"which leaves {row['headroom_gib']:.1f} GiB spare")
    return text + "."
