"""A finished study as plain data: the only place analysis touches Optuna objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

__all__ = ["TrialRecord", "StudyRecord", "study_record", "trial_records", "trial_status", "ROLE_ATTRS"]

ROLE_ATTRS = ("role", "ablation_knob", "ablation_of", "ablation_round", "remeasure", "ablation_move", "ablation_replicate")
"""The user attrs that say why a queued trial runs; its retry and a recovered copy keep them
(a runoff run retried without `remeasure` would no longer count as the runoff's)."""


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    number: int
    state: str
    """Optuna state name."""
    status: str
    """`ok`, `oom`, `timeout`, `error`; `fail` for FAIL trials (coordinator died / interrupted);
    `skipped` for queued trials the spent budget never ran; `stopped_by_budget` for a trial
    the budget's end cut (tuner.study); `repeat` for a suggestion that repeated a
    finished config and was not run (tuner.search); `running` / `waiting` for unfinished ones."""
    params: dict[str, Any]
    steps: tuple[float, ...]
    """tokens/s/GPU per measured step, in step order."""
    value: float | None
    step_seconds: tuple[float, ...] = ()
    """Wall seconds per measured step (same order as steps); empty where not recorded."""
    role: str | None = None
    ablation_knob: str | None = None
    ablation_of: int | None = None
    """Ablation runs: the trial whose config the round re-measures."""
    ablation_round: int | None = None
    """Ablation runs: 1 for the first round, 2 for the one a budget extension planned, ..."""
    remeasure: str | None = None
    """Ablation re-measurements: `best`, `baseline`, `candidate` or `runoff` (tuner.stats)."""
    gpu_seconds: float | None = None
    reserved_gpu_seconds: float | None = None
    startup_gpu_seconds: float | None = None
    """GPU-seconds before the first step (launch, model build, communicators): world size x
    the objective's `startup_seconds`; None when the trial did not report it."""
    message: str = ""
    datetime_complete: str | None = None
    predicted_tokens_per_sec_per_gpu: float | None = None
    """What the model-guided sampler's calibrated model expected (tuner.search), or None."""


@dataclass(frozen=True, kw_only=True)
class StudyRecord:
    name: str
    trials: tuple[TrialRecord, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    """The study's user attrs (spec, budget limit, launcher, simulated)."""

    @property
    def simulated(self) -> bool:
        return bool(self.attrs.get("simulated", False))

    @property
    def limit_gpu_seconds(self) -> float:
        return float(self.attrs.get("budget_limit_gpu_seconds", 0.0))


_TRUSTED_FAIL_STATUSES = ("skipped", "pruned", "stopped_by_budget", "repeat")


def trial_status(t: optuna.trial.FrozenTrial) -> str:
    """A trial's status for statistics and summaries (see TrialRecord.status).

    A FAIL trial's own `status` attr is trusted only for `skipped`, `stopped_by_budget` and
    `repeat`: a coordinator killed while recording a finished trial can leave `status = ok` on
    a trial that then went stale.
    """
    if t.state == TrialState.COMPLETE:
        return t.user_attrs.get("status", "ok")
    if t.state in (TrialState.FAIL, TrialState.PRUNED) and t.user_attrs.get("status") in _TRUSTED_FAIL_STATUSES:
        return t.user_attrs["status"]
    return {"FAIL": "fail", "RUNNING": "running", "WAITING": "waiting"}.get(t.state.name, t.state.name.lower())


def _step_seconds(attrs: dict[str, Any], n_steps: int) -> tuple[float, ...]:
    secs = attrs.get("step_seconds")
    if not isinstance(secs, list) or len(secs) != n_steps:
        return ()
    return tuple(float(s) for s in secs)


def study_record(study: optuna.Study, trials: Sequence[optuna.trial.FrozenTrial] | None = None) -> StudyRecord:
    """The study as plain data: its trials (:func:`trial_records`) and user attrs. ``trials``:
    the study's trials where the caller has read them already (one read of a large study)."""
    frozen = study.get_trials(deepcopy=False) if trials is None else trials
    return StudyRecord(name=study.study_name, trials=trial_records(frozen), attrs=dict(study.user_attrs))


def trial_records(frozen: Sequence[optuna.trial.FrozenTrial]) -> tuple[TrialRecord, ...]:
    """Optuna's trials as plain records (what the statistics read)."""
    trials = []
    for t in frozen:
        a = t.user_attrs
        trials.append(TrialRecord(
            number=t.number, state=t.state.name, status=trial_status(t), params=dict(t.params),
            steps=tuple(t.intermediate_values[k] for k in sorted(t.intermediate_values)),
            value=t.value, role=a.get("role"), step_seconds=_step_seconds(a, len(t.intermediate_values)),
            ablation_knob=a.get("ablation_knob"), ablation_of=a.get("ablation_of"),
            ablation_round=a.get("ablation_round", 1 if a.get("role") == "ablation" else None),
            remeasure=a.get("remeasure"),
            gpu_seconds=a.get("gpu_seconds"), reserved_gpu_seconds=a.get("reserved_gpu_seconds"),
            startup_gpu_seconds=(a["startup_seconds"] * a["world_size"]
                                 if a.get("startup_seconds") is not None and a.get("world_size") else None),
            message=a.get("message", ""), predicted_tokens_per_sec_per_gpu=a.get("predicted_tokens_per_sec_per_gpu"),
            datetime_complete=t.datetime_complete.isoformat() if t.datetime_complete else None))
    return tuple(trials)
