"""Ablation planning: after the search, re-measure the top configs and the best's one-knob reverts.

Each revert sets one knob of the best config back to the baseline's value, so the report can
say what each knob is worth. The best config, the baseline (when it ran ok) and the next ``N_CANDIDATES``
configs are measured again in fresh launches (the winner's curse; run-to-run variation,
tuner.stats), interleaved with the reverts so that drift over the ablation hits them
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

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import budget, knobs
from tuner.spec import StudySpec
from tuner.stats import (
    RUNOFF,
    attempts_by_config,
    config_failure,
    config_key,
    failure_model,
    knob_importance,
    level_failures,
    moved_values,
    pick_finalists,
    revert_replicates,
    round_estimates,
    run_cis,
    runoff_rounds,
    smoothed_values,
    trial_records,
)

__all__ = [
    "plan_ablation",
    "plan_moves",
    "MAX_MOVES",
    "plan_ablation_once",
    "plan_runs",
    "ablation_plan",
    "apply_ablation_plan",
    "AblationPlan",
    "runoff_runs",
    "replicate_runs",
    "shortlist",
    "n_candidates",
    "N_CANDIDATES",
    "MAX_CANDIDATES",
]

N_CANDIDATES = 2
"""Configs after the best that are re-measured too (the best may not stay best)."""
MAX_CANDIDATES = 6
"""Candidates at most, where the ablation share affords them (:func:`n_candidates`)."""
MAX_MOVES = 2
"""One-knob moves at most a round (:func:`plan_moves`): knobs the best keeps at the baseline's level."""


def n_candidates(share_gpu_seconds: float, full_run_gpu_seconds: float, fixed_runs: int) -> int:
    """Candidates to re-measure: N_CANDIDATES, or more (up to MAX_CANDIDATES) where half the
    ablation share affords them beside the round's ``fixed_runs`` (the best's and baseline's
    runs, the reverts); the other half is the runoff's (tuner.stats). Where a full run is
    cheap beside the share (13B on 8 GPUs: about 900 GPU-s against 21,600), the search's best
    few differ by about one run's noise, and two candidates often held no config within 1% of
    the optimum (docs/benchmarks.md).

    Example:
        >>> n_candidates(21_600.0, 1_000.0, 2), n_candidates(21_600.0, 2_500.0, 9), n_candidates(1e6, 1.0, 0)
        (6, 2, 6)
    """
    if full_run_gpu_seconds <= 0:
        return N_CANDIDATES
    spare = int(share_gpu_seconds / 2 // full_run_gpu_seconds) - fixed_runs
    return max(N_CANDIDATES, min(MAX_CANDIDATES, spare))


def shortlist(trials: Sequence[Any], knobs: Sequence[str]) -> list[dict[str, Any]]:
    """Distinct configs of ok search trials (TrialRecords), fastest first by the search's
    smoothed estimate (tuner.stats: not by their luckiest run), leaving out those the
    study's failure model calls flaky (tuner.stats): the best to ablate and the candidates
    to re-measure."""

    levels = level_failures(trials, knobs)
    model = failure_model(trials, knobs)
    attempts = attempts_by_config(trials)
    smoothed = smoothed_values(trials, knobs, values=moved_values(run_cis(trials)[0]))   # as the analysis reads runs
    out, seen = [], set()
    for t in sorted((t for t in trials if t.status == "ok" and t.role != "ablation" and t.value),
                    key=lambda t: (-smoothed.get(config_key(t.params), 0.0), -t.value)):
        key = config_key(t.params)
        if key not in seen and not config_failure(t.params, trials, levels, model, attempts=attempts)["flaky"]:
            out.append(t.params)
        seen.add(key)
    return out


def plan_runs(reverts: list[tuple[str | None, dict[str, Any]]], baseline: dict[str, Any] | None,
              candidates: Sequence[dict[str, Any]],
              moves: Sequence[tuple[str, dict[str, Any]]] = ()) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(params, extra user attrs) of every ablation run, interleaved: best, baseline, then
    each candidate followed by a revert (or a move, :func:`plan_moves`: ``ablation_move``), then
    the remaining reverts and moves, then best and baseline again.
    ``baseline`` None (the baseline failed): no baseline runs.

    Example:
        >>> runs = plan_runs([(None, {"a": 2}), ("a", {"a": 1})], {"a": 1}, [{"a": 3}])
        >>> [(p["a"], e.get("remeasure") or e.get("ablation_knob")) for p, e in runs]
        [(2, 'best'), (1, 'baseline'), (3, 'candidate'), (1, 'a'), (2, 'best'), (1, 'baseline')]
    """
    best = reverts[0][1]
    knob_runs = ([(dict(p), {"ablation_knob": k}) for k, p in reverts[1:]]
                 + [(dict(p), {"ablation_knob": k, "ablation_move": True}) for k, p in moves])
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


def plan_moves(spec: StudySpec, best_params: dict[str, Any], baseline: dict[str, Any], trials: Sequence[Any],
               order: Sequence[str] = (), max_moves: int = MAX_MOVES) -> list[tuple[str, dict[str, Any]]]:
    """(knob, the best with that knob moved) for knobs no revert tests: the best keeps the
    baseline's level, so without a move the ablation says nothing of them, and a search too
    short to rank them leaves What matters blind (issue 29). Each knob goes to its other level
    whose ok search runs (TrialRecords) read fastest on the log scale: the level most likely to
    beat the best, and a move that does is a finalist like any revert (tuner.stats). Knobs go
    in ``order`` (the search's ranking) then the spec's, at most ``max_moves``; a knob with no
    ok run at another level gets no move, nor one whose move the search already ran (a
    study long enough to have measured the best's neighbours spends nothing on them).
    Conditional knobs follow as in :func:`plan_ablation`.

    Example:
        >>> from tuner.spec import parse_spec
        >>> from tuner.stats import TrialRecord
        >>> spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"},
        ...                    "space": {"micro_batch": [1, 2, 4], "num_workers": [0, 2]}})
        >>> runs = [TrialRecord(number=i, state="COMPLETE", status="ok", value=v, steps=(v,), params=p)
        ...         for i, (p, v) in enumerate([({"micro_batch": 2, "num_workers": 0}, 110.0),
        ...                                     ({"micro_batch": 4, "num_workers": 0}, 90.0)])]
        >>> plan_moves(spec, {"micro_batch": 1, "num_workers": 2}, {"micro_batch": 1, "num_workers": 0}, runs)
        [('micro_batch', {'micro_batch': 2, 'num_workers': 2})]
    """
    ok = [t for t in trials if t.status == "ok" and t.role != "ablation" and t.value]
    searched = {config_key(t.params) for t in trials if t.role != "ablation" and t.state == "COMPLETE"}
    ranked = [k for k in order if k in spec.knob_names]
    runs: list[tuple[str, dict[str, Any]]] = []
    for knob in [*ranked, *(k for k in spec.knob_names if k not in ranked)]:
        if len(runs) >= max_moves:
            break
        if knob not in baseline or knob not in best_params or best_params[knob] != baseline[knob]:
            continue
        logs: dict[Any, list[float]] = {}
        for t in ok:
            if knob in t.params and t.params[knob] != best_params[knob]:
                logs.setdefault(t.params[knob], []).append(math.log(t.value))
        if not logs:
            continue
        target = max(logs, key=lambda v: sum(logs[v]) / len(logs[v]))
        params = {**best_params, knob: target}
        for name in knobs.ordered(spec.knob_names):
            if not knobs.is_active(name, params):
                params.pop(name, None)
            elif name not in params and not knobs.is_active(name, best_params):  # the move turned it on
                params[name] = baseline.get(name, knobs.KNOBS[name].default)
        if config_key(params) not in searched:  # a neighbour the search ran already speaks for the knob
            runs.append((knob, params))
    return runs


@dataclass(frozen=True, kw_only=True)
class AblationPlan:
    """What the ablation round enqueues next, and the study state it was planned for."""

    for_state: tuple[Any, Any]
    """The study's (``ablation_planned``, ``ablation_stage``) when it was planned: applied only if
    still so (another coordinator may have planned it meanwhile)."""
    runs: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()
    """(params, user attrs) of each run to enqueue, in order."""
    stage: int | None = None
    """The ``ablation_stage`` the study moves to (1: the round's runs, 2: its runoff)."""
    planned: bool = False
    """Whether the round is planned once applied (study attr ``ablation_planned``)."""
    found_work: bool = True
    """False when there is nothing to re-measure (no ok search trial)."""


def ablation_plan(study_attrs: Mapping[str, Any], spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial], *,
                  limit_gpu_seconds: float | None = None,
                  worker_params: dict[str, Any] | None = None) -> AblationPlan | None:
    """Plan the ablation round, in two stages, from the study's trials; writes nothing (the
    statistics run here, outside the admission lock). None when the round is planned already.

    Stage 1: the round's runs (:func:`plan_runs`). Without an ok baseline (the team's config
    failed on this cluster) there is nothing to revert to: only the best and the candidates are
    re-measured, so the recommendation is still chosen on fresh runs, not on the search's
    luckiest one. ``limit_gpu_seconds`` (the study's budget) sizes the candidates
    (:func:`n_candidates`) and, in stage 2, once stage 1's runs are done, the runoff
    (:func:`runoff_runs`: the finalists measured again on what the ablation share left) and,
    with what it leaves, the undecided slowdowns' reverts measured again (:func:`replicate_runs`).
    Then the round is planned (study attr ``ablation_planned``). ``worker_params``: the config the
    resident worker last ran, where the runoff's order starts.
    """
    state = (study_attrs.get("ablation_planned"), study_attrs.get("ablation_stage"))
    if state[0]:
        return None
    share = spec.study.ablation_share * limit_gpu_seconds if limit_gpu_seconds else 0.0
    # a study extended after its ablation plans another round (tuner.study); analysis reads the latest
    previous_round = max((t.user_attrs.get("ablation_round", 1) for t in trials
                          if t.user_attrs.get("role") == "ablation"), default=0)
    if state[1] == 1:  # the round's runs are done: its runoff
        runs = [t for t in trials if t.user_attrs.get("role") == "ablation"
                and t.user_attrs.get("ablation_round", 1) == previous_round]
        spent = sum(float(t.user_attrs.get("gpu_seconds") or 0.0) for t in runs)
        full = sorted(float(t.user_attrs.get("gpu_seconds") or 0.0) for t in runs
                      if t.user_attrs.get("status") == "ok" and t.user_attrs.get("ablation_knob") is None)
        stage2: tuple = ()
        if full and limit_gpu_seconds:  # what is left is the budget ledger's (tuner.budget), not a re-count
            left = budget.ledger_from_trials(trials, limit_gpu_seconds).left_gpu_seconds
            records, full_run, affordable = trial_records(trials), full[len(full) // 2], min(share - spent, left)
            cis = run_cis(records)[0]   # the runs as the analysis reads them, once for both
            stage2 = tuple(runoff_runs(records, spec, budget_gpu_seconds=affordable,
                                       full_run_gpu_seconds=full_run, worker_params=worker_params, cis=cis))
            # what the share still affords measures the undecided slowdowns again (tuner.stats)
            stage2 += tuple(replicate_runs(records, budget_gpu_seconds=affordable - len(stage2) * full_run,
                                           full_run_gpu_seconds=full_run, resident=spec.trial.resident,
                                           runoff_configs={config_key(p) for p, _ in stage2}, cis=cis))
        return AblationPlan(for_state=state, runs=stage2, stage=2, planned=True)
    base = next((t for t in trials if t.user_attrs.get("role") == "baseline"
                 and t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"), None)
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.user_attrs.get("role") != "ablation"]
    if not ok:
        return AblationPlan(for_state=state, planned=True, found_work=False)
    records = trial_records(trials)
    reliable = shortlist(records, spec.knob_names) or [max(ok, key=lambda t: t.value).params]
    best_params = reliable[0]
    best = next(t for t in ok if config_key(t.params) == config_key(best_params))
    order = [d["knob"] for d in knob_importance([r for r in records if r.role != "ablation"], spec.knob_names,
                                                n_boot=0)["knobs"] if d["total"] is not None]
    base_params = base.params if base is not None else None
    base_key = config_key(base_params) if base_params is not None else None
    reverts = plan_ablation(spec, best_params, base_params or {}, order)  # no baseline: no reverts
    moves = plan_moves(spec, best_params, base_params, records, order) if base_params is not None else []
    fixed = len(plan_runs(reverts, base_params, [], moves))
    full_run = budget.cap_basis(trials, first_estimate_gpu_seconds=spec.first_estimate_gpu_seconds)
    candidates = [p for p in reliable[1:] if config_key(p) != base_key][:n_candidates(share, full_run, fixed)]
    round_ = 1 + previous_round
    return AblationPlan(for_state=state, stage=1, runs=tuple(
        (params, {"role": "ablation", "ablation_of": best.number, "ablation_round": round_, **extra})
        for params, extra in plan_runs(reverts, base_params, candidates, moves)))


def apply_ablation_plan(study: optuna.Study, plan: AblationPlan | None) -> bool | None:
    """Enqueue a plan's runs and move the study's stage; call it under the admission lock.
    True: applied; False: nothing to re-measure (or already planned); None: the study moved on
    since the plan was made (another coordinator planned it): decide again."""
    if plan is None:
        return False
    attrs = study.user_attrs
    if (attrs.get("ablation_planned"), attrs.get("ablation_stage")) != plan.for_state:
        return None
    if plan.planned:
        study.set_user_attr("ablation_planned", True)
    if plan.stage == 2:
        study.set_user_attr("ablation_stage", 2)
    for params, user_attrs in plan.runs:
        study.enqueue_trial(dict(params), user_attrs=user_attrs, skip_if_exists=False)
    if plan.stage == 1:
        study.set_user_attr("ablation_stage", 1)
    return plan.found_work


def plan_ablation_once(study: optuna.Study, spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial], *,
                       limit_gpu_seconds: float | None = None, worker_params: dict[str, Any] | None = None) -> bool:
    """:func:`ablation_plan` then :func:`apply_ablation_plan`, in one process that holds the study
    alone (a bench, a test). False when there is nothing to re-measure."""
    plan = ablation_plan(study.user_attrs, spec, trials, limit_gpu_seconds=limit_gpu_seconds,
                         worker_params=worker_params)
    return bool(apply_ablation_plan(study, plan))


def replicate_runs(trials: Sequence[Any], *, budget_gpu_seconds: float, full_run_gpu_seconds: float,
                   resident: bool = False, runoff_configs: Collection[str] = (),
                   cis: Mapping[int, dict[str, Any]] | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(params, user attrs) of the latest round's reverts measured again (TrialRecords in):
    tuner.stats.revert_replicates' picks, each with its revert's user attrs
    (``ablation_knob``, ``ablation_move``) and ``ablation_replicate``, so the analysis reads the
    knob from all of its runs; none of a config the runoff measures (``runoff_configs``).
    Round by round with cold launches; a revert's runs back to back on a resident worker
    (``resident``)."""
    by_number = {t.number: t for t in trials}
    picks = revert_replicates(trials, budget_gpu_seconds=budget_gpu_seconds, full_run_gpu_seconds=full_run_gpu_seconds,
                              runoff_configs=runoff_configs, cis=cis)
    if resident:
        place: dict[int, int] = {}
        for i, r in enumerate(picks):
            place.setdefault(r["trial"], i)
        picks.sort(key=lambda r: place[r["trial"]])   # stable: each revert's runs together, in its first's place
    runs = []
    for r in picks:
        revert = by_number[r["trial"]]
        attrs = {"role": "ablation", "ablation_of": revert.ablation_of, "ablation_round": revert.ablation_round or 1,
                 "ablation_knob": r["knob"], "ablation_replicate": True}
        runs.append((r["params"], {**attrs, "ablation_move": True} if r["move"] else attrs))
    return runs


def runoff_runs(trials: Sequence[Any], spec: StudySpec, *, budget_gpu_seconds: float, full_run_gpu_seconds: float,
                worker_params: Mapping[str, Any] | None = None,
                cis: Mapping[int, dict[str, Any]] | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The runoff of the latest ablation round (TrialRecords in, (params, user attrs) out: ``role =
    ablation``, ``remeasure = runoff``): the FINALISTS best re-measured configs by
    tuner.stats.ranked_remeasured, each once a round, as many rounds as ``budget_gpu_seconds``
    affords at ``full_run_gpu_seconds`` a run (tuner.stats.runoff_rounds). The finalists go in the
    order that rebuilds the least (tuner.budget.reuse_order, from ``worker_params``, the
    config the worker last ran); with cold launches a round runs each once, with a resident
    worker (``[trial] resident``) each finalist's runs go back to back.
    """
    round_ = max((t.ablation_round or 1 for t in trials if t.role == "ablation"), default=None)
    if round_ is None:
        return []
    cis = run_cis(trials)[0] if cis is None else cis   # the runs as the analysis reads them
    estimates, params = round_estimates(trials, spec.knob_names, round_, cis=cis)
    surrogate = smoothed_values(trials, spec.knob_names, values=moved_values(cis))
    finalists = pick_finalists(estimates, surrogate)
    rounds = runoff_rounds(budget_gpu_seconds, full_run_gpu_seconds, len(finalists))
    ablation_of = next(t.ablation_of for t in trials if t.role == "ablation" and (t.ablation_round or 1) == round_)
    configs = [params[k] for k in finalists]
    order = [configs[i] for i in budget.reuse_order(worker_params, configs)]
    # cold launches: each round runs every finalist once, so drift over the runoff hits them alike;
    # a resident worker runs a finalist's runs back to back instead: a change of config between
    # finalists rebuilds its communicators or model (on the 7B x 32 sim, 18 s against a 22 s
    # run), and interleaving pushed issue 15's warm study over its quarter on start-up
    runs = [c for c in order for _ in range(rounds)] if spec.trial.resident else order * rounds
    return [(dict(c), {"role": "ablation", "ablation_of": ablation_of, "ablation_round": round_,
                       "remeasure": RUNOFF}) for c in runs]
