"""helper.calibration: calibration files, their provenance, and the constants they resolve to."""

from __future__ import annotations

import json

import pytest

from helper import load_calibration
from helper.calibration import DEFAULT_CALIBRATION_PATH, resolve_constants
from helper.published import PUBLISHED


def test_default_calibration_loads_and_says_where_it_comes_from():
    cal = load_calibration()
    assert cal == load_calibration(DEFAULT_CALIBRATION_PATH)
    assert cal["source"].startswith("default") and "published" in cal["source"]
    for gpu in ("H100-80GB", "A100-80GB", "A100-40GB", "H200-141GB"):
        consts, _ = resolve_constants(cal, gpu)
        assert 0.2 < consts["compute_efficiency"] < 0.9
    refs = set(cal["provenance"]["references"])
    assert refs == {r["ref"] for r in PUBLISHED if r["role"] == "calibration"}
    assert cal["quality"]["n_used"] == sum(r["role"] == "calibration" for r in PUBLISHED)
    assert "cpu" in cal["provenance"]["notes"] and "H200-141GB" in cal["provenance"]["notes"]


def test_bad_calibration_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json.*not JSON"):
        load_calibration(bad)
    bad.write_text(json.dumps({"schema_version": 1, "source": "x", "constants": {"default": {"speed": 2}}}))
    with pytest.raises(ValueError, match="unknown constant"):
        load_calibration(bad)


# --- issue 13: honest error, pinned constants, noise, extrapolation ------------------------------


def test_extrapolation_is_flagged_in_the_source():
    from helper import suggest_config
    assert "extrapolated" not in suggest_config("7b", 32, "52k")["source"]
    assert "extrapolated: model size" in suggest_config("405b", 512, "52k")["source"]
    assert "extrapolated" in suggest_config("7b", 8, "52k", gpu="H200-141GB")["source"]   # no H200 data


def test_each_load_is_the_callers_own_copy():
    cal = load_calibration()
    cal["constants"]["default"]["mfu_dense"] = 123.0
    cal["source"] = "changed by a caller"
    again = load_calibration()
    assert again["constants"]["default"].get("mfu_dense") != 123.0 and again["source"] != "changed by a caller"
