"""The study's storage: the one factory, admission locks, retries through outages, and the
one module that touches Optuna's private attributes.

Knows nothing of knobs. ``--storage`` beats ``$TUNER_STORAGE``, which beats
``sqlite:///tuner.db``.

Example:
    >>> redact_url("postgresql+psycopg2://tuner:secret@db:5432/tuner")
    'postgresql+psycopg2://tuner:***@db:5432/tuner'
"""

from tuner.storage._optuna_core import StudyView
from tuner.storage._optuna_internals import (
    fail_stale_trials,
    missing_internals,
    params_in_one_transaction,
    rdb_storage,
    study_storage,
    trial_id,
    write_trial,
)
from tuner.storage._optuna_queries import (
    LedgerTrial,
    ledger_view,
    set_finished_trial_user_attrs,
    trial_state,
    upkeep_due,
)
from tuner.storage._storage import (
    DEFAULT_STORAGE,
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    MAX_OVERFLOW,
    OUTAGE_S,
    POOL_SIZE,
    StorageError,
    admission_lock,
    load_existing_study,
    open_storage,
    redact_url,
    resolve_storage_url,
    retry_notes,
    with_retries,
)
from tuner.storage._unrun import (
    end_if_waiting,
    end_unrun,
)

__all__ = [
    "DEFAULT_STORAGE",
    "GRACE_PERIOD_S",
    "HEARTBEAT_INTERVAL_S",
    "LedgerTrial",
    "MAX_OVERFLOW",
    "OUTAGE_S",
    "POOL_SIZE",
    "StorageError",
    "StudyView",
    "admission_lock",
    "end_if_waiting",
    "end_unrun",
    "fail_stale_trials",
    "ledger_view",
    "load_existing_study",
    "missing_internals",
    "open_storage",
    "params_in_one_transaction",
    "rdb_storage",
    "redact_url",
    "resolve_storage_url",
    "retry_notes",
    "set_finished_trial_user_attrs",
    "study_storage",
    "trial_id",
    "trial_state",
    "upkeep_due",
    "write_trial",
    "with_retries",
]
