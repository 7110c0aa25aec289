import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tests.spine_helpers import fast_spec
from tuner.search import distribution, suggest_params
from tuner.spec import KnobSpace


def test_distributions():
    padding = distribution(KnobSpace(name="padding", choices=("packed", "longest")))
    assert padding == CategoricalDistribution(("packed", "longest"))
    assert distribution(KnobSpace(name="grad_accum", low=1, high=8, log=True)) == IntDistribution(1, 8, log=True)
    assert distribution(KnobSpace(name="x", low=0.5, high=1.0)) == FloatDistribution(0.5, 1.0)


def test_prefetch_factor_only_with_workers(tmp_path):
    spec = fast_spec(tmp_path, extra_space="num_workers = [0, 2]\nprefetch_factor = [2, 4]", baseline=False)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        params = suggest_params(trial, spec)
        assert ("prefetch_factor" in params) == (params["num_workers"] > 0)
        seen.add(params["num_workers"])
        study.tell(trial, 1.0)
    assert seen == {0, 2}
