"""tuner/sampling.py: the grid sampler survives ask/tell past its last point."""

import optuna

from tuner.sampling import AskTellGridSampler


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
