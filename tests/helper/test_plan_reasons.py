"""helper.plan_reasons: why a layout loses, in sentences that quote the table's numbers."""

from __future__ import annotations

from types import SimpleNamespace

from helper.plan_reasons import PART_WORDS, compared_parts, layout_sentence, why_loses


def _layout(dp_shard=1, dp_replicate=1, tp=1, pp=1):
    return SimpleNamespace(dp_shard=dp_shard, dp_replicate=dp_replicate, tp=tp, pp=pp)


def _row(layout, tps, step, *, fits=True, static=10.0, ac=False, tp=1, dp_replicate=1, **time):
    parts = {k: 0.0 for k in PART_WORDS}
    parts.update(time)
    parts.setdefault("fsdp_comm_s", 0.0)
    return {"layout": layout, "fits": fits, "tokens_per_sec_per_gpu": tps, "step_time_s": step,
            "time": {**parts, "step_time_s": step}, "activation_checkpointing": ac, "tp": tp,
            "dp_replicate": dp_replicate, "micro_batch": 1, "usable_gib": 70.0, "headroom_gib": 20.0,
            "memory_gib": {"total": 50.0, "static": static}}


def test_each_layout_is_one_line_saying_how_the_gpus_share_the_work():
    assert layout_sentence(_layout()) == "the whole model on one GPU"
    assert layout_sentence(_layout(dp_shard=32)) == "model state sharded over all 32 GPUs (FSDP)"
    assert "copied on each of 4 nodes (HSDP)" in layout_sentence(_layout(dp_shard=8, dp_replicate=4))
    assert "split over 8 GPUs of a node (tensor parallel), FSDP over 4 groups" in layout_sentence(_layout(4, tp=8))
    assert layout_sentence(_layout(4, pp=2)).startswith("the layers cut into 2 pipeline stages")
    assert layout_sentence(_layout(2, tp=4, pp=2)).startswith("3-D: 2 pipeline stages")


def test_parts_under_10_ms_are_left_out_and_the_rest_come_largest_difference_first():
    win = _row("FSDP", 1000.0, 10.0, compute_s=8.0, exposed_comm_s=1.0, overhead_s=0.5)
    row = _row("TP", 800.0, 12.5, compute_s=8.005, exposed_comm_s=0.5, tp_comm_s=3.0, overhead_s=0.5)
    # floor: max(0.01 s, 0.5 % of the winner's 10 s step) = 0.05 s
    assert compared_parts(row, win) == [("tp_comm_s", 3.0, 0.0), ("exposed_comm_s", 0.5, 1.0)]


def test_a_loser_is_said_slower_by_the_tables_percent_and_its_parts_are_quoted():
    win = _row("FSDP", 1000.0, 10.0, compute_s=8.0, exposed_comm_s=1.0)
    row = _row("TP", 800.0, 12.5, compute_s=9.0, exposed_comm_s=0.5, tp_comm_s=3.0, tp=8)
    text = why_loses(row, win, "H100-80GB")
    assert text.startswith("TP is 20% slower than FSDP (12.50 s vs 10.00 s per step): it spends more on ")
    assert "tensor-parallel exchanges inside every layer 3.00 s vs 0.00 s" in text
    assert "arithmetic 9.00 s vs 8.00 s (its matrix multiplies are 8 times narrower)" in text
    assert text.endswith("it saves on waiting on FSDP's weight and gradient exchanges 0.50 s vs 1.00 s.")


def test_a_predicted_faster_loser_is_never_called_slower():
    win = _row("FSDP", 1000.0, 10.0, compute_s=9.0)
    row = _row("HSDP", 1030.0, 9.7, compute_s=8.7, dp_replicate=4)
    text = why_loses(row, win, "H100-80GB")
    assert "3% faster than FSDP" in text and "inside the band" in text and "slower" not in text
    assert "communication totals" not in text  # said only of a slower HSDP


def test_a_layout_that_does_not_fit_says_how_much_memory_it_needs():
    row = _row("DDP", 0.0, 0.0, fits=False, ac=True)
    text = why_loses(row, _row("FSDP", 1000.0, 10.0), "A100-40GB")
    assert text == ("DDP does not fit: its smallest setting (micro-batch 1, activation checkpointing on) needs "
                    "50.0 GiB per GPU, more than the 70.0 GiB an A100-40GB can safely use.")


def test_memory_is_quoted_where_the_loser_holds_much_more_model_state():
    win = _row("FSDP", 1000.0, 10.0, static=4.0)
    row = _row("DDP", 900.0, 11.1, static=40.0)
    assert "It holds 40.0 GiB of model state per GPU vs 4.0, which leaves 20.0 GiB spare." in why_loses(row, win, "H100")
