"""One best everywhere: the recommendation written where Optuna's own tools show it.

Optuna's ``best_trial`` (what ``optuna best-trial`` and optuna-dashboard's "best" show) is the
highest single run: the luckiest of many noisy runs. tuner recommends the config chosen on
re-measurements (tuner.stats). So after each analysis:

- the study attr ``recommendation`` holds the recommended trial, its params, tokens/s/GPU and
  speedup with CIs, and how it was chosen (`tuner status` and the dashboard's study page show it);
- the recommended trial gets the user attr ``recommended = true`` (the dashboard's trial
  table and ``optuna trials`` show it; a trial recommended before and no longer gets ``false``);
- the highest single run, when it is another trial, gets ``not_recommended`` saying why and
  which trial is recommended instead, so ``optuna best-trial`` answers the question it raises.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

__all__ = ["mark_recommendation", "RECOMMENDATION_ATTR"]

RECOMMENDATION_ATTR = "recommendation"


def _recommendation(analysis: dict[str, Any]) -> dict[str, Any] | None:
    best = analysis.get("best")
    if not best:
        return None
    return {"trial": best["trial"], "params": best["params"],
            "tokens_per_sec_per_gpu": best["tokens_per_sec_per_gpu"],
            "speedup_vs_baseline": best.get("speedup_vs_baseline"),
            "chosen_on": best.get("chosen_on"), "winners_curse_adjusted": best.get("winners_curse_adjusted"),
            "simulated": bool(analysis.get("simulated")), "by": "tuner analyze / tuner report",
            "n_trials": analysis.get("n_trials"),
            "written_at": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def mark_recommendation(study, analysis: dict[str, Any]) -> dict[str, Any] | None:
    """Write the analysis's recommendation into the study (see the module's docstring).

    Returns the study attr written, or None when nothing is recommended (the attr is then
    cleared to None). Trial marks need an RDB storage; elsewhere only the study attr is set.
    """
    from tuner.storage import set_finished_trial_user_attrs

    rec = _recommendation(analysis)
    previous = study.user_attrs.get(RECOMMENDATION_ATTR) or {}
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    marked: list[int] = []
    for number in previous.get("marked_trials", []):  # undo the last analysis's marks
        if number in by_number and (rec is None or number not in (rec["trial"],)):
            set_finished_trial_user_attrs(study, by_number[number],
                                          {"recommended": False, "not_recommended": None})
    if rec is None:
        study.set_user_attr(RECOMMENDATION_ATTR, None)
        return None
    if rec["trial"] in by_number and set_finished_trial_user_attrs(
            study, by_number[rec["trial"]], {"recommended": True, "not_recommended": None}):
        marked.append(rec["trial"])
    try:
        luckiest = study.best_trial
    except ValueError:  # no COMPLETE trial with a value
        luckiest = None
    if luckiest is not None and luckiest.number != rec["trial"]:
        why = (f"the highest single run, not the recommendation: tuner recommends trial {rec['trial']} "
               f"({rec['chosen_on'] or 'chosen by tuner analyze'}); one noisy run reads high")
        if set_finished_trial_user_attrs(study, luckiest, {"recommended": False, "not_recommended": why}):
            marked.append(luckiest.number)
        rec["highest_single_run"] = luckiest.number
    rec["marked_trials"] = marked
    study.set_user_attr(RECOMMENDATION_ATTR, rec)
    return rec
