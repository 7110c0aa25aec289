"""A study's lifecycle and its loop: create or join, ask -> admit -> launch -> tell, the
ablation round and its runoff, the spool, heartbeats and retries.

The admission lock (tuner.storage.admission_lock) is held only to read the ledger and reserve
a trial's budget; the sampler's refit and the ablation's statistics run outside it.

Example:
    >>> spec = load_spec("studies/quickstart.toml")                        # doctest: +SKIP
    >>> run_study(spec, RunOptions(storage_url="sqlite:///tuner.db"))      # doctest: +SKIP
"""

from tuner.study._ablation import (
    MAX_CANDIDATES,
    MAX_MOVES,
    N_CANDIDATES,
    plan_ablation,
    plan_ablation_once,
    plan_moves,
    plan_runs,
    replicate_runs,
    shortlist,
)
from tuner.study._admission import (
    MAX_PRUNED_IN_A_ROW,
    end_unrun,
    fail_stale_trials,
    last_run_params,
    runoff_waits,
)
from tuner.study._breaker import (
    CircuitBreaker,
    signature,
)
from tuner.study._coordinator import (
    RunOptions,
    TrialEvent,
    record_result,
    run_study,
)
from tuner.study._heartbeat import (
    Heartbeat,
    HeartbeatLost,
)
from tuner.study._lifecycle import (
    RunSummary,
    check_joinable,
    enqueue_lost_retries,
    load_existing_study,
    open_study,
    retry_once,
    study_status,
    summarize,
)
from tuner.study._outcome import (
    INTERRUPTED,
    LOST,
    Outcome,
    adaptive_bar,
    best_lower_bound,
    infrastructure_failure,
    label_budget_stop,
    outcome,
)
from tuner.study._preflight import (
    check_runs_dir,
    local_device_problem,
    needs_preflight,
    preflight,
)
from tuner.study._spool import (
    Spool,
)

__all__ = [
    "MAX_MOVES",
    "CircuitBreaker",
    "Heartbeat",
    "HeartbeatLost",
    "INTERRUPTED",
    "LOST",
    "MAX_CANDIDATES",
    "MAX_PRUNED_IN_A_ROW",
    "N_CANDIDATES",
    "Outcome",
    "RunOptions",
    "RunSummary",
    "Spool",
    "TrialEvent",
    "adaptive_bar",
    "best_lower_bound",
    "check_joinable",
    "check_runs_dir",
    "local_device_problem",
    "end_unrun",
    "enqueue_lost_retries",
    "fail_stale_trials",
    "infrastructure_failure",
    "label_budget_stop",
    "last_run_params",
    "load_existing_study",
    "needs_preflight",
    "open_study",
    "outcome",
    "plan_ablation",
    "plan_ablation_once",
    "plan_moves",
    "replicate_runs",
    "runoff_waits",
    "plan_runs",
    "preflight",
    "record_result",
    "retry_once",
    "run_study",
    "shortlist",
    "signature",
    "study_status",
    "summarize",
]
