"""helper.step: the StepPlan record, what a configuration fixes before any calibration."""

from __future__ import annotations

import dataclasses

import pytest

from helper.step import StepPlan
from helper.throughput import plan_step


def test_a_step_plan_is_frozen_and_keyword_only():
    plan = plan_step("7b", 16, micro_batch=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.micro_batch = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        StepPlan(*[getattr(plan, f.name) for f in dataclasses.fields(StepPlan)])  # type: ignore[misc]
    assert dataclasses.replace(plan, micro_batch=4).micro_batch == 4


def test_a_planned_step_spreads_the_gpus_over_whole_nodes_and_counts_its_flops():
    plan = plan_step("7b", 12, gpus_per_node=8, micro_batch=2, seq_len=1024)
    assert isinstance(plan, StepPlan)
    assert (plan.gpu_count, plan.nodes, plan.gpus_per_node) == (12, 2, 8)
    assert plan.flops_per_micro_step == pytest.approx(
        plan.matmul_flops_per_micro_step + plan.attention_flops_per_micro_step, rel=1e-6)
    assert {c[0] for c in plan.collectives} >= {"allgather", "reducescatter"}
    single = plan_step("7b", 4, gpus_per_node=8)
    assert (single.nodes, single.gpus_per_node) == (1, 4)


def test_the_defaults_are_no_checkpointing_fused_attention_and_once_per_step_gradients():
    fields = {f.name: f.default for f in dataclasses.fields(StepPlan)}
    assert fields["checkpointing"] == "none" and fields["attention"] == "sdpa"
    assert fields["reduce_scatter_every_micro_step"] is False and fields["stack"] is None
