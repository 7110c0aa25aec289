"""Ablation planning: after the search, re-measure the top configs and the best's one-knob reverts.

Each revert sets one knob of the best config back to the baseline's value, so the report can
say what each knob is worth. The best config, the baseline (when it ran ok) and the next ``N_CANDIDATES``
configs are measured again in fresh launches (the winner's curse; run-to-run variation,
tuner.configs), interleaved with the reverts so that drift over the ablation hits them
alike. The runs are enqueued once per study, as WAITING trials with user attr
``role = ablation`` (re-measurements also carry ``remeasure = best|baseline|candidate``).

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

__all__ = ["plan_ablation", "plan_ablation_once", "plan_runs", "shortlist", "N_CANDIDATES"]

N_CANDIDATES = 2
"""Configs after the best that are re-measured too (the best may not stay best)."""


def shortlist(trials: Sequence[Any], knobs: Sequence[str]) -> list[dict[str, Any]]:
    """Distinct configs of ok search trials (TrialRecords), fastest first by the search's
    smoothed estimate (tuner.smoothing: not by their luckiest run), leaving out those the
    study's failure model calls flaky (tuner.failures): the best to ablate and the candidates
    to re-measure."""
    from tuner.failures import config_failure, config_key, failure_model, level_failures
    from tuner.smoothing import smoothed_values

    levels = level_failures(trials, knobs)
    model = failure_model(trials, knobs)
    smoothed = smoothed_values(trials, knobs)
    out, seen = [], set()
    for t in sorted((t for t in trials if t.status == "ok" and t.role != "ablation" and t.value),
                    key=lambda t: (-smoothed.get(config_key(t.params), 0.0), -t.value)):
        key = config_key(t.params)
        if key not in seen and not config_failure(t.params, trials, levels, model)["flaky"]:
            out.append(t.params)
        seen.add(key)
    return out


def plan_runs(reverts: list[tuple[str | None, dict[str, Any]]], baseline: dict[str, Any] | None,
              candidates: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(params, extra user attrs) of every ablation run, interleaved: best, baseline, then
    each candidate followed by a revert, then the remaining reverts, then best and baseline again.
    ``baseline`` None (the baseline failed): no baseline runs.

    Example:
        >>> runs = plan_runs([(None, {"a": 2}), ("a", {"a": 1})], {"a": 1}, [{"a": 3}])
        >>> [(p["a"], e.get("remeasure") or e.get("ablation_knob")) for p, e in runs]
        [(2, 'best'), (1, 'baseline'), (3, 'candidate'), (1, 'a'), (2, 'best'), (1, 'baseline')]
    """
    best = reverts[0][1]
    knob_runs = [(dict(p), {"ablation_knob": k}) for k, p in reverts[1:]]
    first = [(dict(best), {"remeasure": "best"})]
    if baseline is not None:
        first.append((dict(baseline), {"remeasure": "baseline"}))
    mixed: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i, cand in enumerate(candidates):
        mixed.append((dict(cand), {"remeasure": "candidate"}))
        if i < len(knob_runs):
            mixed.append(knob_runs[i])
    mixed += knob_runs[len(candidates):]
    return first + mixed + first


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
    """Enqueue the ablation runs (once per study). False when there is nothing to re-measure:
    no ok search trial. Without an ok baseline (the team's config failed on this cluster) there
    is nothing to revert to: only the best and the candidates are re-measured, so the
    recommendation is still chosen on fresh runs, not on the search's luckiest one."""
    from tuner.failures import config_key
    from tuner.importance import knob_importance
    from tuner.record import study_record

    if study.user_attrs.get("ablation_planned"):
        return False
    study.set_user_attr("ablation_planned", True)
    base = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                 and t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"), None)
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.user_attrs.get("role") != "ablation"]
    if not ok:
        return False
    records = study_record(study).trials
    reliable = shortlist(records, spec.knob_names) or [max(ok, key=lambda t: t.value).params]
    best_params = reliable[0]
    best = next(t for t in ok if config_key(t.params) == config_key(best_params))
    order = [d["knob"] for d in knob_importance([r for r in records if r.role != "ablation"], spec.knob_names,
                                                n_boot=0)["knobs"] if d["total"] is not None]
    base_params = base.params if base is not None else None
    base_key = config_key(base_params) if base_params is not None else None
    candidates = [p for p in reliable[1:] if config_key(p) != base_key][:N_CANDIDATES]
    reverts = plan_ablation(spec, best_params, base_params or {}, order)  # no baseline: no reverts
    # a study extended after its ablation plans another round (tuner.study); analysis reads the latest
    round_ = 1 + max((t.user_attrs.get("ablation_round", 1) for t in trials if t.user_attrs.get("role") == "ablation"),
                     default=0)
    for params, extra in plan_runs(reverts, base_params, candidates):
        study.enqueue_trial(params, user_attrs={"role": "ablation", "ablation_of": best.number,
                                                "ablation_round": round_, **extra}, skip_if_exists=False)
    return True
