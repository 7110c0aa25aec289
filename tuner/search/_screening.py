"""Screening before launch: configs the model knows cannot run cost nothing.

Two rules, each with the evidence that can overrule it (a wrong prune must be recoverable):

- **NCCL**: a forced ``NCCL_ALGO``/``NCCL_PROTO`` that a collective FSDP needs lacks
  (helper.collectives.choose_collective raises UnsupportedCollective). Every such setting is
  checked once per cluster by the launcher's ``preflight_nccl`` where it has one (a
  collective test of seconds, stored in the study's user attrs) and pruned only when it
  fails: rules said to hold on every NCCL version (NVLS off an NVSwitch GPU, NVLS/PAT with LL
  or LL128, PAT with several GPUs per node, LL128 off Ampere/Hopper) as much as the
  version-dependent ones (Tree for all-gather/reduce-scatter fails on recent NCCL but older
  ones fall back to Ring; NVLS for an fp32 reduce-scatter, nccl#1670): a rule is helper's
  belief about the cluster, and the cluster answers. Without a preflight, the every-version
  rules prune at once (the model-guided sampler tries each such setting once: tuner.search)
  and the others launch. A setting this cluster's NCCL refused in :data:`NCCL_REFUSALS`
  trials (errors naming NCCL), whatever helper's rules say of it, is pruned in every config
  for every sampler. A launched trial with the same setting that ran ok overrules any NCCL
  prune.
- **Memory**: ``helper.estimate_memory`` x a margin learned from this study. ``ratio_low``
  is 0.95 x the smallest measured/predicted peak among ok trials (1 / 1.10 before any); a
  config is pruned when predicted x ratio_low exceeds the GPU's memory, or when a trial that
  ran out of memory had no more micro-batch, no less checkpointing, the same accumulation
  regime and no larger a prediction. An ok trial predicted over capacity lowers ratio_low,
  so every config it vouches for is tried again.

**Probes: screening tests its own boundary.** A memory prune is a belief, and a belief nobody
tests is never contradicted (issue 28: helper's unsharded fp32 accumulation buffer wrote off
every ``grad_accum > 1`` config at micro-batch 4 on a cluster where they fit at ~60 GB). So
before a memory region is written off, its cheapest config just over the line runs once
(:func:`memory_probe`). A region is the model's memory structure: the accumulation regime
(``grad_accum > 1``: its buffer), activation checkpointing, and the layout (``sharding``,
``tp_degree``) where searched; the probe is the region's config of lowest prediction over
the line, with the other knobs of the best config run so far (they do not change memory).
When a proposal is pruned for memory, the probe of its region is queued (user attr
``probe = memory``, a deliberate run: it is not screened); a proposal that is the probe itself
runs. An OOM costs a start-up and a step. A probe that runs ok contradicts the model: its
measured peak lowers ratio_low, which moves the line for every later config of the study, and
the next probe tests the new line; a probe that runs out of memory closes its region (the OOM
rule then prunes what needs no less memory). The study's user attr ``boundary_probes`` lists
every probe (region, params, prediction); :func:`screening_summary` counts configs screened,
probes run and probes that contradicted the model.

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
import itertools
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import knobs, model
from tuner.spec import StudySpec

__all__ = ["Verdict", "screen", "is_deliberate", "memory_ratio_low", "predicted_memory_gb", "nccl_problem",
           "as_sampler_sees_it", "PRIOR_MEMORY_MARGIN", "memory_region", "memory_probe", "screening_summary",
           "PROBES_ATTR", "MEMORY_KNOBS"]

PRIOR_MEMORY_MARGIN = 1.10
"""Before any peak is measured, prune only at 10% over capacity: helper's memory model is
within a few % of measured peaks on its validation set (docs/validation.md) but the
caching allocator's fragmentation varies (PyTorch users see 5-15%)."""
_GB_PER_GIB = 1 / model.gib(1.0)
NCCL_REFUSALS = 2
"""Trials that NCCL refused (an error naming NCCL) after which an (algorithm, protocol) setting
that never ran is screened out in every config, for every sampler (one may be transient)."""
_PREFLIGHT_ATTR = "nccl_preflight"


def refused_by_nccl(trial: Any) -> bool:
    """A trial that failed with an error naming NCCL: the cluster's verdict on its setting."""
    return trial.user_attrs.get("status") == "error" and "NCCL" in str(trial.user_attrs.get("message", ""))


PROBES_ATTR = "boundary_probes"
"""The study's user attr listing every memory probe: {"region", "params", "predicted_gb"}."""
MEMORY_KNOBS = ("micro_batch", "grad_accum", "activation_checkpointing", "padding", "sharding", "tp_degree")
"""The knobs helper's memory model reads (tuner.model.model_inputs); the others never move a
config across the memory line, so a probe takes them from the best config run so far."""
_REGION_KNOBS = ("sharding", "tp_degree")


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


_MEMO: list[tuple[StudySpec, dict[str, float | None]]] = []
"""The last few specs' predictions by trial params: every screen reads every ok trial's."""


def memory_ratio_low(trials: list[optuna.trial.FrozenTrial], spec: StudySpec) -> float:
    """The lowest plausible measured/predicted peak ratio (see the module doc)."""
    ratios = []
    memo = next((m for s, m in _MEMO if s is spec), None)
    if memo is None:
        _MEMO[:] = [(spec, memo := {}), *_MEMO[:3]]
    for t in trials:
        if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok" and t.user_attrs.get("peak_mem_gib"):
            if (key := repr(sorted(t.params.items()))) not in memo:
                memo[key] = predicted_memory_gb(spec, _complete(t.params, spec))
            pred = memo[key]
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
    return "role" in user_attrs or "retry_of" in user_attrs or "probe" in user_attrs


def screen(study: optuna.Study, spec: StudySpec, params: dict[str, Any], *, launcher: Any = None,
           trials: list[optuna.trial.FrozenTrial] | None = None) -> Verdict | None:
    """The reason not to launch a complete config, or None to launch it.

    ``launcher``: its ``preflight_nccl(spec, nccl_algo, nccl_proto) -> error | None`` (when it
    has one) settles version-dependent NCCL rules once per study; the answer is stored in the
    study's user attr ``nccl_preflight``. A config over the memory line is the boundary's
    probe (it runs) or queues its region's probe (see the module doc). ``trials``: the study as
    the admission just read it (screening reads finished trials only), else read here.
    """
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    algo, proto = str(params.get("nccl_algo", "default")), str(params.get("nccl_proto", "default"))
    problem = nccl_problem(spec, algo, proto)
    ran = any(t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok" and _same_nccl(t, params, spec)
              for t in trials)
    refused = [] if ran else [t.number for t in trials if t.state == TrialState.COMPLETE and refused_by_nccl(t)
                              and _same_nccl(t, params, spec)]
    if len(refused) >= NCCL_REFUSALS:  # the cluster's own verdict, whatever helper's rules say
        return Verdict(rule="nccl", reason=f"this cluster's NCCL refused this setting in trials "
                                           f"{', '.join(map(str, refused[:4]))} and never ran it")
    if problem is not None and not ran:
        message, certain = problem
        checks = dict(study.user_attrs.get(_PREFLIGHT_ATTR) or {})
        key = f"{algo}|{proto}"
        if key not in checks and launcher is not None and hasattr(launcher, "preflight_nccl"):
            # the cluster settles it, helper's rule or not: a rule "every NCCL version" keeps
            # may still be wrong about this cluster's NCCL, and the preflight costs seconds
            checks[key] = launcher.preflight_nccl(spec, algo, proto) or "ok"
            study.set_user_attr(_PREFLIGHT_ATTR, checks)
        if checks.get(key, "ok") != "ok":
            return Verdict(rule="nccl", reason=f"this cluster's NCCL preflight failed ({checks[key]})")
        if certain and key not in checks:   # no preflight to ask: helper's rule stands
            return Verdict(rule="nccl", reason=f"NCCL cannot run this ({message})")
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
        reason = (f"predicted {model.gib(pred):.1f} GiB (stack {spec.model.stack}) x margin {low:.2f} learned "
                  f"from this study exceeds the GPU's {model.gib(capacity):.1f} GiB")
        probe = memory_probe(trials, spec, params, probes=study.user_attrs.get(PROBES_ATTR) or [], ratio_low=low)
        if probe is None:
            return Verdict(rule="memory", reason=reason)
        probe_params, probe_pred = probe
        # this proposal is its region's probe (or as cheap as it): it runs
        itself = _cell(_complete(probe_params, spec)) == _cell(params) or (
            pred <= probe_pred * (1 + 1e-9) and not any(_needs_no_less(params, pred, _complete(t.params, spec), spec)
                                                         for t in trials if t.state == TrialState.COMPLETE
                                                         and t.user_attrs.get("status") == "oom"))
        record = {"region": memory_region(params), "params": _space_params(params, spec) if itself else probe_params,
                  "predicted_gb": round(probe_pred, 2)}
        study.set_user_attr(PROBES_ATTR, [*(study.user_attrs.get(PROBES_ATTR) or []), record])
        if itself:
            return None
        study.enqueue_trial(probe_params, user_attrs={"probe": "memory", "probe_region": record["region"],
                                                      "predicted_memory_gb": record["predicted_gb"]},
                            skip_if_exists=False)
        return Verdict(rule="memory", reason=reason + f"; the boundary's probe ({record['region']}, "
                                                      f"{model.gib(probe_pred):.1f} GiB predicted) is queued")
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
                                                  f"memory predicted ({model.gib(o_pred):.1f} GiB <= "
                                                  f"{model.gib(pred):.1f} GiB)"))
    return None


# ------------------------------------------------------------------------------ probes
def memory_region(params: dict[str, Any]) -> str:
    """The part of the model's memory structure a config is in: accumulation regime,
    checkpointing, and the layout where given. A probe's verdict holds for its region.

    Example:
        >>> memory_region({"grad_accum": 4, "activation_checkpointing": False, "micro_batch": 4})
        'grad_accum>1,checkpointing=False'
    """
    parts = [f"grad_accum{'>1' if int(params.get('grad_accum', 1)) > 1 else '=1'}",
             f"checkpointing={bool(params.get('activation_checkpointing', False))}"]
    parts += [f"{k}={params[k]}" for k in _REGION_KNOBS if k in params]
    return ",".join(parts)


def _cell(params: dict[str, Any]) -> tuple:
    return tuple(str(params.get(k)) for k in MEMORY_KNOBS)


def _space_params(full: dict[str, Any], spec: StudySpec) -> dict[str, Any]:
    """A complete config's searched knobs, as a trial's params (prefetch_factor only with workers)."""
    out = {k.name: full[k.name] for k in spec.space if k.name in full}
    if "prefetch_factor" in out and not knobs.is_active("prefetch_factor", out):
        out.pop("prefetch_factor")
    return out


def _probe_trial(t: optuna.trial.FrozenTrial, probe: dict[str, Any]) -> bool:
    return bool(t.params) and t.params == probe["params"]  # both a trial's searched knobs, as suggested


def _probe_outcomes(trials: list[optuna.trial.FrozenTrial], probes: list[dict[str, Any]],
                    spec: StudySpec) -> list[str]:
    """Each probe's fate: the status of the first finished trial that ran its params (`ok`,
    `oom`, `error`, `timeout`), or `pending` (queued, running, or never run)."""
    out = []
    for p in probes:
        ran = next((t for t in trials if t.state == TrialState.COMPLETE and _probe_trial(t, p)), None)
        out.append("pending" if ran is None else str(ran.user_attrs.get("status", "ok")))
    return out


def memory_probe(trials: list[optuna.trial.FrozenTrial], spec: StudySpec, params: dict[str, Any], *,
                 probes: list[dict[str, Any]], ratio_low: float) -> tuple[dict[str, Any], float] | None:
    """(params, predicted GB) of the probe that tests the memory line in ``params``' region,
    or None when the region is not open to one: a probe of it is pending, or one ran out of
    memory (the line held), or no config of it lies over the line unexplained.

    The probe is the region's memory cell (micro-batch, accumulation, checkpointing, padding,
    layout) of lowest prediction over the line (prediction x ``ratio_low`` > capacity) that no
    OOM already rules out; its other knobs are those of the best config that ran ok (else of
    ``params``). ``params``: a complete config.
    """
    region = memory_region(params)
    mine = [p for p in probes if p.get("region") == region]
    if any(f in ("pending", "oom") for f in _probe_outcomes(trials, mine, spec)):
        return None
    capacity = model.gpu_memory_gb(spec.cluster.gpu)
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
          and t.value is not None]
    base = _complete(max(ok, key=lambda t: t.value).params, spec) if ok else dict(params)
    space = {k.name: tuple(k.values_for_grid()) for k in spec.space if k.name in MEMORY_KNOBS}
    ooms = [_complete(t.params, spec) for t in trials
            if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "oom"]
    best: tuple[tuple[float, int], float, dict[str, Any]] | None = None
    cache = _cell_memory(spec)
    for combo in itertools.product(*space.values()):
        cand = {**base, **dict(zip(space, combo))}
        if memory_region(cand) != region:
            continue
        if (key := _cell(cand)) not in cache:
            cache[key] = predicted_memory_gb(spec, cand)
        pred = cache[key]
        if pred is None or pred * ratio_low <= capacity:
            continue
        # the lowest prediction; among equals, the fewest memory knobs moved from the best run
        rank = (round(pred, 6), sum(cand[k] != base.get(k) for k in space))
        if best is not None and rank >= best[0]:
            continue
        if any(_needs_no_less(cand, pred, o, spec) for o in ooms):
            continue
        best = (rank, pred, cand)
    if best is None:
        return None
    return _space_params(best[2], spec), best[1]


_CELL_MEMORY: dict[int, tuple[StudySpec, dict[tuple, float | None]]] = {}


def _cell_memory(spec: StudySpec) -> dict[tuple, float | None]:
    """A spec's predicted GB per memory cell (a spec is not hashable: kept by identity)."""
    got = _CELL_MEMORY.get(id(spec))
    if got is None or got[0] is not spec:
        if len(_CELL_MEMORY) > 16:
            _CELL_MEMORY.clear()
        got = _CELL_MEMORY[id(spec)] = (spec, {})
    return got[1]


def _needs_no_less(params: dict[str, Any], pred: float, oom: dict[str, Any], spec: StudySpec) -> bool:
    """Whether ``params`` needs no less memory than a config that ran out of it (the OOM rule)."""
    o_pred = predicted_memory_gb(spec, oom)
    return (o_pred is not None and pred >= o_pred and int(params["micro_batch"]) >= int(oom["micro_batch"])
            and (not bool(params["activation_checkpointing"]) or bool(oom["activation_checkpointing"]))
            and (int(params["grad_accum"]) > 1) == (int(oom["grad_accum"]) > 1)
            and _row_len(params, spec) >= _row_len(oom, spec))


def screening_summary(trials: list[optuna.trial.FrozenTrial], spec: StudySpec,
                      probes: list[dict[str, Any]]) -> dict[str, int]:
    """Per study: configs screened (pruned unrun, by rule), memory probes that ran, and probes
    that contradicted the model (ran ok where it predicted out of memory)."""
    fates = _probe_outcomes(trials, probes, spec)
    pruned = [t for t in trials if t.user_attrs.get("status") == "pruned"]
    nccl = sum("NCCL" in str(t.user_attrs.get("message", "")) for t in pruned)
    return {"screened": len(pruned), "screened_memory": len(pruned) - nccl, "screened_nccl": nccl,
            "probes": sum(f != "pending" for f in fates), "probes_pending": sum(f == "pending" for f in fates),
            "contradicted": sum(f == "ok" for f in fates)}
