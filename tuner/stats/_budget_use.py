"""Where a study's budget went: the GPU-seconds of probes, failures, re-measurement and search.

Every trial that cost GPU time is put in one use, the first that applies:

1. ``probes``: a run screening queued (or let through) to test its own memory line
   (tuner.search: the study's user attr ``boundary_probes``), whatever its outcome: an OOM
   there is the price of the test, not a failure of the search;
2. ``failures``: any other run that ended ``oom``, ``timeout``, ``error`` or ``fail``;
3. ``baseline``: the team's current config, measured first;
4. ``remeasurement``: the ablation round's re-runs of configs already measured (the best,
   the baseline, the runoff's candidates: ``role = ablation`` with no ``ablation_knob``);
5. ``ablation``: the round's one-knob-reverted runs;
6. ``search``: the sampler's proposals that ran.

Shares are over the GPU-seconds charged (tuner.budget.charged_gpu_seconds), so they sum to 1;
``summary`` is the line people read (`tuner analyze`, RECIPE.md's provenance).
``screening`` counts configs screened (pruned unrun, at 0 GPU-s; by rule), probes that ran,
and probes that contradicted the model (ran ok where it predicted out of memory).

Example:
    >>> from tuner.stats._record import TrialRecord
    >>> t = [TrialRecord(number=0, state="COMPLETE", status="ok", params={"micro_batch": 1}, steps=(), value=1.0,
    ...                  role="baseline", gpu_seconds=100.0),
    ...      TrialRecord(number=1, state="COMPLETE", status="oom", params={"micro_batch": 8}, steps=(), value=0.0,
    ...                  gpu_seconds=20.0),
    ...      TrialRecord(number=2, state="COMPLETE", status="ok", params={"micro_batch": 2}, steps=(), value=2.0,
    ...                  gpu_seconds=80.0)]
    >>> use = budget_use(t, probes=[{"region": "r", "params": {"micro_batch": 8}, "predicted_gb": 90.0}])
    >>> use["share"], use["screening"]["probes"], use["screening"]["contradicted"]
    ({'probes': 0.1, 'failures': 0.0, 'baseline': 0.5, 'remeasurement': 0.0, 'ablation': 0.0, 'search': 0.4}, 1, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.budget import charged_gpu_seconds
from tuner.stats._record import TrialRecord

__all__ = ["budget_use", "budget_use_line", "USES"]

USES = ("probes", "failures", "baseline", "remeasurement", "ablation", "search")
"""The uses, in the order a trial is assigned to the first that applies."""
_FAILED = ("oom", "timeout", "error", "fail")


def _probe_numbers(trials: Sequence[TrialRecord], probes: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Trial number -> status of the run that answered each probe (the first run of its params
    that is not a queued baseline or ablation run)."""
    out: dict[int, str] = {}
    for p in probes:
        ran = next((t for t in sorted(trials, key=lambda t: t.number)
                    if t.number not in out and t.role is None and t.params == p.get("params")
                    and t.status not in ("pruned", "repeat", "skipped", "waiting", "running")), None)
        if ran is not None:
            out[ran.number] = ran.status
    return out


def budget_use(trials: Sequence[TrialRecord], *, probes: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The budget's use per study (see the module doc): GPU-hours and shares per use, and the
    screening counts. ``probes``: the study's user attr ``boundary_probes``."""
    probe_of = _probe_numbers(trials, probes)
    seconds = dict.fromkeys(USES, 0.0)
    for t in trials:
        charged = charged_gpu_seconds(t.state, t.gpu_seconds, t.reserved_gpu_seconds)
        if charged <= 0:
            continue
        if t.number in probe_of:
            use = "probes"
        elif t.status in _FAILED:
            use = "failures"
        elif t.role == "baseline":
            use = "baseline"
        elif t.role == "ablation":
            use = "ablation" if t.ablation_knob else "remeasurement"
        else:
            use = "search"
        seconds[use] += charged
    total = sum(seconds.values())
    pruned = [t for t in trials if t.status == "pruned"]
    nccl = sum("NCCL" in t.message for t in pruned)
    use = {
        "gpu_hours": {k: v / 3600 for k, v in seconds.items()},
        "share": {k: (round(v / total, 4) if total > 0 else 0.0) for k, v in seconds.items()},
        "screening": {"screened": len(pruned), "screened_memory": len(pruned) - nccl, "screened_nccl": nccl,
                      "probes": len(probe_of), "probes_pending": len(probes) - len(probe_of),
                      "contradicted": sum(s == "ok" for s in probe_of.values())},
    }
    return {**use, "summary": budget_use_line(use)}


def budget_use_line(use: dict[str, Any] | None) -> str:
    """One line for people: the shares in use, then what screening did.

    Example:
        >>> line = budget_use_line({"share": {"probes": 0.1, "failures": 0.0, "search": 0.9},
        ...                         "screening": {"screened": 12, "probes": 2, "contradicted": 1}})
        >>> line.split("; ")[0], line.endswith("ran 2 probes of its memory line, 1 contradicted the model")
        ('budget: search 90%, probes 10%', True)
    """
    if not use:
        return ""
    shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(use["share"].items(), key=lambda kv: -kv[1]) if v > 0)
    s = use["screening"]
    return (f"budget: {shares or 'nothing spent'}; screening pruned {s['screened']} configs unrun, ran {s['probes']} "
            f"probes of its memory line, {s['contradicted']} contradicted the model")
