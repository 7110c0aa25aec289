"""The search: the space, the samplers (Optuna ``BaseSampler``s), screening and repeats.

Nothing here launches a trial: the study's loop (tuner.study) asks a sampler for a config,
screens it (:func:`screen`: configs the model knows cannot run cost nothing) and skips exact
repeats (:func:`screen_repeat`) before it launches anything.

Example:
    >>> from tuner.spec import parse_spec
    >>> spec = parse_spec({"study": {"name": "s", "sampler": "random"}, "model": {"preset": "tiny"},
    ...                    "space": {"micro_batch": [1, 2]}})
    >>> type(make_sampler(spec)).__name__
    'RandomSampler'
"""

from tuner.search._grid_model import top_prediction
from tuner.search._model_sampler import ModelGuidedSampler
from tuner.search._repeats import (
    REPEAT,
    coordinator_seed,
    screen_repeat,
)
from tuner.search._samplers import (
    AskTellGridSampler,
    make_sampler,
    model_knows,
)
from tuner.search._screening import (
    MEMORY_KNOBS,
    PRIOR_MEMORY_MARGIN,
    PROBES_ATTR,
    Verdict,
    as_sampler_sees_it,
    is_deliberate,
    memory_probe,
    memory_ratio_low,
    memory_region,
    nccl_problem,
    predicted_memory_gb,
    screen,
    screening_summary,
)
from tuner.search._space import (
    distribution,
    suggest_params,
)

__all__ = [
    "AskTellGridSampler",
    "MEMORY_KNOBS",
    "ModelGuidedSampler",
    "PRIOR_MEMORY_MARGIN",
    "PROBES_ATTR",
    "REPEAT",
    "Verdict",
    "as_sampler_sees_it",
    "coordinator_seed",
    "distribution",
    "is_deliberate",
    "make_sampler",
    "memory_probe",
    "memory_ratio_low",
    "memory_region",
    "model_knows",
    "nccl_problem",
    "predicted_memory_gb",
    "screen",
    "screen_repeat",
    "screening_summary",
    "suggest_params",
    "top_prediction",
]
