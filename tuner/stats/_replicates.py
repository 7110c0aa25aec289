"""Reverts measured again: the ablation's one-knob runs whose slowdown one run could not decide.

The ablation measures each one-knob revert (or move) once, against the round's best measured
two or three times. One launch of a revert carries the launch-to-launch variation whole, and
the study knows that variation to a few degrees of freedom; a straggler step in its eight
measured steps leaves it with a +-50% interval. So a knob worth 10-15% is often read as a
slowdown that Holm's correction cannot call (docs/benchmarks.md: issue 29's `small` family,
where every missed large effect had been ablated and read slower, not significant).

Once the runoff is planned, what the ablation share still affords measures again those that
read at least :data:`MIN_SLOWDOWN` slower: in rounds, each once a round in the order of their
one-sided p-values (the most nearly decided first), up to :data:`MAX_REPLICATES` more runs each.
A revert that read *faster* than the best is not one: it is a finalist of the runoff, which
measures it again already; nor is a slower one the runoff measures as a finalist. The
analysis then reads each knob from all of its revert's runs (tuner.stats'
``ablation_effects``). The decision to measure more reads the first run, so the final test is
a second look: knobs without an effect are listed a little more often (docs/statistics.md,
section 2).

Pure functions over TrialRecords; the admission's ``ablation_plan`` (tuner.study) calls
:func:`revert_replicates` in the runoff's stage.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tuner.stats._configs import RunCIs, run_variance
from tuner.stats._drift import run_cis
from tuner.stats._failures import config_key
from tuner.stats._recommend import ablation_effects
from tuner.stats._record import TrialRecord

__all__ = ["undecided_slowdowns", "revert_replicates", "MIN_SLOWDOWN", "MAX_REPLICATES"]

MAX_REPLICATES = 3
"""More runs of one revert at most: with its first, four, as the runoff gives a finalist
(tuner.stats' MAX_ROUNDS). Round by round, each undecided revert once a round, so that drift
over the stage hits them alike; the budget ends the list. On bench.stats_families' `small`
family, up to three each found more of the large effects than one each (docs/benchmarks.md)."""

MIN_SLOWDOWN = 0.01
"""A revert that reads less than 1% slower than the best is not measured again: the resolution
a recommendation is judged at (within 1% of the optimum), and a reading that near zero is
seldom made significant by one more run; the share it would spend goes back to the search."""


def undecided_slowdowns(trials: Sequence[TrialRecord], *, cis: RunCIs | None = None) -> list[dict[str, Any]]:
    """The latest ablation round's effects (tuner.stats' ``ablation_effects``, as the analysis
    reads them) whose revert read at least :data:`MIN_SLOWDOWN` slower than the best and was not
    Holm-significant, most nearly significant first. ``cis``: the runs as tuner.stats'
    ``run_cis`` reads them, where the caller has them.

    Example:
        >>> undecided_slowdowns([])
        []
    """
    if cis is None:   # as the analysis reads them, drift or stall corrected where flagged
        cis = run_cis(trials)[0]
    launch = run_variance(trials, cis)
    base = next((t for t in trials if t.role == "baseline" and t.status == "ok"), None)
    effects = ablation_effects(trials, cis, tau2=launch.tau2, tau_df=launch.df,
                               baseline_params=base.params if base is not None else None,
                               se_scale=launch.se_scale, tau2_df=launch.tau2_df)
    undecided = [e for e in (effects or {}).get("knobs", []) if e["impact"] >= MIN_SLOWDOWN and not e["significant"]]
    return sorted(undecided, key=lambda e: e["p_value"])


def revert_replicates(trials: Sequence[TrialRecord], *, budget_gpu_seconds: float,
                      full_run_gpu_seconds: float, runoff_configs: Collection[str] = (),
                      cis: RunCIs | None = None) -> list[dict[str, Any]]:
    """More runs of the :func:`undecided_slowdowns` reverts, in rounds (each once a round, most
    nearly decided first, at most :data:`MAX_REPLICATES` rounds), as many as
    ``budget_gpu_seconds`` affords at ``full_run_gpu_seconds`` a run: ``{"knob", "params",
    "move", "trial"}`` each, the params of the revert's first run (``trial``) and whether it is
    a move. A revert whose config the runoff measures again (``runoff_configs``: config keys,
    tuner.stats' ``config_key``) is left out: a revert that reads a little slower can be a
    finalist, and two stages would measure one config twice over.

    Example:
        >>> revert_replicates([], budget_gpu_seconds=1e6, full_run_gpu_seconds=1e3)
        []
    """
    if full_run_gpu_seconds <= 0 or budget_gpu_seconds < full_run_gpu_seconds:
        return []
    by_number, skip = {t.number: t for t in trials}, set(runoff_configs)
    undecided = [e for e in undecided_slowdowns(trials, cis=cis) if config_key(by_number[e["trial"]].params) not in skip]
    rounds = [e for _ in range(MAX_REPLICATES) for e in undecided][:int(budget_gpu_seconds // full_run_gpu_seconds)]
    return [{"knob": e["knob"], "params": dict(by_number[e["trial"]].params), "move": bool(e["move"]),
             "trial": e["trial"]} for e in rounds]
