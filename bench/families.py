"""The synthetic study families of bench/synthetic_studies.py: each knob space, its baseline and
its known truth (shared by bench.synthetic_studies, bench.importance_truth and bench.stats_families).

Each family is a dict: ``space`` (knob -> levels), ``baseline`` (the team's config),
``truth`` (params -> true tokens/s/GPU), ``top3`` (the knobs with the largest effects),
``placebo`` (knobs without any effect), ``n_search`` (search trials); optionally ``p_fail``
(params -> the probability a run fails) and ``favour`` ((knob, level, probability): the
samplers' preference for that level). Families:

- ``crossover``: nccl_algo x nccl_proto matter only together (+15% on the diagonal), micro_batch
  (+10%/+20%), padding (+3%), and grad_accum as a 6-level placebo; 60 search trials.
- ``conditional``: num_workers (+12% for any > 0), prefetch_factor conditional on it and
  without effect, micro_batch, padding (+8%), nccl_proto placebo; 60 search trials.
- ``small``: ``conditional`` with 12 search trials.
- ``failures``: micro_batch 8 is the fastest (+35%) and fails 70% of its runs; samplers
  favour it (half the trials), so ~35% of all trials fail; 60 search trials.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FAMILIES"]


def _crossover(p: dict[str, Any]) -> float:
    diag = (p["nccl_algo"] == "Ring") == (p["nccl_proto"] == "Simple")
    return 1000.0 * (1.15 if diag else 1.0) * {1: 1.0, 2: 1.10, 4: 1.20}[p["micro_batch"]] \
        * (1.03 if p["padding"] == "packed" else 1.0)


def _conditional(p: dict[str, Any]) -> float:
    return 1000.0 * (1.12 if p["num_workers"] > 0 else 1.0) * {1: 1.0, 2: 1.10, 4: 1.20}[p["micro_batch"]] \
        * (1.08 if p["padding"] == "packed" else 1.0)


def _failures(p: dict[str, Any]) -> float:
    return 1000.0 * {1: 1.0, 2: 1.10, 4: 1.20, 8: 1.35}[p["micro_batch"]] \
        * (1.10 if p["num_workers"] > 0 else 1.0) * (1.08 if p["padding"] == "packed" else 1.0)


FAMILIES: dict[str, dict[str, Any]] = {
    "crossover": {"space": {"nccl_algo": ["Ring", "Tree"], "nccl_proto": ["LL", "Simple"], "micro_batch": [1, 2, 4],
                            "padding": ["max_length", "packed"], "grad_accum": [1, 2, 4, 8, 16, 32]},
                  "baseline": {"nccl_algo": "Tree", "nccl_proto": "Simple", "micro_batch": 1,
                               "padding": "max_length", "grad_accum": 1},
                  "truth": _crossover, "top3": {"nccl_algo", "nccl_proto", "micro_batch"},
                  "placebo": {"grad_accum"}, "n_search": 60},
    "conditional": {"space": {"num_workers": [0, 2, 4], "prefetch_factor": [2, 4], "micro_batch": [1, 2, 4],
                              "padding": ["max_length", "packed"], "nccl_proto": ["default", "Simple", "LL"]},
                    "baseline": {"num_workers": 0, "micro_batch": 1, "padding": "max_length", "nccl_proto": "default"},
                    "truth": _conditional, "top3": {"num_workers", "micro_batch", "padding"},
                    "placebo": {"prefetch_factor", "nccl_proto"}, "n_search": 60},
    "failures": {"space": {"micro_batch": [1, 2, 4, 8], "num_workers": [0, 2], "padding": ["max_length", "packed"],
                           "nccl_proto": ["default", "Simple", "LL"]},
                 "baseline": {"micro_batch": 1, "num_workers": 0, "padding": "max_length", "nccl_proto": "default"},
                 "truth": _failures, "top3": {"micro_batch", "num_workers", "padding"},
                 "placebo": {"nccl_proto"}, "n_search": 60,
                 "p_fail": lambda p: 0.7 if p["micro_batch"] == 8 else 0.0,
                 "favour": ("micro_batch", 8, 0.5)},
}
FAMILIES["small"] = {**FAMILIES["conditional"], "n_search": 12}
