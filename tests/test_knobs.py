"""The knob catalogue: one entry per knob, read by everything else."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import knobs
from tuner.knobs import KNOBS, RECONFIGURE

ROOT = Path(__file__).resolve().parents[1]


def test_every_entry_is_complete_and_consistent():
    for name, k in KNOBS.items():
        assert k.name == name and k.meaning and k.reconfigure in RECONFIGURE
        assert knobs.value_problem(name, k.default) is None, f"{name}'s default is not one of its values"
        if k.active_when:
            parent, op, target = k.active_when
            assert parent in KNOBS and op in (">", ">=", "==", "!=")
            assert knobs.value_problem(parent, target) is None or KNOBS[parent].kind == "int"
    assert set(knobs.LAUNCH_KNOBS) == {"nccl_algo", "nccl_proto"}
    assert {"sharding", "reshard_after_forward", "prefetch_factor"} <= set(knobs.WORKLOAD_KNOBS)


@pytest.mark.parametrize("name, value, problem", [
    ("micro_batch", 0, "not an integer >= 1"), ("micro_batch", True, "not an integer"),
    ("num_workers", -1, "not an integer >= 0"), ("padding", "ragged", "unknown padding"),
    ("sharding", "zero3", "unknown sharding 'zero3'"), ("activation_checkpointing", "yes", "true/false"),
    ("nccl_algo", "", "NCCL value string"), ("nccl_proto", 3, "NCCL value string"),
])
def test_bad_values_are_named(name, value, problem):
    assert problem in knobs.value_problem(name, value)


def test_conditional_knobs_follow_their_parent():
    assert not knobs.is_active("prefetch_factor", {}) and knobs.is_active("prefetch_factor", {"num_workers": 1})
    assert knobs.is_active("reshard_after_forward", {}) and not knobs.is_active(
        "reshard_after_forward", {"sharding": "shard_grad_op"})
    assert knobs.ordered(["prefetch_factor", "reshard_after_forward", "num_workers", "sharding"]) == [
        "num_workers", "sharding", "prefetch_factor", "reshard_after_forward"]
    full = knobs.resolve({"sharding": "shard_grad_op", "num_workers": 2}, {"activation_checkpointing": True})
    assert "reshard_after_forward" not in full and full["prefetch_factor"] == 2
    assert full["activation_checkpointing"] is True and full["nccl_algo"] == "default"
    assert knobs.fsdp_reshard_after_forward(full) is False
    assert knobs.fsdp_reshard_after_forward(knobs.resolve({"reshard_after_forward": False})) is False
    assert knobs.fsdp_reshard_after_forward(knobs.resolve({})) is True


def test_environment_default_means_unset_and_values_pass_verbatim():
    env = knobs.environment({"nccl_algo": "default", "nccl_proto": "LL128"}, {"NCCL_ALGO": "Tree", "X": "1"})
    assert env == {"NCCL_PROTO": "LL128", "X": "1"}
    assert knobs.environment({"nccl_algo": "allgather:ring;reducescatter:ring"}, {})["NCCL_ALGO"] == \
        "allgather:ring;reducescatter:ring"


def test_reconfiguration_is_the_heaviest_change():
    base = {"micro_batch": 1, "padding": "packed"}
    assert knobs.reconfiguration(base, {**base, "grad_accum": 4}) == "none"
    assert knobs.reconfiguration(base, {**base, "num_workers": 2}) == "data_loader"
    assert knobs.reconfiguration(base, {**base, "sharding": "shard_grad_op", "num_workers": 2}) == "model"
    assert knobs.reconfiguration(base, {**base, "nccl_algo": "Ring", "sharding": "shard_grad_op"}) == "communicators"


def test_a_new_knob_is_one_entry(monkeypatch):
    """Adding an entry is enough for spec validation, the space and the trial config to know it."""
    import tuner.spec._spec as spec_module
    from tuner import spec

    entry = knobs.Knob(name="compile", kind="bool", default=False, reconfigure="model", meaning="torch.compile")
    monkeypatch.setitem(KNOBS, "compile", entry)
    monkeypatch.setattr(spec_module, "KNOWN_KNOBS", tuple(KNOBS))
    parsed = spec.parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"},
                              "space": {"compile": [True, False], "micro_batch": [1, 2]}})
    assert parsed.knob("compile").choices == (True, False)
    assert spec.complete_params({"micro_batch": 2}, parsed)["compile"] is False
    with pytest.raises(spec.SpecError, match="space.compile: 3 is not true/false"):
        spec.parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"}, "space": {"compile": [3]}})
    assert dataclasses.asdict(entry)["name"] == "compile"


def test_the_catalogue_and_the_protocol_load_no_control_plane():
    code = ("import objectives.fsdp_finetune, sys; bad = {'optuna', 'sqlalchemy'} & set(sys.modules); "
            "print(sorted(bad))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == []
