"""helper.mesh: the one parallel layout type the spec, the workload, the sim and helper use."""

import pytest

from helper.mesh import Layout, hsdp_shard_size


@pytest.mark.parametrize("knobs, world, gpn, expected", [
    ({}, 8, 8, Layout(dp_shard=8)),
    ({"sharding": "shard_grad_op", "tp_degree": 1}, 32, 8, Layout(dp_shard=32)),
    ({"sharding": "hybrid_shard"}, 32, 8, Layout(dp_shard=8, dp_replicate=4)),
    ({"sharding": "hybrid_shard", "tp_degree": 2}, 32, 8, Layout(dp_shard=4, dp_replicate=4, tp=2)),
    ({"sharding": "hybrid_shard", "shard_group_size": 16}, 32, 8, Layout(dp_shard=16, dp_replicate=2)),
    ({"sharding": "full_shard", "tp_degree": 4}, 32, 8, Layout(dp_shard=8, tp=4)),
])
def test_from_knobs_names_every_factor_and_spans_the_world(knobs, world, gpn, expected):
    lay = Layout.from_knobs(knobs, world_size=world, gpus_per_node=gpn)
    assert lay == expected and lay.world_size == world
    assert lay.mesh_shape == (lay.dp_replicate, lay.dp_shard, lay.tp)
    assert lay.dp == lay.dp_replicate * lay.dp_shard


@pytest.mark.parametrize("knobs, message", [
    ({"tp_degree": 3}, "tp_degree 3 does not divide the world size 8"),
    ({"sharding": "hybrid_shard", "shard_group_size": 3},
     "HSDP shard_group_size 3 does not divide the 8 data-parallel ranks (world 8 / tp_degree 1)"),
])
def test_from_knobs_refuses_what_the_world_cannot_hold(knobs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Layout.from_knobs(knobs, world_size=8, gpus_per_node=8)


def test_check_names_every_factor():
    with pytest.raises(ValueError, match="pp 2 x dp_replicate 1 x dp_shard 4 x tp 2 = 16, not the world size 8"):
        Layout(dp_shard=4, tp=2, pp=2).check(8)
    Layout(dp_shard=4, tp=2).check(8)


@pytest.mark.parametrize("field", ["dp_shard", "dp_replicate", "tp", "pp"])
def test_a_factor_below_one_is_refused(field):
    with pytest.raises(ValueError, match=f"Layout.{field} must be an integer >= 1"):
        Layout(**{"dp_shard": 4, field: 0})


def test_names_and_the_workloads_knobs_round_trip():
    for lay in (Layout(dp_shard=32), Layout(dp_shard=8, dp_replicate=4), Layout(dp_shard=4, dp_replicate=4, tp=2)):
        assert Layout.from_knobs(lay.workload_knobs(), world_size=lay.world_size, gpus_per_node=8) == lay
    assert Layout(dp_shard=16, pp=2, tp=8).name == "pp2+fsdp+tp8"
    assert hsdp_shard_size(0, gpus_per_node=8, tp_degree=4) == 2
