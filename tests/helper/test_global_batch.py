"""helper.global_batch: one global batch for every layout; micro-batch x accumulation within a tolerance."""

import pytest

from helper.global_batch import BATCH_TOLERANCE, common_global_batch, micro_batch_candidates, split_global_batch


@pytest.mark.parametrize("target, dps", [(2065, [32, 16, 8, 4]), (7168, [256, 128, 64, 32]), (963, [12, 6, 3]),
                                         (4611, [64, 32, 16, 8])])
def test_the_common_batch_is_near_the_target_and_every_layout_can_run_it(target, dps):
    gb = common_global_batch(target, dps)
    assert abs(gb / target - 1) <= BATCH_TOLERANCE and all(gb % d == 0 for d in dps)


def test_a_target_below_the_largest_degree_takes_one_row_per_rank():
    assert common_global_batch(10, [32, 16]) == 32


@pytest.mark.parametrize("per_rank", [269, 97, 131, 1009])
def test_a_prime_batch_is_split_near_not_exactly(per_rank):
    mb, ga = split_global_batch(8 * per_rank, 8, lambda mb, ga: mb <= 8)
    assert mb == 8 and abs(mb * ga * 8 / (8 * per_rank) - 1) <= BATCH_TOLERANCE


def test_memory_decides_the_micro_batch_and_nothing_fitting_is_none():
    assert split_global_batch(512, 16, lambda mb, ga: mb <= 2) == (2, 16)
    assert split_global_batch(512, 16, lambda mb, ga: False) is None
    assert micro_batch_candidates(28, 64) == [28, 16, 14, 8, 7, 4, 2, 1]     # never more rows than a rank has
