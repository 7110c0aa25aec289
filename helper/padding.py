"""Padding and packing: how many of a step's computed tokens are real, for each padding mode.

The trial workload pads rows to ``seq_len`` (``max_length``), to the micro-batch's longest
example (``longest``), or packs examples into full rows (``packed``); these functions say what
share of the computed tokens is real and how many examples a row holds.
"""

from __future__ import annotations

import math

__all__ = ["DEFAULT_MEAN_TOKENS_PER_EXAMPLE", "estimate_padding_efficiency", "padded_rows"]

DEFAULT_MEAN_TOKENS_PER_EXAMPLE = 256
"""Assumed mean tokens per example (prompt template + instruction + response of Alpaca-style
data with a Llama tokenizer is a few hundred tokens). An assumption: pass your data's mean."""


def estimate_padding_efficiency(padding: str, *, seq_len: int,
                                mean_tokens_per_example: float = DEFAULT_MEAN_TOKENS_PER_EXAMPLE,
                                micro_batch: int = 1, length_cv: float = 0.5) -> float:
    """Share of computed tokens that are real for a padding mode of the objective.

    ``packed`` fills every row (1.0); ``max_length`` pads every row to ``seq_len``;
    ``longest`` pads to the longest of the micro-batch, whose expected length we take as
    ``mean x (1 + cv x sqrt(2 ln b))`` (the expected maximum of b normal draws), capped at
    ``seq_len``. Example lengths are assumed to have coefficient of variation ``length_cv``.

    Example:
        >>> estimate_padding_efficiency("max_length", seq_len=2048)
        0.125
    """
    mean = min(float(mean_tokens_per_example), float(seq_len))
    mode = str(padding).lower()
    if mode == "packed":
        return 1.0
    if mode == "max_length":
        return mean / seq_len
    if mode == "longest":
        spread = length_cv * math.sqrt(2 * math.log(micro_batch)) if micro_batch > 1 else 0.0
        return mean / min(float(seq_len), mean * (1 + spread))
    raise ValueError(f"unknown padding {padding!r}; one of packed, max_length, longest")


def padded_rows(padding: str, seq_len: int, micro_batch: int, mean_tokens: float | None = None) -> tuple[int, float, float]:
    """(computed row length, non-padding share, examples per row) of a padding mode, for
    examples of ``mean_tokens`` tokens (helper's default length when None).

    Example:
        >>> padded_rows("max_length", 2048, 4, 256.0)
        (2048, 0.125, 1.0)
        >>> padded_rows("packed", 2048, 4, 256.0)
        (2048, 1.0, 8.0)
    """
    mean = min(float(DEFAULT_MEAN_TOKENS_PER_EXAMPLE if mean_tokens is None else mean_tokens), float(seq_len))
    efficiency = estimate_padding_efficiency(padding, seq_len=seq_len, micro_batch=micro_batch,
                                             mean_tokens_per_example=mean)
    if padding == "packed":
        return seq_len, 1.0, seq_len / mean
    if padding == "longest":
        row = min(seq_len, max(1, math.ceil(mean / efficiency)))
        return row, mean / row, 1.0
    return seq_len, efficiency, 1.0
