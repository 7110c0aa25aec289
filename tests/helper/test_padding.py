"""helper.padding: the real share of the computed tokens, and the row a padding mode computes."""

from __future__ import annotations

import pytest

from helper.padding import DEFAULT_MEAN_TOKENS_PER_EXAMPLE, estimate_padding_efficiency, padded_rows


def test_packed_rows_are_all_real_max_length_pads_to_seq_len_and_longest_shrinks_with_the_batch():
    assert estimate_padding_efficiency("packed", seq_len=2048) == 1.0
    assert estimate_padding_efficiency("max_length", seq_len=2048, mean_tokens_per_example=512) == 0.25
    longest = [estimate_padding_efficiency("longest", seq_len=2048, micro_batch=b) for b in (1, 2, 8, 64)]
    assert longest[0] == 1.0 and longest == sorted(longest, reverse=True)


def test_longest_pads_to_the_expected_maximum_of_the_batch_capped_at_seq_len():
    import math

    # mean x (1 + cv x sqrt(2 ln b)): 256 x (1 + 0.5 x sqrt(2 ln 8))
    expected = 1 / (1 + 0.5 * math.sqrt(2 * math.log(8)))
    assert estimate_padding_efficiency("longest", seq_len=2048, micro_batch=8) == pytest.approx(expected)
    # the longest row cannot exceed seq_len: 256-token examples in 300-token rows
    assert estimate_padding_efficiency("longest", seq_len=300, micro_batch=64) == pytest.approx(256 / 300)
    # an example longer than the row is cut to the row
    assert estimate_padding_efficiency("max_length", seq_len=128, mean_tokens_per_example=512) == 1.0


def test_an_unknown_padding_mode_is_a_value_error_naming_the_modes():
    with pytest.raises(ValueError, match="packed, max_length, longest"):
        estimate_padding_efficiency("ragged", seq_len=2048)


def test_longest_computes_a_shorter_row_of_one_example():
    row, eff, per_row = padded_rows("longest", 2048, 8)
    assert per_row == 1.0 and row < 2048
    assert eff == pytest.approx(DEFAULT_MEAN_TOKENS_PER_EXAMPLE / row)


def test_padding_module_doctests_run():
    import doctest

    import helper.padding
    result = doctest.testmod(helper.padding)
    assert result.failed == 0 and result.attempted > 0


def test_padded_rows_packed_and_max_length():
    assert padded_rows("max_length", 1024, 2, 256.0) == (1024, 0.25, 1.0)
    row, eff, per_row = padded_rows("packed", 1024, 2, 256.0)
    assert (row, eff, per_row) == (1024, 1.0, 4.0)
