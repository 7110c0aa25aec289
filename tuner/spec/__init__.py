"""Study specs: a TOML file in, a frozen, validated :class:`StudySpec` out.

A spec is parsed once, at the edge; every problem raises :class:`~tuner.errors.SpecError`
naming file, key and problem on one line. The package also holds what a spec implies for a
trial: every knob's value (:func:`complete_params`) and the layout checks against the cluster.

Example:
    >>> spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "tiny"},
    ...                    "space": {"micro_batch": [1, 2]}})
    >>> spec.knob_names, complete_params({"micro_batch": 2}, spec)["nccl_algo"]
    (('micro_batch',), 'default')
"""

from tuner.spec._cluster import (
    layout_problem,
    sim_physics_problem,
    space_layout_problem,
    unknown_gpu_note,
)
from tuner.spec._fingerprint import (
    FINGERPRINT_WHEN_SET,
    spec_fingerprint,
)
from tuner.spec._params import (
    baseline_params,
    complete_params,
)
from tuner.spec._sections import (
    KnobSpace,
)
from tuner.spec._spec import (
    SpecError,
    StudySpec,
    load_spec,
    parse_spec,
    study_name_problem,
)

__all__ = [
    "FINGERPRINT_WHEN_SET",
    "KnobSpace",
    "SpecError",
    "StudySpec",
    "baseline_params",
    "complete_params",
    "layout_problem",
    "load_spec",
    "parse_spec",
    "sim_physics_problem",
    "space_layout_problem",
    "spec_fingerprint",
    "study_name_problem",
    "unknown_gpu_note",
]
