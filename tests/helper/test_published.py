"""helper.published: the published throughputs the default calibration is fitted to and scored on."""

from __future__ import annotations

import pytest

from helper.gpus import get_gpu
from helper.measurements import measurement_plan
from helper.published import GRAND_TETON_H100, PUBLISHED
from helper.published_mosaic import MOSAIC_ROWS

ROLES = {"calibration", "validation", "reference"}


def test_every_row_says_where_it_comes_from():
    for r in PUBLISHED:
        assert r["role"] in ROLES
        assert r["ref"].startswith("https://") and r["figure"] and r["source"], r["label"]
        assert r["tokens_per_sec_per_gpu"] > 0


def test_7b_and_13b_class_jobs_are_held_out_from_the_calibration():
    cal = [r for r in PUBLISHED if r["role"] == "calibration"]
    assert cal and all(r["label"] not in ("MPT-7b", "MPT-13b") for r in cal)
    assert all(r["ref"] == PUBLISHED[0]["ref"] for r in cal)  # only llm-foundry's MPT rows calibrate
    held_out = [r for r in PUBLISHED if r["label"] in ("MPT-7b", "MPT-13b")]
    assert held_out and all(r["role"] == "validation" for r in held_out)
    assert sum(r["label"].startswith("MPT-") for r in PUBLISHED) == len(MOSAIC_ROWS)


def test_every_row_is_a_measurement_helper_can_plan():
    for r in PUBLISHED:
        plan, pad_key = measurement_plan(r)
        assert plan.gpu_count == r["gpu_count"] and pad_key is None


def test_the_llama2_reference_rows_are_gpu_hours_turned_into_tokens_per_second():
    ref = {r["label"]: r["tokens_per_sec_per_gpu"] for r in PUBLISHED if r["role"] == "reference"}
    assert ref["Llama 2 7B pre-training"] == pytest.approx(3014, abs=1)   # 2.0T tokens / 184,320 GPU-h
    assert ref["Llama 2 13B pre-training"] == pytest.approx(1507, abs=1)  # 2.0T tokens / 368,640 GPU-h


def test_the_grand_teton_h100_is_a_500_w_96_gb_h100_under_the_h100s_name():
    h100 = get_gpu("H100-80GB")
    assert GRAND_TETON_H100.name == "H100-80GB"
    assert 835e12 < GRAND_TETON_H100.peak_flops < h100.peak_flops  # the footnote's NVL-SXM range
    assert GRAND_TETON_H100.memory_gb == pytest.approx(96 * 2**30 / 1e9) and GRAND_TETON_H100.hbm_gbs == 2400.0
