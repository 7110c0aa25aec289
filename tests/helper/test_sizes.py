"""helper.sizes: model and dataset sizes parsed to a shape or a count."""

from __future__ import annotations

import pytest

from helper import parse_dataset_size, parse_model_size


@pytest.mark.parametrize("text, n", [(7e9, 7e9), ("7b", 7e9), ("7B", 7e9), ("13B", 13e9),
                                     ("1.3b", 1.3e9), ("70b", 70e9), ("350m", 350e6), (6_738_415_616, 6_738_415_616)])
def test_sizes_keep_the_exact_count_given(text, n):
    assert parse_model_size(text).n_params == n


def test_size_maps_to_nearest_preset_shape_or_a_scaled_llama():
    assert parse_model_size("7b").arch.name == "llama-2-7b"          # 3.9 % from 6.74e9
    assert parse_model_size("13B").arch.n_layers == 40
    preset = parse_model_size("llama-2-13b")
    assert preset.n_params == preset.arch.n_params
    scaled = parse_model_size("1.3b")
    assert scaled.arch.name.startswith("llama-like") and scaled.arch.hidden % scaled.arch.n_heads == 0
    assert abs(scaled.arch.n_params - 1.3e9) / 1.3e9 < 0.1


@pytest.mark.parametrize("bad", ["seven billion", "", "7x", -1, 0, True])
def test_bad_model_size_is_a_value_error(bad):
    with pytest.raises(ValueError):
        parse_model_size(bad)


@pytest.mark.parametrize("text, n", [("52k", 52_000), ("52K", 52_000), (52_000, 52_000), ("1.2M", 1_200_000),
                                     ("52_000", 52_000), ("1e5", 100_000)])
def test_dataset_sizes(text, n):
    assert parse_dataset_size(text) == n


def test_bad_dataset_size():
    with pytest.raises(ValueError, match="dataset size"):
        parse_dataset_size("lots")


def test_a_scaled_llama_solves_for_the_count_at_llama_2s_aspect_ratio():
    from helper.sizes import scaled_llama_arch

    a = scaled_llama_arch(1.3e9)
    assert (a.n_layers, a.hidden, a.n_heads) == (19, 2304, 18)
    assert a.intermediate % 256 == 0 and a.hidden % 128 == 0 and a.name == "llama-like-1.3b"
    small = scaled_llama_arch(5e7)  # under hidden 1024: heads of 64
    assert small.hidden < 1024 and small.head_dim == 64 and small.hidden % 64 == 0
    with pytest.raises(ValueError, match="positive"):
        scaled_llama_arch(0)


def test_a_shape_splits_its_count_into_the_root_unit_and_equal_blocks():
    shape = parse_model_size("llama-2-7b")
    a = shape.arch
    assert shape.root_params == 2 * a.vocab * a.hidden + a.hidden
    assert shape.root_params + a.n_layers * shape.block_params == pytest.approx(shape.n_params)
    assert shape.n_embedding_params == a.vocab * a.hidden
    mpt = parse_model_size("mpt-7b")
    assert mpt.n_embedding_params == mpt.arch.max_seq_len * mpt.arch.hidden  # only wpe is a lookup


def test_a_count_near_a_preset_is_labelled_by_the_count_with_the_shape_it_borrows():
    assert parse_model_size("7b").label == "7b (llama-2-7b shape)"
    assert parse_model_size("llama-2-7b").label == "llama-2-7b"
    assert parse_model_size(parse_model_size("7b")) == parse_model_size("7b")


def test_sizes_module_doctests_run():
    import doctest

    import helper.sizes
    result = doctest.testmod(helper.sizes)
    assert result.failed == 0 and result.attempted > 0
