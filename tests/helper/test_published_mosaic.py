"""helper.published_mosaic: llm-foundry's MPT benchmark rows, checked against the README's own columns."""

from __future__ import annotations

import dataclasses

import pytest

from helper.gpus import GPUS
from helper.presets import REFERENCE_ARCHS
from helper.published_mosaic import MOSAIC_ROWS, MOSAIC_TABLE_NAMES, MOSAIC_TABLES


def test_the_source_is_a_permalink_to_the_commit_read():
    assert MOSAIC_TABLES.startswith("https://github.com/mosaicml/llm-foundry/blob/8c8dd48f7216")
    assert MOSAIC_TABLES.endswith("scripts/train/benchmarking/README.md")


def test_every_row_is_a_known_table_on_a_gpu_helper_knows_in_the_studied_range():
    assert {gpu for _, gpu in MOSAIC_TABLE_NAMES.values()} <= set(GPUS)
    for table, model, seq, gpus, mb, ga, ac, sharding, tps, _ in MOSAIC_ROWS:
        assert table in MOSAIC_TABLE_NAMES
        assert f"mpt-{model}" in REFERENCE_ARCHS
        assert 1024 <= seq <= 32768 and gpus >= 8 and mb >= 1 and ga >= 1 and tps > 0
        assert sharding in ("zero3", "zero2") and isinstance(ac, bool)
    assert min(r[3] for r in MOSAIC_ROWS if r[0] == "H100_LARGE") >= 128  # ">= 128 GPUs" table
    assert len({r[:8] for r in MOSAIC_ROWS}) == len(MOSAIC_ROWS)  # no row read twice


def test_the_num_params_column_matches_the_mpt_shapes():
    """helper.presets: with max_seq_len 2048 the yaml shapes match NumParams within 0.1 %;
    longer rows add their learned position embedding."""
    for _, model, seq, *_, n_params in MOSAIC_ROWS:
        arch = REFERENCE_ARCHS[f"mpt-{model}"]
        if seq == 2048:
            assert arch.n_params == pytest.approx(n_params, rel=1e-3), model
        longer = dataclasses.replace(arch, max_seq_len=max(2048, seq))
        assert longer.n_params == pytest.approx(n_params, rel=1e-2), (model, seq)
