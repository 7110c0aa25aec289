"""A synthetic study built as the coordinator builds one, with every run's truth kept.

The study is a real Optuna study (in memory) holding what the coordinator records
(tuner.study.outcome: value, one intermediate value per measured step, user attrs
``status``, ``gpu_seconds``, ``step_seconds``, ``role``): the baseline first, then the search,
then the ablation round and its runoff exactly as tuner plans them: the admission's
``plan_ablation_once`` (stage 1: the best, the baseline and the candidates re-measured,
interleaved with one-knob reverts; stage 2: the runoff of the finalists, tuner.stats),
its queued trials popped by ``study.ask()`` and their params suggested by tuner.search, as
the coordinator does. ``analyze_record(study_record(study))`` is then what `tuner analyze`
computes.

The search stands in for a sampler: :data:`N_STARTUP` random configs, then each trial
either a random config (probability ``explore``, by default :data:`EXPLORE`) or one of the
:data:`TOP` best ok configs so far with one knob (70%) or two changed: a bias toward good
configs, as TPE's. ``explore=1`` is a uniform random search (bench/synthetic_studies.py's).
As with tuner.search, a config already run is not run again (up to :data:`MAX_DRAWS` draws,
then the nearest unseen config); when none is left the search ends early.

Budget: every run costs :data:`RUN_GPU_SECONDS` (a failure :data:`FAILED_GPU_SECONDS`), and the
study's limit is set so that the ablation share (the spec's default, 15%) affords
:data:`SHARE_RUNS` full runs, as on the 13B x 8 H100 sim (about 900 GPU-s a run against a
21,600 GPU-s share): the round re-measures up to six candidates and the runoff has budget
left. What the share leaves does not go back to the search here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from bench.stats_noise import Noise, launch
from bench.stats_truth import FAMILIES, Family, active, configs
from bench.tuner_api import (
    StudyRecord,
    config_key,
    distribution,
    parse_spec,
    plan_ablation_once,
    study_record,
    suggest_params,
)

__all__ = ["BuiltStudy", "build", "propose", "N_STARTUP", "EXPLORE", "TOP", "MAX_DRAWS", "RUN_GPU_SECONDS",
           "SHARE_RUNS"]

N_STARTUP = 10
EXPLORE = 0.35
TOP = 5
MAX_DRAWS = 50
RUN_GPU_SECONDS = 40.0
FAILED_GPU_SECONDS = 10.0
SHARE_RUNS = 24


@dataclass(frozen=True)
class BuiltStudy:
    record: StudyRecord
    launch_rate: dict[int, float]
    """trial number -> the true long-run tokens/s/GPU of that ok run's launch."""
    noise: Noise


def _random(rng: np.random.Generator, fam: Family) -> dict[str, Any]:
    p = {k: v[int(rng.integers(len(v)))] for k, v in fam.space.items()}
    if fam.favour:
        knob, level, prob = fam.favour
        others = [v for v in fam.space[knob] if v != level]
        p[knob] = level if rng.random() < prob else others[int(rng.integers(len(others)))]
    return active(p, fam.space)


def _mutate(rng: np.random.Generator, fam: Family, parent: dict[str, Any]) -> dict[str, Any]:
    p = dict(parent)
    movable = [k for k in fam.space if len(fam.space[k]) > 1]
    for knob in rng.choice(movable, size=1 if rng.random() < 0.7 else 2, replace=False):
        others = [v for v in fam.space[knob] if v != p.get(knob, fam.space[knob][0])]
        p[str(knob)] = others[int(rng.integers(len(others)))]
    return active(p, fam.space)


def propose(rng: np.random.Generator, fam: Family, history: list[tuple[dict[str, Any], float | None]],
            explore: float = EXPLORE) -> dict[str, Any] | None:
    """The next search config given (params, value or None for a failure) so far; None when
    every config has run (module doc)."""
    seen = {config_key(p) for p, _ in history}
    ok = sorted(((v, i) for i, (_, v) in enumerate(history) if v), reverse=True)
    top = []
    for _, i in ok:
        if history[i][0] not in top:
            top.append(history[i][0])
        if len(top) == TOP:
            break
    p: dict[str, Any] = {}
    for _ in range(MAX_DRAWS):
        if len(history) <= N_STARTUP or not top or rng.random() < explore:
            p = _random(rng, fam)
        else:
            p = _mutate(rng, fam, top[int(rng.integers(len(top)))])
        if config_key(p) not in seen:
            return p
    unseen = [c for c in configs(fam) if config_key(c) not in seen]
    if not unseen:
        return None
    distance = [sum(c.get(k) != p.get(k) for k in fam.space) for c in unseen]
    nearest = [c for c, d in zip(unseen, distance) if d == min(distance)]
    return nearest[int(rng.integers(len(nearest)))]


def build(family: str, study: int, seed: int = 0, explore: float = EXPLORE) -> BuiltStudy:
    """Study ``study`` of ``family`` (module doc); reproducible from (family, study, seed, explore)."""
    fam = FAMILIES[family]
    noise = fam.noise(study)
    rng = np.random.default_rng([seed, list(FAMILIES).index(family), study])
    spec_dict = {"study": {"name": f"{family}-{study}"}, "model": {"preset": "tiny"},
                 "space": {k: list(v) for k, v in fam.space.items()}}
    spec = parse_spec(spec_dict)
    limit = SHARE_RUNS * RUN_GPU_SECONDS / spec.study.ablation_share
    dists = {k.name: distribution(k) for k in spec.space}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=study))
    st.set_user_attr("spec", spec_dict)
    st.set_user_attr("budget_limit_gpu_seconds", limit)
    launch_rate: dict[int, float] = {}
    history: list[tuple[dict[str, Any], float | None]] = []

    def measure(params: dict[str, Any]) -> tuple[float, dict[str, Any], dict[int, float], float | None]:
        if rng.random() < fam.p_fail(params):
            return 0.0, {"status": "oom", "gpu_seconds": FAILED_GPU_SECONDS, "message": "CUDA out of memory"}, {}, None
        run = launch(rng, noise, fam.truth(params))
        attrs = {"status": "ok", "gpu_seconds": RUN_GPU_SECONDS, "step_seconds": run.seconds.tolist(),
                 "world_size": 1, "launcher": "synthetic"}
        return run.value, attrs, dict(enumerate(run.rates.tolist())), run.launch_rate

    def add(params: dict[str, Any], **extra: Any) -> None:
        value, attrs, steps, rate = measure(params)
        number = len(history)   # search trials are added in order, before anything is asked
        st.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: dists[k] for k in params}, value=value, intermediate_values=steps,
            user_attrs={**attrs, **extra}))
        if rate is not None:
            launch_rate[number] = rate
        history.append((params, value if rate is not None else None))

    def run_queued() -> None:
        while any(t.state == optuna.trial.TrialState.WAITING for t in st.get_trials(deepcopy=False)):
            trial = st.ask()
            value, attrs, steps, rate = measure(suggest_params(trial, spec))
            for step, v in steps.items():
                trial.report(v, step)
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            st.tell(trial, value)
            if rate is not None:
                launch_rate[trial.number] = rate

    add(dict(fam.baseline), role="baseline")
    for _ in range(fam.n_search):
        params = propose(rng, fam, history, explore)
        if params is None:
            break
        add(params)
    for _stage in (1, 2):   # the round, then its runoff: the admission calls it whenever nothing is queued
        plan_ablation_once(st, spec, st.get_trials(deepcopy=False), limit_gpu_seconds=limit)
        run_queued()
    return BuiltStudy(record=study_record(st), launch_rate=launch_rate, noise=noise)
