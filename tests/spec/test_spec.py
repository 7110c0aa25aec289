"""Spec validation: every bad input fails with one line naming file, key and problem."""

import textwrap
from pathlib import Path

import pytest

from tuner.spec import SpecError, load_spec, parse_spec, spec_fingerprint

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
[study]
name = "s"
[model]
preset = "tiny"
seq_len = 64
[cluster]
gpus_per_node = 2
backend = "gloo"
gpu = "cpu"
[space]
micro_batch = [1, 2]
num_workers = [0, 2]
prefetch_factor = [2, 4]
[baseline]
micro_batch = 1
num_workers = 0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_specs_are_valid():
    quick = load_spec(ROOT / "studies/quickstart.toml")
    assert quick.cluster.world_size == 2 and quick.cluster.backend == "gloo"
    assert quick.model.preset == "tiny" and quick.data.source == "synthetic"
    big = load_spec(ROOT / "studies/llama7b-h100x32.toml")
    assert big.cluster.world_size == 32 and big.model.preset == "llama-2-7b"
    assert {"nccl_algo", "nccl_proto", "num_workers", "prefetch_factor", "grad_accum", "micro_batch"} <= set(big.knob_names)
    assert big.budget_gpu_seconds == 40 * 3600


def test_minimal_spec_defaults(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.trial.measure_steps == 8 and spec.study.sampler == "auto"
    assert spec.knob("micro_batch").choices == (1, 2)
    assert Path(spec.data.cache_dir).is_absolute()


@pytest.mark.parametrize("edit, key, problem", [
    (("[space]\n", "[space]\nwarp_speed = [1]\n"), "space.warp_speed", "unknown knob"),
    (("micro_batch = [1, 2]", "micro_batch = []"), "space.micro_batch", "empty list"),
    (("micro_batch = [1, 2]", "micro_batch = {low = 4, high = 2}"), "space.micro_batch", "empty range"),
    (("micro_batch = [1, 2]", "micro_batch = [0, 2]"), "space.micro_batch", "not an integer >= 1"),
    (("num_workers = [0, 2]", "num_workers = [0]"), "space.prefetch_factor", "only applies when num_workers > 0"),
    (("micro_batch = [1, 2]", 'micro_batch = {low = "1", high = 4}'), "space.micro_batch.low", "is not a number"),
    (("micro_batch = 1\nnum", 'micro_batch = "1"\nnum'), "baseline.micro_batch", "not an integer >= 1"),
    (("[space]\n", '[space]\nsharding = ["full_shard", "fsdp"]\n'), "space.sharding", "unknown sharding 'fsdp'"),
    (("[space]\n", '[space]\nreshard_after_forward = [true, false]\nsharding = ["shard_grad_op"]\n'),
     "space.reshard_after_forward", "only applies when sharding != shard_grad_op"),
    (('preset = "tiny"', 'preset = "gpt-5"'), "model.preset", "unknown preset"),
    (('preset = "tiny"', 'preset = "tiny"\nstack = "deepspeed"'), "model.stack", "unknown stack 'deepspeed'"),
    (("seq_len = 64", 'seq_len = "long"'), "model.seq_len", "expected int"),
    (('backend = "gloo"', 'backend = "mpi"'), "cluster.backend", "unknown backend"),
    (("[cluster]", "[cluster]\nspeed = 3"), "cluster.speed", "unknown key"),
    (("micro_batch = 1\nnum", "micro_batch = 3\nnum"), "baseline.micro_batch", "outside the space"),
    (("num_workers = 0\n", "num_workers = 0\nprefetch_factor = 2\n"), "baseline.prefetch_factor",
     "only applies when num_workers > 0"),
    (('[study]\nname = "s"', '[study]\nname = "s"\nsampler = "magic"'), "study.sampler", "unknown sampler"),
    (('[study]\nname = "s"', '[study]\nname = "../s"'), "study.name", "outside the runs folder"),
    (("[model]", '[budget]\nlimit = "lots"\n[model]'), "budget.limit", "bad budget"),
    (('gpu = "cpu"', 'launcher = "sim"\ngpu = "h100"'), "cluster.gpu", "no model of GPU 'h100'"),
])
def test_bad_spec_names_file_key_and_problem(tmp_path, edit, key, problem):
    text = textwrap.dedent(MINIMAL).replace(*edit, 1)
    assert text != textwrap.dedent(MINIMAL), "the edit must change the spec"
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and key in message and problem in message


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "nope.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "[study\nname="))


def test_relative_paths_resolve_against_the_spec(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "a", "input": "", "output": "b"}\n')
    text = textwrap.dedent(MINIMAL).replace("[cluster]", '[data]\nsource = "data/train.jsonl"\n[cluster]')
    spec = load_spec(write(tmp_path, text))
    assert spec.data.source == str(tmp_path / "data" / "train.jsonl")
    missing = textwrap.dedent(MINIMAL).replace("[cluster]", '[data]\nsource = "data/none.jsonl"\n[cluster]')
    with pytest.raises(SpecError, match="data.source: .* does not exist"):
        load_spec(write(tmp_path, missing))


def test_fingerprint_ignores_node_local_folders_but_not_knobs(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    d = spec.to_dict()
    moved = {**d, "data": {**d["data"], "cache_dir": "/elsewhere"}}
    assert spec_fingerprint(moved) == spec_fingerprint(d)
    other = {**d, "space": {**d["space"], "micro_batch": {"choices": [1, 2, 4]}}}
    assert spec_fingerprint(other) != spec_fingerprint(d)


# What the release before issue 16 (commit 7556943) computed for these shipped specs: a study it
# created must stay joinable (checkpoint_every/checkpoint_mode are left out at their defaults).
PREVIOUS_RELEASE_FINGERPRINTS = {
    # specs whose files are unchanged since that release (studies/quickstart.toml was retuned for
    # warm trials, so its own fingerprint changed with its content)
    "studies/llama7b-h100x32.toml": "b35d0c644e323fd6eb0a775e40e0f6e579ec96c71afe479a8888a4017f32f689",
    "studies/sim-llama13b-h100x8.toml": "aa1668c5042c174c6f0330088de4d510d6902b779dfbe14d91208e249675f7c7",
    "studies/sim-llama1b-a100x16.toml": "1fb2696ba2f93432ac81401a32391c9579d6be9341999ae62d3e6e0753415bb2",
}


@pytest.mark.parametrize("path", sorted(PREVIOUS_RELEASE_FINGERPRINTS))
def test_fingerprint_matches_the_previous_release_until_a_new_field_is_set(path):
    spec = load_spec(ROOT / path)
    d = spec.to_dict()
    assert d["trial"]["checkpoint_every"] == 0  # the new fields are in the stored spec ...
    assert spec_fingerprint(d) == PREVIOUS_RELEASE_FINGERPRINTS[path]  # ... but not in the fingerprint
    for key, value in (("checkpoint_every", 50), ("checkpoint_mode", "async")):
        changed = {**d, "trial": {**d["trial"], key: value}}
        assert spec_fingerprint(changed) != PREVIOUS_RELEASE_FINGERPRINTS[path], key


def test_fingerprint_when_set_names_fields_a_spec_has(tmp_path):
    from tuner.spec import FINGERPRINT_WHEN_SET
    d = load_spec(write(tmp_path, MINIMAL)).to_dict()
    for section, name in FINGERPRINT_WHEN_SET:
        assert name in d[section], (section, name)  # a typo here would silently fingerprint it


def test_to_dict_round_trips_through_parse(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    d = spec.to_dict()
    assert d["space"]["micro_batch"] == {"choices": [1, 2]}
    raw = {k: v for k, v in d.items() if k not in ("budget", "space", "baseline")}
    raw["space"] = {name: v["choices"] for name, v in d["space"].items()}
    raw["baseline"] = d["baseline"]
    again = parse_spec(raw, base_dir=tmp_path)
    assert again.to_dict() == d
