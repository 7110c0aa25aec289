"""The simulated cluster: a launcher whose trials come from a performance model, in milliseconds.

``matched`` physics is helper's own model; ``perturbed:SEED`` a cluster whose physics differ
(every constant, the activation formula, interactions helper does not model, a slow node, a
version-dependent NCCL rule). Used to rehearse a study and to benchmark the search.

Example:
    >>> physics_for("perturbed:3", "H100-80GB").matched
    False
"""

from tuner.sim._launcher import (
    SimLauncher,
)
from tuner.sim._physics import (
    PERTURB_RANGE,
    physics_for,
    truth,
)

__all__ = [
    "PERTURB_RANGE",
    "SimLauncher",
    "physics_for",
    "truth",
]
