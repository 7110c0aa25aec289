"""No accidental repeats: a finished configuration is not launched again by accident.

Seeded start-up trials used to repeat on resume and across parallel coordinators (each
started its sampler with the spec's seed), and a converging TPE proposes its best config
again and again: in a 400 GPU-h sim run 67 of 352 search trials were exact repeats. Now:

* each coordinator's sampler gets its own seed (:func:`coordinator_seed`: the spec's seed for
  the study's first coordinator, so a fresh study is reproducible, then one more per start);
* at admission a fresh suggestion equal to a finished (COMPLETE) or running trial's params
  is not launched: it is recorded as FAIL with status `repeat` (0 GPU-s; analysis and the
  budget leave it out) and the nearest unseen configuration of random draws (fewest knobs
  changed) is queued in its place
  (:func:`screen`, :func:`unseen_config`); when none is left the search is exhausted;
* deliberate re-measurements (the baseline, the ablation's re-run of the best, retries) are
  queued trials; when one repeats a finished config it is labelled ``remeasurement_of``.

Example:
    >>> coordinator_seed(0, 0), coordinator_seed(0, 2)
    (0, 15838)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.search._space import suggest_params
from tuner.spec import StudySpec
from tuner.storage import end_unrun

__all__ = ["coordinator_seed", "config_key", "duplicate_of", "unseen_config", "screen_repeat", "MAX_DRAWS", "REPEAT"]

REPEAT = "repeat"
MAX_DRAWS = 200
"""Random draws looking for an unseen config before the search counts as exhausted."""
_SEED_STRIDE = 7919  # a prime: coordinator seeds never coincide with spec seeds 0, 1, 2...


def coordinator_seed(spec_seed: int, start_index: int) -> int:
    """The sampler seed of the ``start_index``-th coordinator start on a study."""
    return spec_seed + _SEED_STRIDE * start_index


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def duplicate_of(params: dict[str, Any], trials: Iterable[optuna.trial.FrozenTrial], number: int) -> int | None:
    """The number of a COMPLETE or RUNNING trial (not ``number`` itself) with these params."""
    key = config_key(params)
    for t in trials:
        if t.number != number and t.state in (TrialState.COMPLETE, TrialState.RUNNING) and config_key(t.params) == key:
            return t.number
    return None


def unseen_config(spec: StudySpec, trials: Iterable[optuna.trial.FrozenTrial], *, seed: int,
                  near: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A random configuration of the space that no COMPLETE or RUNNING trial has, and that
    screening has not pruned (tuner.search), or None.

    With ``near`` (the sampler's repeated suggestion), the unseen draw that differs from it
    in the fewest knobs: the search stays where the sampler wanted to look. A pruned config
    is not offered as a replacement (it would be pruned again, and again); the sampler may
    still propose it, and screening lets it through once evidence overrules the prune.
    """
    seen = {config_key(t.params) for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.RUNNING) or t.user_attrs.get("status") == "pruned"}
    scratch = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    best, best_distance = None, None
    for _ in range(MAX_DRAWS):
        params = suggest_params(scratch.ask(), spec)
        if config_key(params) in seen:
            continue
        if near is None:
            return params
        distance = sum(params.get(k) != near.get(k) for k in set(params) | set(near))
        if best_distance is None or distance < best_distance:
            best, best_distance = params, distance
        if distance <= 1:
            break
    return best


def screen_repeat(study: optuna.Study, spec: StudySpec, trial: optuna.Trial, params: dict[str, Any],
           trials: list[optuna.trial.FrozenTrial]) -> bool:
    """At admission: True when ``trial`` (just asked, ``params`` suggested) is an accidental
    repeat, now recorded as one: FAIL with status `repeat`, 0 GPU-s, never launched (Optuna
    cannot change a trial's params once suggested). A random unseen config is queued in its
    place (user attr ``replaces_repeat``); when none is left the study's ``search_exhausted``
    is set. A queued trial (the baseline, an ablation run, a retry, a replacement) that
    repeats a finished config is deliberate: it runs, labelled ``remeasurement_of``."""
    dup = duplicate_of(params, trials, trial.number)
    if dup is None:
        return False
    if any(key in trial.user_attrs for key in ("role", "retry_of", "replaces_repeat")):
        trial.set_user_attr("remeasurement_of", dup)
        return False
    alt = unseen_config(spec, trials, seed=spec.study.seed + trial.number, near=params)
    end_unrun(study, trial, REPEAT, f"not run: an exact repeat of trial {dup}"
              + ("; no unseen config is left" if alt is None else "; an unseen config runs instead"))
    if alt is None:
        study.set_user_attr("search_exhausted", True)
    else:
        study.enqueue_trial(alt, user_attrs={"replaces_repeat": trial.number}, skip_if_exists=False)
    return True
