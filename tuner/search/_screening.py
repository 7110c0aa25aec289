"""Screening before launch: configs the model knows cannot run cost nothing.

Two rules, each with the evidence that can overrule it (a wrong prune must be recoverable):

- **NCCL**: a forced ``NCCL_ALGO``/``NCCL_PROTO`` that a collective FSDP needs lacks
  (helper.collectives.choose_collective raises UnsupportedCollective). Rules that hold on
  every NCCL version (NVLS off an NVSwitch GPU, NVLS/PAT with LL or LL128, PAT with several
  GPUs per node, LL128 off Ampere/Hopper) prune at once. Rules that depend on the version
  (Tree for all-gather/reduce-scatter fails on recent NCCL but older ones fall back to Ring;
  NVLS for an fp32 reduce-scatter, nccl#1670) are checked once per cluster by the launcher's
  ``preflight_nccl`` (a collective test of seconds, stored in the study's user attrs) and
  only pruned when it fails. A launched trial with the same setting that ran ok overrules any
  NCCL prune.
- **Memory**: ``helper.estimate_memory`` x a margin learned from this study. ``ratio_low``
  is 0.95 x the smallest measured/predicted peak among ok trials (1 / 1.10 before any); a
  config is pruned when predicted x ratio_low exceeds the GPU's memory, or when a trial that
  ran out of memory had no more micro-batch, no less checkpointing, the same accumulation
  regime and no larger a prediction. An ok trial predicted over capacity lowers ratio_low,
  so every config it vouches for is tried again.

Deliberate runs are never screened (:func:`is_deliberate`): the team's baseline (a config it
runs today, whatever the model says), ablation and re-measurement runs, and retries.

A pruned trial is FAIL with user attrs ``status = pruned``, ``gpu_seconds = 0`` and
``message`` (the reason), written by the coordinator like a `skipped` one: analysis, the
report, the budget's cost estimates and the dashboard see a config that never ran. Optuna's
samplers ignore FAIL trials, so TPE and GP would propose the same screened region again and
again; tuner.search shows them each pruned trial as the failure it stands for
(:func:`as_sampler_sees_it`: COMPLETE, value 0, the violated constraint ``failed`` a launched
failure carries), and they learn to avoid it as they do a launched failure.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import model
from tuner.spec import StudySpec

__all__ = ["Verdict", "screen", "is_deliberate", "memory_ratio_low", "predicted_memory_gb", "nccl_problem",
           "as_sampler_sees_it", "PRIOR_MEMORY_MARGIN"]

PRIOR_MEMORY_MARGIN = 1.10
"""Before any peak is measured, prune only at 10% over capacity: helper's memory model is
within a few % of measured peaks on its validation set (docs/validation.md) but the
caching allocator's fragmentation varies (PyTorch users see 5-15%)."""
_GB_PER_GIB = 2**30 / 1e9
_PREFLIGHT_ATTR = "nccl_preflight"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Why a config is not launched."""

    rule: str
    """`nccl` or `memory`."""
    reason: str
    """One line for the trial's `message`."""


def _row_len(params: dict[str, Any], spec: StudySpec) -> int:
    """The computed row length of a config's padding mode (tuner.model)."""
    return model.spec_model_inputs(params, spec).seq_len


def predicted_memory_gb(spec: StudySpec, params: dict[str, Any]) -> float | None:
    """helper's peak memory per GPU for a complete config, its layout included (None: no preset)."""
    if not spec.model.preset:
        return None
    # HSDP / TP: the same layout model the sim and the planner use (helper.layouts)
    return model.predicted_memory_gb(model.spec_model_inputs(params, spec))


def nccl_problem(spec: StudySpec, nccl_algo: str, nccl_proto: str) -> tuple[str, bool] | None:
    """(NCCL's error, whether the rule holds on every NCCL version) or None when it runs."""
    c = spec.cluster
    return model.nccl_problem(gpu=c.gpu, world_size=c.world_size, gpus_per_node=c.gpus_per_node, backend=c.backend,
                              nccl_algo=nccl_algo, nccl_proto=nccl_proto)


def memory_ratio_low(trials: list[optuna.trial.FrozenTrial], spec: StudySpec) -> float:
    """The lowest plausible measured/predicted peak ratio (see the module doc)."""
    ratios = []
    for t in trials:
        if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok" and t.user_attrs.get("peak_mem_gib"):
            pred = predicted_memory_gb(spec, _complete(t.params, spec))
            if pred:
                ratios.append(t.user_attrs["peak_mem_gib"] * _GB_PER_GIB / pred)
    return 0.95 * min(ratios) if ratios else 1 / PRIOR_MEMORY_MARGIN


def _complete(params: dict[str, Any], spec: StudySpec) -> dict[str, Any]:
    from tuner.spec import complete_params

    return complete_params(params, spec)


def _same_nccl(t: optuna.trial.FrozenTrial, params: dict[str, Any], spec: StudySpec) -> bool:
    full = _complete(t.params, spec)
    return full.get("nccl_algo") == params.get("nccl_algo") and full.get("nccl_proto") == params.get("nccl_proto")


@functools.cache
def _failed_system_attrs() -> dict[str, Any]:
    """The system attrs Optuna stores for the constraint ``failed = 1`` (tuner.study.outcome's)."""
    return dict(optuna.trial.create_trial(value=0.0, constraints={"failed": 1.0}).system_attrs)


def as_sampler_sees_it(t: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    """A trial as Optuna's samplers should read it: a pruned (screened) one as the failure it
    stands for, COMPLETE with value 0 and the constraint ``failed`` violated; a skipped run or an
    exact repeat (stored PRUNED: it never ran) as FAIL, which samplers ignore; any other trial
    as it is. The stored trial is not changed (a copy).

    Example:
        >>> t = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"status": "pruned"})
        >>> seen = as_sampler_sees_it(t)
        >>> seen.state.name, seen.value, seen.constraints, t.state.name
        ('COMPLETE', 0.0, {'failed': 1.0}, 'FAIL')
    """
    status = t.user_attrs.get("status")
    if t.state == TrialState.PRUNED and status in ("skipped", "repeat"):
        seen = copy.copy(t)   # never ran, says nothing of its config: ignored, as a FAIL is
        seen.state = TrialState.FAIL
        return seen
    if t.state not in (TrialState.FAIL, TrialState.PRUNED) or status != "pruned":
        return t
    seen = copy.copy(t)
    seen.state, seen.values = TrialState.COMPLETE, [0.0]
    seen.system_attrs = {**t.system_attrs, **_failed_system_attrs()}
    return seen


def is_deliberate(user_attrs: dict[str, Any]) -> bool:
    """Whether a trial was queued on purpose (baseline, ablation, re-measurement, retry):
    it runs as asked, so a model that calls the team's running config out of memory is
    corrected by a measurement instead of silencing it.

    Example:
        >>> is_deliberate({"role": "baseline"}), is_deliberate({})
        (True, False)
    """
    return "role" in user_attrs or "retry_of" in user_attrs


def screen(study: optuna.Study, spec: StudySpec, params: dict[str, Any], *, launcher: Any = None) -> Verdict | None:
    """The reason not to launch a complete config, or None to launch it.

    ``launcher``: its ``preflight_nccl(spec, nccl_algo, nccl_proto) -> error | None`` (when it
    has one) settles version-dependent NCCL rules once per study; the answer is stored in the
    study's user attr ``nccl_preflight``.
    """
    trials = study.get_trials(deepcopy=False)
    algo, proto = str(params.get("nccl_algo", "default")), str(params.get("nccl_proto", "default"))
    problem = nccl_problem(spec, algo, proto)
    if problem is not None and not any(
            t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok" and _same_nccl(t, params, spec)
            for t in trials):
        message, certain = problem
        if certain:
            return Verdict(rule="nccl", reason=f"NCCL cannot run this ({message})")
        checks = dict(study.user_attrs.get(_PREFLIGHT_ATTR) or {})
        key = f"{algo}|{proto}"
        if key not in checks and launcher is not None and hasattr(launcher, "preflight_nccl"):
            checks[key] = launcher.preflight_nccl(spec, algo, proto) or "ok"
            study.set_user_attr(_PREFLIGHT_ATTR, checks)
        if checks.get(key, "ok") != "ok":
            return Verdict(rule="nccl", reason=f"this cluster's NCCL preflight failed ({checks[key]})")
        failed = next((t.number for t in trials if t.state == TrialState.COMPLETE
                       and t.user_attrs.get("status") == "error" and _same_nccl(t, params, spec)), None)
        if failed is not None:
            return Verdict(rule="nccl", reason=f"trial {failed} failed with this NCCL setting ({message})")

    pred = predicted_memory_gb(spec, params)
    if pred is None:
        return None
    capacity = model.gpu_memory_gb(spec.cluster.gpu)
    low = memory_ratio_low(trials, spec)
    if pred * low > capacity:
        return Verdict(rule="memory", reason=(f"predicted {pred * 1e9 / 2**30:.1f} GiB (stack {spec.model.stack}) x "
                                              f"margin {low:.2f} learned from this study exceeds the GPU's "
                                              f"{capacity * 1e9 / 2**30:.1f} GiB"))
    mb, ckpt, accum = int(params["micro_batch"]), bool(params["activation_checkpointing"]), int(params["grad_accum"]) > 1
    for t in trials:
        if t.state != TrialState.COMPLETE or t.user_attrs.get("status") != "oom":
            continue
        o = _complete(t.params, spec)
        o_pred = predicted_memory_gb(spec, o)
        if (o_pred is not None and pred >= o_pred and mb >= int(o["micro_batch"])
                and (not ckpt or bool(o["activation_checkpointing"])) and accum == (int(o["grad_accum"]) > 1)
                and _row_len(params, spec) >= _row_len(o, spec)):
            return Verdict(rule="memory", reason=(f"trial {t.number} ran out of memory with no more "
                                                  f"memory predicted ({o_pred * 1e9 / 2**30:.1f} GiB <= "
                                                  f"{pred * 1e9 / 2**30:.1f} GiB)"))
    return None
