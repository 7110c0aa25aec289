"""tuner/search/_samplers.py: the grid sampler survives ask/tell past its last point; TPE and GP learn
from the configs screening kept from running."""

import dataclasses

import optuna
from optuna.trial import TrialState

from tuner.budget import costs_from_trials
from tuner.search import AskTellGridSampler, as_sampler_sees_it, make_sampler, suggest_params
from tuner.spec import load_spec
from tuner.stats import study_record
from tuner.storage import StudyView, end_unrun


def test_grid_sampler_exhausted_under_ask_tell_does_not_raise():
    # Optuna's GridSampler calls study.stop() after the last point, which raises outside optimize()
    study = optuna.create_study(sampler=AskTellGridSampler({"x": [1, 2]}, seed=0), direction="maximize")
    seen = []
    for _ in range(3):
        trial = study.ask()
        seen.append(trial.suggest_categorical("x", [1, 2]))
        study.tell(trial, float(seen[-1]))
    assert sorted(seen[:2]) == [1, 2] and study.sampler.is_exhausted(study)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 3


# --------------------------------------------------------------- TPE and GP learn from screening

SPEC_13B = "studies/sim-llama13b-h100x8.toml"


def _screened(params):
    """A stand-in for tuner.search: the large micro-batches and NVLS never run."""
    return params["micro_batch"] >= 4 or params["nccl_algo"] == "NVLS"


def _screened_proposals(sampler_name, *, knobs=None, n_asks, n_counted, seed=0):
    """Drive make_sampler's sampler as the coordinator does (screened configs end unrun, FAIL
    with status `pruned`; launched ones get value and constraint) on a surface whose best
    configs border the screened region; how many of the last ``n_counted`` asks were screened."""
    spec = load_spec(SPEC_13B)
    spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, sampler=sampler_name, seed=seed),
                               space=tuple(k for k in spec.space if knobs is None or k.name in knobs))
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    screened = 0
    for i in range(n_asks):
        trial = study.ask()
        params = suggest_params(trial, spec)
        if _screened(params):
            end_unrun(study, trial, "pruned", "screened: the model says it cannot run")
            screened += i >= n_asks - n_counted
            continue
        trial.set_constraint("failed", 0.0)
        study.tell(trial, 1000.0 * params["micro_batch"] + 10.0 * params["grad_accum"])
    return screened


def test_tpe_learns_to_avoid_screened_configs():
    # before: TPE ignored the FAIL trials screening records and spent 19 of its 30 model-guided
    # proposals on screened configs (it is drawn to the border of the region it never sees fail)
    assert _screened_proposals("tpe", n_asks=40, n_counted=30) <= 12


def test_gp_learns_to_avoid_screened_configs():
    # before: GP saw no trial of the screened region and proposed it on 5 of 8 asks
    assert _screened_proposals("gp", knobs=("micro_batch", "grad_accum", "nccl_algo"), n_asks=16, n_counted=8) <= 2


def test_a_screened_trial_stays_an_unrun_fail_in_the_study():
    # samplers see it as a failure; the stored trial (analysis, report, dashboard, the budget's
    # cost estimates) stays unrun: PRUNED, status pruned, 0 GPU-s
    spec = dataclasses.replace(load_spec(SPEC_13B), study=dataclasses.replace(load_spec(SPEC_13B).study,
                                                                               sampler="tpe"))
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    trial = study.ask()
    suggest_params(trial, spec)
    end_unrun(study, trial, "pruned", "screened")
    stored = study.get_trials()[0]
    assert stored.state == TrialState.PRUNED and stored.user_attrs["gpu_seconds"] == 0.0
    assert study_record(study).trials[0].status == "pruned"
    assert costs_from_trials(study.get_trials()) == []
    seen = as_sampler_sees_it(stored)
    assert (seen.state, seen.value, seen.constraints, seen.number) == (TrialState.COMPLETE, 0.0, {"failed": 1.0}, 0)
    view = StudyView(study, as_sampler_sees_it)
    assert [t.state for t in view._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))] == [TrialState.COMPLETE]
    skipped = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"status": "skipped"})
    assert as_sampler_sees_it(skipped) is skipped  # only screened configs stand for a failure
    unrun = optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={"status": "skipped"})
    assert as_sampler_sees_it(unrun).state == TrialState.FAIL  # never ran: ignored, as before
