"""Ablation planning: after the search, re-measure the best config and its one-knob reverts.

Each run sets one knob of the best config back to the baseline's value, so the report can
say what each knob is worth, and the best config is measured again (the winner's curse).
The runs are enqueued once per study, as WAITING trials with user attr ``role = ablation``.

Example:
    >>> from tuner.spec import parse_spec
    >>> spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"},
    ...                    "space": {"micro_batch": [1, 2], "num_workers": [0, 2], "prefetch_factor": [2, 4]}})
    >>> for knob, params in plan_ablation(spec, {"micro_batch": 2, "num_workers": 2, "prefetch_factor": 4},
    ...                                   {"micro_batch": 1, "num_workers": 0}):
    ...     print(knob, params)
    None {'micro_batch': 2, 'num_workers': 2, 'prefetch_factor': 4}
    micro_batch {'micro_batch': 1, 'num_workers': 2, 'prefetch_factor': 4}
    num_workers {'micro_batch': 2, 'num_workers': 0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import knobs
from tuner.spec import StudySpec

__all__ = ["plan_ablation", "plan_ablation_once"]


def plan_ablation(spec: StudySpec, best_params: dict[str, Any], baseline: dict[str, Any],
                  order: Sequence[str] = ()) -> list[tuple[str | None, dict[str, Any]]]:
    """The ablation runs: (None, best) then (knob, best with that knob set to the baseline's).

    Knobs go in ``order`` first (the search's fANOVA ranking, so that a budget that runs out
    mid-ablation has measured the knobs that matter), then the rest in the spec's order.
    Knobs already at the baseline's value need no run. A revert that turns a conditional knob
    off drops it (num_workers -> 0 drops prefetch_factor); one that turns it on gives it the
    baseline's value, else the catalogue's default. A conditional knob the baseline does not
    have (prefetch_factor with no workers) has no one-knob revert, so it gets no run.
    """
    runs: list[tuple[str | None, dict[str, Any]]] = [(None, dict(best_params))]
    ranked = [k for k in order if k in spec.knob_names]
    for knob in [*ranked, *(k for k in spec.knob_names if k not in ranked)]:
        if knob not in baseline or best_params.get(knob) == baseline[knob]:
            continue
        params = dict(best_params)
        params[knob] = baseline[knob]
        for name in knobs.ordered(spec.knob_names):
            if not knobs.is_active(name, params):
                params.pop(name, None)
            elif name not in params and not knobs.is_active(name, best_params):  # the revert turned it on
                params[name] = baseline.get(name, knobs.KNOBS[name].default)
        runs.append((knob, params))
    return runs


def plan_ablation_once(study: optuna.Study, spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial]) -> bool:
    """Enqueue the ablation runs (once per study). False when there is nothing to ablate:
    no ok baseline, or no ok search trial."""
    from tuner.analysis import fanova_importance
    from tuner.record import study_record

    if study.user_attrs.get("ablation_planned"):
        return False
    study.set_user_attr("ablation_planned", True)
    base = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                 and t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"), None)
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.user_attrs.get("role") != "ablation"]
    if base is None or not ok:
        return False
    best = max(ok, key=lambda t: t.value)
    search = [r for r in study_record(study).trials if r.role is None]
    order = [d["knob"] for d in fanova_importance(search, spec.knob_names, n_boot=0)
             if d["fanova"] is not None]
    for knob, params in plan_ablation(spec, best.params, base.params, order):
        attrs = {"role": "ablation", "ablation_of": best.number}
        if knob is not None:
            attrs["ablation_knob"] = knob
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)
    return True
