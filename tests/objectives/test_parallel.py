"""objectives/parallel.py: the mesh a layout needs, and real HSDP and TP trials under
torchrun (2 CPU processes, gloo; slow)."""


import pytest

from objectives.parallel import TP_PLAN, describe_layout, plan_layout
from tests.objectives.test_fsdp_finetune import torchrun, trial_config, why  # noqa: E402


@pytest.mark.parametrize("knobs, world, gpn, mesh, dp", [
    ({}, 8, 8, (1, 8, 1), 8),
    ({"sharding": "shard_grad_op"}, 4, 4, (1, 4, 1), 4),
    ({"sharding": "hybrid_shard"}, 32, 8, (4, 8, 1), 32),                       # shard in a node
    ({"sharding": "hybrid_shard", "tp_degree": 2}, 32, 8, (4, 4, 2), 16),       # TP in a node, HSDP over the rest
    ({"sharding": "hybrid_shard", "shard_group_size": 16}, 32, 8, (2, 16, 1), 32),
    ({"tp_degree": 2}, 4, 4, (1, 2, 2), 2),
])
def test_plan_layout_mesh(knobs, world, gpn, mesh, dp):
    layout = plan_layout(knobs, world_size=world, gpus_per_node=gpn)
    assert layout.mesh_shape == mesh and layout.dp == dp and layout.world_size == world
    assert describe_layout(layout, knobs)["mesh"] == list(mesh)


def test_tp_ranks_of_one_group_read_the_same_batch():
    layout = plan_layout({"tp_degree": 2}, world_size=4, gpus_per_node=4)
    assert [layout.dp_rank(r) for r in range(4)] == [0, 0, 1, 1]


def test_plan_layout_refuses_what_the_world_cannot_hold():
    with pytest.raises(ValueError, match="tp_degree 3"):
        plan_layout({"tp_degree": 3}, world_size=4, gpus_per_node=4)
    with pytest.raises(ValueError, match="shard_group_size 3"):
        plan_layout({"sharding": "hybrid_shard", "shard_group_size": 3}, world_size=4, gpus_per_node=4)


def test_tp_plan_splits_megatron_style():
    # column-parallel in, row-parallel out: one all-reduce per attention and per MLP
    assert {k for k, v in TP_PLAN.items() if v == "rowwise"} == {"self_attn.o_proj", "mlp.down_proj"}


@pytest.mark.slow
@pytest.mark.parametrize("params, mesh, rows_per_step", [
    ({"sharding": "hybrid_shard", "shard_group_size": 1}, [2, 1, 1], 2 * 2 * 2),  # 2 replicas read 2 x 2 rows each
    ({"tp_degree": 2, "activation_checkpointing": True}, [1, 1, 2], 2 * 2),       # both TP ranks read one batch
])
def test_torchrun_layout_runs_and_counts_each_row_once(tmp_path, params, mesh, rows_per_step):
    raw = trial_config(tmp_path, padding="packed", **params)  # packed: every row is seq_len real tokens
    proc, lines = torchrun(tmp_path, raw, "run", env={"NCCL_ALGO": "Ring"})
    assert proc.returncode == 0, why(proc)
    summary = lines[-1]
    assert summary["event"] == "summary" and summary["layout"]["mesh"] == mesh
    assert summary["knobs"]["sharding"] == raw["params"].get("sharding", "full_shard")
    assert all(x["tokens"] == rows_per_step * 128 for x in lines if x["event"] == "step")
    assert summary["nccl_env"]["NCCL_ALGO"] == "Ring"  # passed through, not interpreted
