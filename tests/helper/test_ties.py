"""helper.ties: the priors one GPU group's fit takes from the others' first fits."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest

import helper.fitting as fitting
from helper import fit_calibration
from helper.calibration import CONSTANTS
from helper.gpus import get_gpu
from helper.ties import ATTENTION, SHARED_ACROSS_GPUS, SHARED_TIE_SD, prior_ties
from tests.helper.test_fitting import _synthetic

KINDS = {k: spec.kind for k, spec in CONSTANTS.items()}


def _group(gpu: str) -> list:
    return [(0, SimpleNamespace(gpu=get_gpu(gpu)), None, 1.0)]


def _first(values: dict[str, float], sds: dict[str, float]) -> tuple:
    """A first fit as helper.fitting's _fit_group returns it: informed = what has an sd here."""
    return ({ATTENTION: 0.3, **values}, sorted(sds), dict(sds), True)


def test_a_shared_constant_goes_from_the_group_that_read_it_to_the_one_that_did_not():
    by_gpu = {"A100": _group("A100-80GB"), "H100-80GB": _group("H100-80GB")}
    first = {"A100": _first({"layer_overhead_s": 0.004}, {"layer_overhead_s": 0.1}),
             "H100-80GB": _first({"layer_overhead_s": 0.02}, {})}   # its rows did not inform it
    ties = prior_ties(by_gpu, first, KINDS)
    value, sd = ties["H100-80GB"]["layer_overhead_s"]
    assert value == pytest.approx(0.004)
    assert sd == pytest.approx(math.sqrt(0.1**2 + SHARED_TIE_SD**2))
    assert "layer_overhead_s" not in ties.get("A100", {})   # nothing read it elsewhere
    assert prior_ties({"A100": by_gpu["A100"]}, {"A100": first["A100"]}, KINDS) == {}   # one group: no tie


def test_readings_pool_by_precision_and_a_fraction_pools_on_the_logit_scale():
    by_gpu = {g: _group(g) for g in ("A100-80GB", "H100-80GB", "H200-141GB")}
    first = {"A100-80GB": _first({"comm_overlap_fraction": 0.5}, {"comm_overlap_fraction": 0.1}),
             "H100-80GB": _first({"comm_overlap_fraction": 0.9}, {"comm_overlap_fraction": 0.3}),
             "H200-141GB": _first({"comm_overlap_fraction": 0.7}, {})}
    value, sd = prior_ties(by_gpu, first, KINDS)["H200-141GB"]["comm_overlap_fraction"]
    w1, w2 = 1 / 0.1**2, 1 / 0.3**2
    z = (w1 * 0.0 + w2 * math.log(9.0)) / (w1 + w2)   # logit(0.5) = 0, logit(0.9) = log 9
    assert value == pytest.approx(1 / (1 + math.exp(-z)))
    assert sd == pytest.approx(math.sqrt(1 / (w1 + w2) + SHARED_TIE_SD**2))
    # the sharper reading dominates: closer to 0.5 than to 0.9
    assert 0.5 < value < 0.7


def test_what_the_chip_sets_is_not_shared():
    assert not {"compute_efficiency", "gemm_hidden_half", "bus_bw_efficiency", "host_dispatch_scale",
                ATTENTION} & set(SHARED_ACROSS_GPUS)
    assert set(SHARED_ACROSS_GPUS) <= set(CONSTANTS)


def test_a_gpu_whose_rows_barely_exercise_a_host_cost_takes_it_from_the_other_gpu(monkeypatch):
    """A100 rows of three depths at micro-batch 1-8 read the per-block host cost (truth 4 ms, the
    shipped A100 value 0.56 ms); two H100 rows at micro-batch 12 and 16 barely see it. Fitted
    together, the H100 takes the A100's reading; with the tie switched off it stays where it was."""
    truth = {"layer_overhead_s": 0.004}
    grid = [dict(gpu_count=8, micro_batch=mb, seq_len=s) for mb, s in itertools.product((1, 2, 4, 8), (1024, 4096))]
    a_rows = [m for i, size in enumerate(("350m", "1.3b", "7b"))
              for m in _synthetic(grid, truth, gpu="A100-80GB", model_size=size, num_workers=4, noise=0.01, seed=i)]
    h_rows = _synthetic([dict(gpu_count=8, micro_batch=mb, seq_len=4096) for mb in (12, 16)], truth,
                        model_size="1.3b", num_workers=4, noise=0.01, seed=9)
    together = fit_calibration(a_rows + h_rows)["constants"]
    read = together["A100-80GB"]["layer_overhead_s"]
    assert read > 0.0025                                   # the A100's rows moved it from 0.56 ms
    assert together["H100-80GB"]["layer_overhead_s"] == pytest.approx(read, rel=0.15)
    monkeypatch.setattr(fitting, "prior_ties", lambda by_gpu, first, kinds: {})
    apart = fit_calibration(a_rows + h_rows)["constants"]
    assert apart["A100-80GB"]["layer_overhead_s"] == pytest.approx(read, rel=0.05)
    assert apart["H100-80GB"]["layer_overhead_s"] < 0.5 * read   # alone, its two rows do not move it


def test_the_cpu_proxy_neither_gives_nor_takes_the_shared_constants():
    by_gpu = {"cpu": _group("cpu"), "H100-80GB": _group("H100-80GB"), "A100-80GB": _group("A100-80GB")}
    first = {"cpu": _first({"gemm_tokens_half": 1.0}, {"gemm_tokens_half": 0.1}),
             "H100-80GB": _first({"gemm_tokens_half": 1000.0}, {"gemm_tokens_half": 0.1}),
             "A100-80GB": _first({"gemm_tokens_half": 800.0}, {})}
    ties = prior_ties(by_gpu, first, KINDS)
    assert "cpu" not in ties                                          # no tensor-core tiles to share
    assert ties["A100-80GB"]["gemm_tokens_half"][0] == pytest.approx(1000.0)   # the CPU's 1.0 not pooled in
