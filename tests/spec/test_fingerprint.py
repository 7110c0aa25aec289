"""tuner.spec._fingerprint: the hash a study is joined by, and which spec fields it leaves out."""

import pytest

from tests.spec.test_cluster import load
from tests.spec.test_spec import MINIMAL, ROOT, write
from tuner.spec import load_spec, spec_fingerprint


def test_fingerprint_ignores_node_local_folders_but_not_knobs(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    d = spec.to_dict()
    moved = {**d, "data": {**d["data"], "cache_dir": "/elsewhere"}}
    assert spec_fingerprint(moved) == spec_fingerprint(d)
    other = {**d, "space": {**d["space"], "micro_batch": {"choices": [1, 2, 4]}}}
    assert spec_fingerprint(other) != spec_fingerprint(d)


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


def test_fingerprint_ignores_the_checkpoint_folder_but_not_the_interval(tmp_path):
    from tuner.spec import spec_fingerprint

    a = load(tmp_path, 'micro_batch = [1]', trial='checkpoint_every = 5\ncheckpoint_dir = "a"').to_dict()
    b = load(tmp_path, 'micro_batch = [1]', trial='checkpoint_every = 5\ncheckpoint_dir = "b"').to_dict()
    c = load(tmp_path, 'micro_batch = [1]', trial='checkpoint_every = 6\ncheckpoint_dir = "a"').to_dict()
    assert spec_fingerprint(a) == spec_fingerprint(b) != spec_fingerprint(c)
