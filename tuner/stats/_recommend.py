"""The recommendation, its speedup, the ablation's effects and "what matters", from run-level CIs.

Pure functions over TrialRecords and each ok run's tokens-over-time CI ({"mean", "se", "df"},
tuner.stats). How configs are pooled and compared: tuner.stats. Failure rates:
tuner.stats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.stats._configs import RunCIs, config_estimate, holm, ratio_estimate
from tuner.stats._drift import moved_values
from tuner.stats._failures import (
    FLAKY_FAILURE_RATE,
    attempts_by_config,
    config_failure,
    config_key,
    failure_model,
    is_attempt,
    is_failure,
    neighbour_risk,
)
from tuner.stats._record import TrialRecord
from tuner.stats._runoff import RUNOFF, ranked_remeasured
from tuner.stats._smoothing import smoothed_values

__all__ = ["recommend", "ablation_effects", "what_matters", "combined_evidence", "what_matters_power",
           "undecided_knobs", "COMBINED_ALPHA", "UNDECIDED_EFFECT"]

COMBINED_ALPHA = 0.01
"""Family-wise level of :func:`combined_evidence`'s Holm: a third route into What matters beside the
ablation's (5%) and the importance's (5%), kept small so that the three together list a knob
without an effect hardly more often than the two did (measured: 101 against 94 of 4,800
(knob, study) pairs, at 5% 132; docs/statistics.md section 4)."""
UNDECIDED_EFFECT = 0.10
"""A knob outside What matters is `undecided` when its ablation CI still admits a one-knob
effect this large at the recommended config (issue 29's "moves throughput by >= 10%")."""



def _public(d: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if d is None else {"mean": d["mean"], "ci95": d["ci95"]}


def _is_remeasure(t: TrialRecord) -> bool:
    """A run of the ablation round: the best, the baseline, a candidate, a runoff run, or a
    one-knob revert. A revert measures a config like any other: where it reads faster than the
    best it reverts, it competes for the recommendation (the search's pick for that knob lost to
    the baseline's value), rather than being read only as the knob's effect."""
    return t.role == "ablation"


def confirmation_runs(trials: Sequence[TrialRecord], cis: RunCIs) -> set[int]:
    """Trial numbers held out of the choice: the later half (by trial number) of each config's
    re-measurements where it has at least two. Which runs are held out is fixed before any
    value is read, so the chosen config's held-out runs read as any launch of it would: its
    numbers come from runs that did not choose it (the winner's curse; issue 29)."""
    by_config: dict[str, list[int]] = {}
    for t in trials:
        if _is_remeasure(t) and t.number in cis:
            by_config.setdefault(config_key(t.params), []).append(t.number)
    out: set[int] = set()
    for numbers in by_config.values():
        numbers.sort()
        if len(numbers) >= 2:
            out.update(numbers[len(numbers) - len(numbers) // 2:])
    return out


def recommend(trials: Sequence[TrialRecord], cis: RunCIs, *, tau2: float, tau_df: float,
              levels: dict[str, dict[str, dict[str, Any]]], baseline: TrialRecord | None,
              se_scale: float = 1.0, tau2_df: float | None = None, hold_out: bool = True) -> dict[str, Any] | None:
    """The best reliable config (analysis.json's ``best``), chosen on re-measurements where any
    exist, with its speedup over the baseline config; beside it the faster flaky one and the
    fastest reliable config found after the ablation round, hence not re-measured, whose search
    run beat the recommendation's (``faster_not_remeasured``).

    The choice reads every run but the :func:`confirmation_runs`; the recommended config's
    throughput and speedup come from its confirmation runs alone, and ``winners_curse_adjusted``
    is true only then. A config with one re-measurement has none to hold out: its number is
    the re-measurement that chose it (``winners_curse_adjusted`` false). ``hold_out=False``:
    every run chooses and none confirms (bench/choice_replay.py compares the two rules)."""
    search = [t for t in trials if t.role != "ablation" and t.number in cis]
    if not search:
        return None
    by_config: dict[str, dict[str, Any]] = {}
    for t in trials:
        d = by_config.setdefault(config_key(t.params), {"params": t.params, "search": [], "remeasure": [],
                                                        "first_trial": None})
        if t.number in cis:
            (d["remeasure"] if _is_remeasure(t) else d["search"]).append(t)
            if not _is_remeasure(t) and d["first_trial"] is None:
                d["first_trial"] = t.number
    fail_model = failure_model(trials, list(levels))
    attempts = attempts_by_config(trials)
    est = lambda runs: config_estimate([cis[t.number] for t in runs], tau2=tau2, tau_df=tau_df,  # noqa: E731
                                       se_scale=se_scale, tau2_df=tau2_df)
    confirm = confirmation_runs(trials, cis) if hold_out else set()
    choosing = [t for t in trials if t.number not in confirm]
    moved = moved_values(cis)   # the surrogate reads a drifting or stalling run as the analysis does
    rows = []
    for key, d in by_config.items():
        if not d["search"] and not d["remeasure"]:
            continue
        # ranked on the runs that choose; the confirmation runs are read only for the chosen one
        remeasured = est([t for t in d["remeasure"] if t.number not in confirm]) if d["remeasure"] else None
        # a remeasure failure counts as a failure of the config (tuner.stats)
        rows.append({"key": key, "params": d["params"], "remeasured": remeasured,
                     "search": est(d["search"] or d["remeasure"]), "first_trial": d["first_trial"],
                     "remeasure_trials": [t.number for t in d["remeasure"]],
                     "confirmation": [t for t in d["remeasure"] if t.number in confirm],
                     "failure": config_failure(d["params"], trials, levels, fail_model, attempts=attempts)})
    score = lambda r: (r["remeasured"] or r["search"])["mean"]  # noqa: E731
    reliable = [r for r in rows if not r["failure"]["flaky"]]
    remeasured = [r for r in reliable if r["remeasured"]]
    # the winner's curse: only a re-measured config is recommended, and re-measured configs (of
    # every ablation round) are compared on the surrogate fitted to every run, re-measurements and
    # reverts included (tuner.stats): near the optimum they differ by less than one run's
    # noise, which one or two re-measurements each cannot resolve (docs/statistics.md, section 2)
    # a runoff (tuner.stats) measured the finalists again: the finalist whose re-measurements,
    # shrunk toward the search's surrogate as far as it has earned, read highest
    finalists = {config_key(t.params) for t in trials if _is_remeasure(t) and t.remeasure == RUNOFF}
    if remeasured and finalists & {r["key"] for r in remeasured}:
        ranked = ranked_remeasured({r["key"]: r["remeasured"] for r in remeasured},
                                   smoothed_values(choosing, list(levels), values=moved))
        first = next(k for k, _ in ranked if k in finalists)
        chosen = next(r for r in remeasured if r["key"] == first)
    elif remeasured:
        smoothed = smoothed_values(choosing, list(levels), ablation_runs=True, values=moved)
        chosen = max(remeasured, key=lambda r: (smoothed.get(r["key"], 0.0), score(r)))
    else:  # no re-measurement: the search's smoothed estimate (tuner.stats), not its luckiest run
        smoothed = smoothed_values(trials, list(levels), values=moved)
        chosen = max(reliable or rows, key=lambda r: (smoothed.get(r["key"], 0.0), r["search"]["mean"]))
    any_remeasured = chosen["remeasured"] is not None
    base_est = None
    if baseline is not None:
        base_runs = [t for t in trials if t.number in cis and config_key(t.params) == config_key(baseline.params)
                     and (t.role != "ablation" or t.ablation_knob is None)]
        base_est = est(base_runs)
    confirmed = est(chosen["confirmation"]) if chosen["confirmation"] else None
    if confirmed is None and chosen["remeasured"] is not None:   # one re-measurement: it chose, and it reports
        confirmed_or_chosen = est([t for t in trials if t.number in cis and _is_remeasure(t)
                                   and config_key(t.params) == chosen["key"]])
    else:
        confirmed_or_chosen = confirmed
    measured = confirmed_or_chosen or chosen["search"]
    same_as_base = baseline is not None and chosen["key"] == config_key(baseline.params)
    speedup = None if same_as_base else ratio_estimate(measured, base_est)
    flaky_faster = next((r for r in sorted(rows, key=score, reverse=True) if r["failure"]["flaky"]
                         and (r["remeasured"] or r["search"])["mean"] > measured["mean"]), None)
    # the search goes on after the ablation with what the ablation's share left (tuner.budget):
    # a config it found is not re-measured. It is never recommended over re-measured ones on one
    # search run (the winner's curse), but one that beat the recommendation's own search run is
    # shown beside it (search run against search run: both read high alike)
    # an extended study plans its ablation again for its new best (tuner.study): the latest round counts
    latest = max((t.ablation_round or 1 for t in trials if _is_remeasure(t)), default=1)
    ablation_start = min((t.number for t in trials if t.role == "ablation" and (t.ablation_round or 1) == latest),
                         default=None)
    unverified = [r for r in reliable if chosen["remeasured"] is not None and r["remeasured"] is None
                  and ablation_start is not None and r["first_trial"] is not None and r["first_trial"] > ablation_start
                  and r["key"] != chosen["key"] and r["search"]["mean"] > chosen["search"]["mean"]]
    faster_unverified = max(unverified, key=lambda r: r["search"]["mean"]) if unverified else None
    trial = chosen["first_trial"] if chosen["first_trial"] is not None else chosen["remeasure_trials"][0]
    return {"trial": trial, "params": chosen["params"], "tokens_per_sec_per_gpu": _public(measured),
            "speedup_vs_baseline": _public(speedup),
            "search_tokens_per_sec_per_gpu": _public(chosen["search"]),
            "winners_curse_adjusted": confirmed is not None,
            "measured_by_trial": (chosen["confirmation"][0].number if confirmed is not None
                                  else chosen["remeasure_trials"][0] if chosen["remeasured"] else trial),
            "confirmation_trials": [t.number for t in chosen["confirmation"]],
            "remeasure_trials": chosen["remeasure_trials"], "n_runs": measured["n_runs"],
            "failure": {**chosen["failure"], "neighbour_risk": (risk := neighbour_risk(chosen["params"], trials, list(levels))),
                        # the risk flag at the top of RECIPE: its own estimate, or a neighbourhood of its
                        # levels that fails >= 25% (the exact test at 10%, one-sided: RISK_CONFIDENCE)
                        "risk_flagged": chosen["failure"]["estimate"] >= FLAKY_FAILURE_RATE
                        or (risk is not None and risk["lower90"] >= FLAKY_FAILURE_RATE)},
            "chosen_on": ("runoff re-measurements" if chosen["key"] in finalists else "re-measurements")
            if any_remeasured else "search trials (not re-measured)",
            "reliable": not chosen["failure"]["flaky"],
            "faster_but_flaky": None if flaky_faster is None else {
                "trial": flaky_faster["first_trial"], "params": flaky_faster["params"],
                "tokens_per_sec_per_gpu": _public(flaky_faster["remeasured"] or flaky_faster["search"]),
                "failure": flaky_faster["failure"]},
            "faster_not_remeasured": None if faster_unverified is None else {
                "trial": faster_unverified["first_trial"], "params": faster_unverified["params"],
                "tokens_per_sec_per_gpu": _public(faster_unverified["search"]),
                "vs_recommended_in_search": _public(ratio_estimate(faster_unverified["search"], chosen["search"])),
                "n_runs": faster_unverified["search"]["n_runs"]},
            "baseline_estimate": _public(base_est)}


_MULTIPLICITY = "Holm step-down over the ablated knobs, family-wise 5%, one-sided (the revert slower)"


def ablation_effects(trials: Sequence[TrialRecord], cis: RunCIs, *, tau2: float, tau_df: float,
                     baseline_params: dict[str, Any] | None, se_scale: float = 1.0,
                     tau2_df: float | None = None) -> dict[str, Any] | None:
    """Each knob's worth: re-measured reference / its one-knob revert (or move: ``move``, the
    level ``tested_value``) - 1, CIs with run-to-run variation, Holm-corrected significance;
    failed runs listed (a failed revert is a failure). A revert measured more than once (the
    runoff's stage measures undecided slowdowns again: tuner.stats' ``revert_replicates``) is
    read from all of its runs (``trials``; ``trial`` is its first).

    Significance is one-sided: a knob matters as set when its revert reads *slower* than the
    reference (half the two-sided ``p_value`` when it does, 1 - half when it reads faster),
    Holm over the knobs at family-wise 5%. ``p_value`` and ``ci95`` stay two-sided. The side is
    fixed before the runs, even where the runoff then chose a revert's own config: that choice
    read the same runs, so a test on the side they chose is not a test (on bench.stats_families'
    studies it listed knobs without an effect 1.6 times as often)."""
    # an extended study plans its ablation again for its new best (tuner.study): the latest round counts
    latest = max((t.ablation_round or 1 for t in trials if t.role == "ablation"), default=1)
    abl = [t for t in trials if t.role == "ablation" and t.state == "COMPLETE" and (t.ablation_round or 1) == latest]
    reverts = [t for t in abl if t.ablation_knob is not None]
    if not reverts:   # none ran: say which were planned and stopped, if any were
        unmeasured = _unmeasured_reverts(trials, latest, set())
        return None if not unmeasured else {
            "best_remeasured": {"trial": None, "tokens_per_sec_per_gpu": None}, "knobs": [], "failed": [],
            "not_measured": unmeasured,
            "multiplicity": _MULTIPLICITY}
    # the reverts are measured against the round's best (its re-measurements, `remeasure` =
    # `best`): not against whichever re-measurement ran ok first (the baseline, when the best
    # failed its first run, and every revert then read as a large effect)
    labelled = any(t.remeasure for t in abl if t.ablation_knob is None)
    ref_params = next((t.params for t in abl if t.ablation_knob is None and t.status == "ok" and t.number in cis
                       and (t.remeasure == "best" or not labelled)), None)
    ref_runs = [t for t in abl if t.ablation_knob is None and ref_params is not None
                and config_key(t.params) == config_key(ref_params) and t.number in cis]
    ref = config_estimate([cis[t.number] for t in ref_runs], tau2=tau2, tau_df=tau_df,
                          se_scale=se_scale, tau2_df=tau2_df) if ref_runs else None
    # a revert measured again (tuner.stats' revert_replicates) is read from all of its runs
    by_revert: dict[tuple[str, str], list[TrialRecord]] = {}
    for t in reverts:
        if t.number in cis and ref is not None:
            by_revert.setdefault((t.ablation_knob, config_key(t.params)), []).append(t)
    effects, p_slower = [], []   # p_slower: each effect's one-sided p (its revert slower)
    for runs in by_revert.values():
        t = runs[0]
        r = ratio_estimate(ref, config_estimate([cis[u.number] for u in runs], tau2=tau2, tau_df=tau_df,
                                                se_scale=se_scale, tau2_df=tau2_df))
        if r is None:
            continue
        knob = t.ablation_knob
        baseline_value = (baseline_params or {}).get(knob, t.params.get(knob))
        effects.append({"knob": knob, "best_value": (ref_params or {}).get(knob), "baseline_value": baseline_value,
                        # a move (tuner.study's plan_moves) tests another level where the best keeps the baseline's
                        "tested_value": t.params.get(knob), "move": t.params.get(knob) != baseline_value,
                        "impact": r["mean"] - 1, "ci95": [r["ci95"][0] - 1, r["ci95"][1] - 1],
                        "p_value": r["p_value"], "trial": t.number, "trials": [u.number for u in runs]})
        p_slower.append(r["p_value"] / 2 if r["mean"] > 1 else 1 - r["p_value"] / 2)
    for e, p, sig in zip(effects, p_slower, holm(p_slower)):
        e["p_slower"], e["significant"] = p, sig
    failed = [{"knob": t.ablation_knob, "status": t.status, "trial": t.number,
               "remeasure": t.ablation_knob is None}
              for t in abl if is_attempt(t) and is_failure(t)]
    return {"best_remeasured": {"trial": ref_runs[0].number if ref_runs else None,
                                "tokens_per_sec_per_gpu": _public(ref)},
            "knobs": sorted(effects, key=lambda e: -e["impact"]), "failed": failed,
            "not_measured": _unmeasured_reverts(trials, latest, {e["knob"] for e in effects} | {f["knob"] for f in failed}),
            "multiplicity": _MULTIPLICITY}


def _unmeasured_reverts(trials: Sequence[TrialRecord], ablation_round: int, accounted: set[str]) -> list[dict[str, Any]]:
    """Knobs the round planned a revert for that are not ``accounted`` for (measured, or failed:
    a failure is evidence that the setting fails, not a gap): stopped by the budget or never
    started (each knob once, with its last planned run's status and trial)."""
    out: dict[str, dict[str, Any]] = {}
    for t in trials:   # a revert that ran ok but could not be read (no reference) is not "stopped"
        if (t.role == "ablation" and t.ablation_knob is not None and t.ablation_knob not in accounted
                and t.status != "ok" and (t.ablation_round or 1) == ablation_round):
            out[t.ablation_knob] = {"knob": t.ablation_knob, "status": t.status, "trial": t.number}
    return sorted(out.values(), key=lambda d: d["knob"])


def what_matters(importance: Sequence[dict[str, Any]], ablation: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Knobs to list under "What matters", from two channels shown side by side: the ablation's
    re-measured one-knob effect at the recommended config (Holm over the ablated knobs) and the
    search's global importance (total index against a placebo, Bonferroni over the knobs).

    A knob is listed when either channel finds it, or when both together do: first the
    Holm-significant ablation effects (by size), then the knobs whose two p-values both point
    the same way past Holm's correction (:func:`combined_evidence`: neither alone had the
    power; ``source`` "both"), then knobs whose index beats the placebo (by index). A
    Holm-significant ablation effect is never dropped because the importance missed it: a
    second-order surrogate cannot see a three-way interaction, nor a knob the search stopped
    varying, and the ablation measured it at the recommended config. The routes control their
    family-wise errors at 5%, 5% and :data:`COMBINED_ALPHA`, so a knob without an effect is
    listed in at most about 11% of studies (measured: docs/statistics.md section 6). Each row
    carries both channels' evidence (``ablation``, ``importance``; None where a channel did
    not test the knob), the combined test where both did (``combined``), and ``source``, the
    channel whose number leads (``impact``/``ci95`` for the ablation and for "both",
    ``total``/``ci95`` for the importance).
    """
    abl = {e["knob"]: e for e in (ablation or {}).get("knobs", [])}
    imp = {d["knob"]: d for d in importance}
    combined = combined_evidence(importance, ablation)

    def channels(knob: str) -> dict[str, Any]:
        e, d = abl.get(knob), imp.get(knob)
        return {"ablation": None if e is None else {"impact": e["impact"], "ci95": e["ci95"], "p_value": e.get("p_value"),
                                                     "p_slower": e.get("p_slower"),
                                                     "significant": bool(e["significant"]), "move": bool(e.get("move")),
                                                     "best_value": e.get("best_value"), "tested_value": e.get("tested_value")},
                "importance": None if d is None or d.get("total") is None else {
                    "total": d["total"], "ci95": d.get("ci95"), "vs_placebo_ci95": d.get("vs_placebo_ci95"),
                    "p_vs_placebo": d.get("p_vs_placebo"), "matters": d.get("matters")},
                "combined": combined.get(knob)}

    rows = []
    by_size = sorted(abl.items(), key=lambda kv: -abs(kv[1]["impact"]))
    for k, e in by_size:
        if e["significant"]:
            ch = channels(k)
            both = bool((ch["importance"] or {}).get("matters"))
            rows.append({"knob": k, "source": "ablation", "impact": e["impact"], "ci95": e["ci95"],
                         "evidence": ["ablation", "importance"] if both else ["ablation"], **ch})
    for k, e in by_size:
        if not e["significant"] and (combined.get(k) or {}).get("significant") and not imp[k].get("matters"):
            rows.append({"knob": k, "source": "both", "impact": e["impact"], "ci95": e["ci95"],
                         "evidence": ["ablation", "importance"], **channels(k)})
    listed = {r["knob"] for r in rows}
    for d in importance:
        if d["knob"] not in listed and d.get("matters"):
            rows.append({"knob": d["knob"], "source": "importance", "total": d["total"], "ci95": d["ci95"],
                         "evidence": ["importance"], **channels(d["knob"])})
    return rows


def combined_evidence(importance: Sequence[dict[str, Any]], ablation: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per knob both channels tested: whether both point the same way, each short of its own
    test. The ablation's one-sided p (the revert slower than the best: ``p_slower``) and the
    importance's one-sided p against the placebo (``p_vs_placebo``) are combined by
    Wilkinson's maximum-p test (Wilkinson 1951, *Psychol. Bull.* 48: where a knob has no
    effect, both are uniform and independent, the ablation's runs being fresh launches and the
    importance reading the search's runs, so max(p1, p2)^2 is a p-value), Holm over those knobs
    at family-wise :data:`COMBINED_ALPHA`: {knob: {"p_value", "significant", "method"}}. Unlike
    Fisher's sum of logs, one channel alone cannot carry it: a knob whose revert reads as fast
    as the best (``p_slower`` 0.5) is not listed however strong its importance, and for four
    knobs each p must be under 0.05.

    Example:
        >>> imp = [{"knob": "w", "p_vs_placebo": 0.02}, {"knob": "p", "p_vs_placebo": 0.001}]
        >>> abl = {"knobs": [{"knob": "w", "p_slower": 0.04}, {"knob": "p", "p_slower": 0.5}]}
        >>> {k: (round(v["p_value"], 4), v["significant"]) for k, v in combined_evidence(imp, abl).items()}
        {'w': (0.0016, True), 'p': (0.25, False)}
    """
    imp = {d["knob"]: d.get("p_vs_placebo") for d in importance}
    both = [(e["knob"], max(e["p_slower"], imp[e["knob"]]) ** 2) for e in (ablation or {}).get("knobs", [])
            if e.get("p_slower") is not None and imp.get(e["knob"]) is not None]
    return {k: {"p_value": p, "significant": sig, "method": "Wilkinson's maximum p of the ablation's and the "
                f"importance's one-sided p, Holm over the knobs both tested, family-wise {COMBINED_ALPHA:.0%}"}
            for (k, p), sig in zip(both, holm([p for _, p in both], COMBINED_ALPHA))}


def undecided_knobs(importance: Sequence[dict[str, Any]], ablation: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Knobs neither channel lists whose ablation CI reaches an effect of :data:`UNDECIDED_EFFECT`
    or more (the best faster than the revert): the study lacked the power to tell, not
    evidence that they do not matter. Each: knob, impact, ci95, by the CI's reach.

    Example:
        >>> abl = {"knobs": [{"knob": "w", "impact": 0.04, "ci95": [-0.06, 0.15], "significant": False},
        ...                  {"knob": "p", "impact": 0.0, "ci95": [-0.03, 0.03], "significant": False}]}
        >>> [d["knob"] for d in undecided_knobs([], abl)]
        ['w']
    """
    listed = {r["knob"] for r in what_matters(importance, ablation)}
    out = [{"knob": e["knob"], "impact": e["impact"], "ci95": e["ci95"]} for e in (ablation or {}).get("knobs", [])
           if e["knob"] not in listed and not e.get("significant") and e["ci95"][1] >= UNDECIDED_EFFECT]
    return sorted(out, key=lambda d: -d["ci95"][1])


def what_matters_power(importance: Sequence[dict[str, Any]], ablation: dict[str, Any] | None,
                       importance_model: dict[str, Any] | None) -> str | None:
    """A sentence when neither channel had the power to find anything (What matters is empty),
    saying why; None otherwise."""
    if what_matters(importance, ablation):
        return None
    parts = []
    knobs = (ablation or {}).get("knobs") or []
    if not knobs:
        parts.append("no ablation was measured (no re-measured best with one-knob reverts)")
    else:
        widest = max((e["ci95"][1] - e["ci95"][0]) / 2 for e in knobs)
        parts.append(f"no ablation effect cleared Holm's correction over {len(knobs)} knobs (CIs up to "
                     f"+-{widest:.0%} wide)")
    model = importance_model or {}
    n = model.get("n_trials")
    r2 = model.get("oob_r2")
    if not importance or all(d.get("total") is None for d in importance):
        parts.append(f"the importance had too few ok search trials ({n or 0})")
    else:
        parts.append("no knob's importance beat the random placebo knob"
                     + (f" (surrogate leave-one-out R^2 {r2:.2f} over {n} trials)" if r2 is not None else ""))
    return ("Neither channel has the power to name a knob: " + "; ".join(parts)
            + ". This is no evidence that the knobs do not matter.")
