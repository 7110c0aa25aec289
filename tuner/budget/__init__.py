"""GPU-second arithmetic, pure: budget strings, the ledger, trial caps, warm-trial costs and
the admission decision.

Plain data in, numbers out; no storage access. The ledger lives in the study's trials (user
attrs ``gpu_seconds``, ``reserved_gpu_seconds``), so every coordinator sees the same budget.

Example:
    >>> parse_budget("40gpuh"), format_gpu_hours(5400.0)
    (144000.0, '1.50 GPU-h')
"""

from tuner.budget._admission import (
    Admission,
    next_admission,
    search_limit,
)
from tuner.budget._ledger import (
    CAP_FACTOR,
    LEDGER_ATTRS,
    Ledger,
    LedgerEntry,
    admits,
    charged_gpu_seconds,
    estimate_trial_cost,
    format_gpu_hours,
    ledger_from_trials,
    parse_budget,
    trial_cap,
    trial_cap_basis,
)
from tuner.budget._warm import (
    DATA_LOADER_S,
    RECENT,
    Cost,
    Worker,
    cap_basis,
    costs_from_trials,
    estimate_cost,
    estimate_from_trials,
    reuse_order,
    setup_seconds,
    setup_seconds_by_level,
    switch_level,
    worker_after,
)

__all__ = [
    "Admission",
    "CAP_FACTOR",
    "Cost",
    "DATA_LOADER_S",
    "LEDGER_ATTRS",
    "Ledger",
    "LedgerEntry",
    "RECENT",
    "Worker",
    "admits",
    "cap_basis",
    "charged_gpu_seconds",
    "costs_from_trials",
    "estimate_cost",
    "estimate_from_trials",
    "estimate_trial_cost",
    "format_gpu_hours",
    "ledger_from_trials",
    "next_admission",
    "parse_budget",
    "reuse_order",
    "search_limit",
    "setup_seconds",
    "setup_seconds_by_level",
    "switch_level",
    "trial_cap",
    "trial_cap_basis",
    "worker_after",
]
