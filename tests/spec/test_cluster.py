"""tuner/spec/_cluster.py: layouts a cluster cannot hold are one line at spec load naming the
key; the sim launcher takes every layout knob and checkpoints."""

import textwrap
from pathlib import Path

import pytest

from helper.mesh import hsdp_shard_size
from tuner.spec import SpecError, layout_problem, load_spec, space_layout_problem

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
[study]
name = "s"
[model]
preset = "tiny"
seq_len = 64
[cluster]
launcher = "{launcher}"
nodes = {nodes}
gpus_per_node = {gpn}
backend = "gloo"
gpu = "{gpu}"
[trial]
{trial}
[space]
{space}
"""


def load(tmp_path, space, *, launcher="local", nodes=1, gpn=4, gpu="cpu", trial=""):
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(SPEC.format(launcher=launcher, nodes=nodes, gpn=gpn, gpu=gpu, trial=trial,
                                                space=space)))
    return load_spec(path)


def test_hsdp_default_shard_group_is_the_node_less_tp():
    assert hsdp_shard_size(0, gpus_per_node=8, tp_degree=1) == 8
    assert hsdp_shard_size(0, gpus_per_node=8, tp_degree=4) == 2
    assert hsdp_shard_size(2, gpus_per_node=8, tp_degree=4) == 2


def test_valid_layouts_pass():
    assert layout_problem({"tp_degree": 4, "sharding": "hybrid_shard"}, world_size=32, gpus_per_node=8,
                          n_heads=40, n_kv_heads=40) is None
    assert space_layout_problem({"sharding": ["full_shard", "hybrid_shard"], "tp_degree": [1, 2],
                                 "shard_group_size": [2]}, {}, world_size=4, gpus_per_node=4) is None


@pytest.mark.parametrize("space, kwargs, key, problem", [
    ('tp_degree = [1, 3]', {}, "space.tp_degree", "tp_degree 3 does not divide the 4 GPUs per node"),
    ('tp_degree = [8]', {"gpn": 8, "nodes": 1}, "space.tp_degree", "does not divide the model's 4 attention heads"),
    ('sharding = ["hybrid_shard"]\nshard_group_size = [3]', {}, "space.shard_group_size",
     "HSDP shard_group_size 3 does not divide the 4 data-parallel ranks"),
    ('sharding = ["hybrid_shard"]\ntp_degree = [1, 2]\nshard_group_size = [4]', {}, "space.shard_group_size",
     "does not divide the 2 data-parallel ranks (world 4 / tp_degree 2)"),
    ('micro_batch = [1]', {"trial": "checkpoint_every = 5"}, "trial.checkpoint_dir", "needs a checkpoint_dir"),
    ('micro_batch = [1]', {"trial": 'checkpoint_every = 5\ncheckpoint_dir = "c"\ncheckpoint_mode = "x"'},
     "trial.checkpoint_mode", "one of sync, async"),
])
def test_impossible_layouts_fail_at_load_naming_the_key(tmp_path, space, kwargs, key, problem):
    with pytest.raises(SpecError) as err:
        load(tmp_path, space, **kwargs)
    line = str(err.value)
    assert "\n" not in line and f": {key}: " in line and problem in line


def test_the_sim_launcher_takes_a_layout_search_and_checkpoints(tmp_path):
    """helper.layouts and helper.checkpointing model them (tuner/model/_layouts.py)."""
    spec = load(tmp_path, 'sharding = ["full_shard", "hybrid_shard"]\ntp_degree = [1, 2]', gpu="H100-80GB",
                trial='checkpoint_every = 5\ncheckpoint_dir = "c"')
    assert spec.with_launcher("sim").cluster.launcher == "sim"
    assert spec.with_launcher("local").cluster.launcher == "local"
    assert load(tmp_path, 'tp_degree = [1, 2]', launcher="sim", gpu="H100-80GB").cluster.launcher == "sim"


def test_checkpoint_dir_resolves_against_the_spec(tmp_path):
    spec = load(tmp_path, 'micro_batch = [1]', trial='checkpoint_every = 5\ncheckpoint_dir = "ckpt"')
    assert spec.trial.checkpoint_dir == str((tmp_path / "ckpt").resolve())


def test_the_shipped_layout_study_loads():
    spec = load_spec(ROOT / "studies/cpu-layouts.toml")
    assert set(spec.knob_names) >= {"sharding", "tp_degree"} and spec.cluster.world_size == 4


def test_a_gpu_helper_does_not_model_is_named_with_what_the_search_goes_without():
    from tuner.spec import unknown_gpu_note

    assert unknown_gpu_note("cpu") is None and unknown_gpu_note("A100-80GB") is None
    note = unknown_gpu_note("L40S")
    assert note.startswith("cluster.gpu 'L40S' is not a GPU helper models (it models A100-40GB, ")
    assert "without helper's predictions and memory screening" in note
    assert "did you mean 'A100-80GB'" in unknown_gpu_note("A100-80")
