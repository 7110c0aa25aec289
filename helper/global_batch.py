"""One global batch for every layout compared, and its split into micro-batch x accumulation.

A plan compares layouts under one recipe: the same sequences per optimizer step for all of
them (the optimizer sees the same batch whatever the layout), so throughput and steps compare
like with like. :func:`common_global_batch` picks that batch near the target: a multiple of
every layout's data-parallel degree, and among those within ``tolerance`` of the target the one
with the most factors of two (micro-batches are powers of two in practice), so each layout can
split it exactly. :func:`split_global_batch` splits a batch for one layout: the largest
micro-batch that fits, and an accumulation factor that reaches the batch within ``tolerance``
(a prime batch is rounded to a nearby one, not run at micro-batch 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

__all__ = ["BATCH_TOLERANCE", "common_global_batch", "split_global_batch", "micro_batch_candidates"]

BATCH_TOLERANCE = 0.05
"""A global batch within 5 % of its target trains the same: the loss is flat in the batch size near
the critical batch (McCandlish et al. 2018, arXiv 1812.06162, Fig. 3), so a rounding this small
is a free choice, not a change of recipe."""


def _twos(n: int) -> int:
    return (n & -n).bit_length() - 1 if n > 0 else 0


def common_global_batch(target_sequences: float, data_parallel_degrees: Iterable[int], *,
                        tolerance: float = BATCH_TOLERANCE) -> int:
    """Sequences per optimizer step for every layout: a multiple of each data-parallel degree.

    Among the multiples of the degrees' least common multiple within ``tolerance`` of the
    target, the one with the most factors of two (then the nearest); when none is that close,
    the nearest multiple (at least one).

    Example:
        >>> common_global_batch(2065, [32, 16, 8])      # 4.23M tokens of 2048: 2048 = 64 x 32
        2048
        >>> common_global_batch(100, [12, 6])           # 96 = 8 x 12, within 5 %
        96
    """
    lcm = 1
    for d in data_parallel_degrees:
        lcm = math.lcm(lcm, int(d))
    lo = max(1, math.ceil(target_sequences * (1 - tolerance) / lcm))
    hi = max(lo, math.floor(target_sequences * (1 + tolerance) / lcm))
    near = [k for k in range(lo, hi + 1) if abs(k * lcm - target_sequences) <= tolerance * target_sequences]
    if not near:
        return max(1, round(target_sequences / lcm)) * lcm
    return lcm * max(near, key=lambda k: (_twos(k), -abs(k * lcm - target_sequences)))


def micro_batch_candidates(rows_per_rank: int, max_micro_batch: int) -> list[int]:
    """Micro-batches worth trying, largest first: the divisors of ``rows_per_rank`` and the powers of two.

    Example:
        >>> micro_batch_candidates(24, 16)
        [16, 12, 8, 6, 4, 3, 2, 1]
    """
    top = max(1, min(rows_per_rank, max_micro_batch))
    divisors = {d for d in range(1, top + 1) if rows_per_rank % d == 0}
    powers = {2 ** k for k in range(int(math.log2(top)) + 1)}
    return sorted(divisors | powers, reverse=True)


def split_global_batch(global_batch: int, ranks: int, fits: Callable[[int, int], bool], *,
                       max_micro_batch: int = 64, tolerance: float = BATCH_TOLERANCE) -> tuple[int, int] | None:
    """``(micro_batch, grad_accum)`` for ``ranks`` data-parallel ranks, or None when nothing fits.

    The largest micro-batch ``fits(micro_batch, grad_accum)`` accepts whose accumulation factor
    ``round(global_batch / (ranks x micro_batch))`` lands within ``tolerance`` of the batch;
    when none does (a batch under one sequence per rank), the largest that fits.

    Example:
        >>> split_global_batch(8 * 269, 8, lambda mb, ga: mb <= 4)   # a prime per-GPU batch
        (4, 67)
        >>> split_global_batch(512, 16, lambda mb, ga: mb <= 8)
        (8, 4)
    """
    rows = global_batch / ranks
    fitting = []
    for mb in micro_batch_candidates(max(1, round(rows)), max_micro_batch):
        ga = max(1, round(rows / mb))
        if fits(mb, ga):
            fitting.append((mb, ga))
            if abs(mb * ga * ranks - global_batch) <= tolerance * global_batch:
                return mb, ga
    return fitting[0] if fitting else None
