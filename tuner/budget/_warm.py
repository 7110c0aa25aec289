"""Warm trials, pure: what a trial will cost when a resident worker is (or is not) up, how
much of the GPU time start-up took, and an order of configs that lets one worker run them.

Plain data in, numbers out; the coordinator feeds ``estimate_from_trials`` the study's
trials, the bench and the tests call the rest.

A trial run by a resident worker records ``warm`` (bool) and, for the worker's first trial,
``worker_startup_gpu_seconds`` (world size x its start-up seconds, charged to that trial:
tuner.launch). Its *net* cost is what it cost beyond that start-up.

Example:
    >>> costs = [Cost(gpu_seconds=50.0, worker_startup_gpu_seconds=30.0, warm=False),
    ...          Cost(gpu_seconds=12.0, warm=True), Cost(gpu_seconds=10.0, warm=True)]
    >>> estimate_cost(costs, first_estimate_gpu_seconds=40.0, warm=True)
    12.0
    >>> estimate_cost(costs, first_estimate_gpu_seconds=40.0, warm=False)
    42.0
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner import knobs

__all__ = ["Cost", "estimate_cost", "costs_from_trials", "estimate_from_trials", "cap_basis", "reuse_order", "RECENT",
           "setup_seconds", "DATA_LOADER_S", "Worker", "worker_after", "switch_level", "setup_seconds_by_level"]

RECENT = 10
"""Estimates use the last this many finished trials (as tuner.budget.estimate_trial_cost)."""
DATA_LOADER_S = 2.0
"""Seconds a warm trial spends on its new DataLoader (built for every config: its seed sets
the batch order) and freeing the previous config's memory. objectives/resident.py measured
0.5-1.1 s (`setup_seconds`) on the 2-core CPU VM for the quickstart; 2 s allows for a
tokenizer-heavy loader on a GPU node (an assumption, not a measurement)."""


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What one finished trial cost."""

    gpu_seconds: float
    worker_startup_gpu_seconds: float | None = None
    """Its worker's start-up, when this trial was the worker's first."""
    warm: bool | None = None
    """True: ran in a worker already up; False: started one; None: a cold launch (no worker)."""
    ok: bool = True
    """Finished with status ok (a failure is cheap and says little about the next config)."""

    @property
    def net_gpu_seconds(self) -> float:
        return max(0.0, self.gpu_seconds - (self.worker_startup_gpu_seconds or 0.0))


def estimate_cost(costs: Sequence[Cost], *, first_estimate_gpu_seconds: float, warm: bool) -> float:
    """Expected GPU-seconds of the next trial: warm (a worker is up) or not.

    Before any trial finished, the first estimate. With no resident trial among the recent
    ones, the median cost (tuner.budget's rule). Otherwise the median net cost, plus, when the
    next trial starts a worker, the median start-up of the recent workers. Net costs are
    those of the recent ok trials (when any): failures end early, and a cheap failure in the
    median would shrink the next trial's cap (3x the estimate) below an ok trial's cost.
    """
    recent = list(costs)[-RECENT:]
    if not recent:
        return first_estimate_gpu_seconds
    if all(c.warm is None for c in recent):
        return float(statistics.median(c.gpu_seconds for c in recent))
    measured = [c for c in recent if c.ok] or recent
    net = float(statistics.median(c.net_gpu_seconds for c in measured))
    if warm:
        return net
    startups = [c.worker_startup_gpu_seconds for c in recent if c.worker_startup_gpu_seconds is not None]
    if not startups:
        return max(net, first_estimate_gpu_seconds)
    return net + float(statistics.median(startups))


def costs_from_trials(trials: Iterable[Any]) -> list[Cost]:
    """The finished trials' costs in trial order (Optuna FrozenTrials or anything with
    number, state.name and user_attrs)."""
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        a: Mapping[str, Any] = t.user_attrs
        if t.state.name != "COMPLETE" or a.get("gpu_seconds") is None:
            continue
        startup = a.get("worker_startup_gpu_seconds")
        out.append(Cost(gpu_seconds=float(a["gpu_seconds"]), warm=a.get("warm"), ok=a.get("status") == "ok",
                        worker_startup_gpu_seconds=None if startup is None else float(startup)))
    return out


def estimate_from_trials(trials: Iterable[Any], *, first_estimate_gpu_seconds: float, warm: bool) -> float:
    """:func:`estimate_cost` over a study's trials."""
    return estimate_cost(costs_from_trials(trials), first_estimate_gpu_seconds=first_estimate_gpu_seconds,
                         warm=warm)


def cap_basis(trials: Iterable[Any], *, first_estimate_gpu_seconds: float) -> float:
    """GPU-seconds of the costliest trial of the study that ran ok, or the first estimate
    before one did: the trial cap's floor (tuner.budget.trial_cap). Failures and timeouts
    never count: a timeout costs its cap, and the cap would feed on itself; an early failure
    (a baseline out of memory) says nothing of what a full trial costs.

    Example:
        >>> class T:
        ...     def __init__(self, n, status, gpu_s):
        ...         self.number, self.user_attrs = n, {"status": status, "gpu_seconds": gpu_s}
        ...         self.state = type("S", (), {"name": "COMPLETE"})()
        >>> cap_basis([T(0, "ok", 900.0), T(1, "ok", 60.0), T(2, "timeout", 5000.0)], first_estimate_gpu_seconds=2400.0)
        900.0
        >>> cap_basis([T(0, "oom", 590.0)], first_estimate_gpu_seconds=2400.0)
        2400.0
    """
    ok = [c.gpu_seconds for c in costs_from_trials(trials) if c.ok]
    return max(ok) if ok else first_estimate_gpu_seconds


def reuse_order(current: Mapping[str, Any] | None, candidates: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``candidates`` in an order one worker runs them with the least rebuilding:
    greedily the config whose change from the previous one is lightest
    (tuner.knobs.reconfiguration), ties in the given order.

    Example:
        >>> reuse_order({"activation_checkpointing": False},
        ...             [{"activation_checkpointing": True}, {"micro_batch": 4}, {"micro_batch": 2}])
        [1, 2, 0]
    """
    left, order, prev = list(range(len(candidates))), [], current
    while left:
        weights = {i: 0 if prev is None else knobs.RECONFIGURE.index(knobs.reconfiguration(prev, candidates[i]))
                   for i in left}
        best = min(left, key=lambda i: (weights[i], i))
        order.append(best)
        left.remove(best)
        prev = candidates[best]
    return order


def setup_seconds(level: str, startup_parts: Mapping[str, float]) -> float:
    """Seconds before a trial's warm-up in a resident worker, for a reconfiguration ``level``
    (tuner.knobs.RECONFIGURE), from the parts of a cold start-up
    (helper.throughput.estimate_startup_seconds' details: fixed_s, rendezvous_s,
    model_init_s, load_weights_s).

    ``none`` and ``data_loader`` pay :data:`DATA_LOADER_S`; ``model`` adds the model build from
    meta-device init (random weights: no checkpoint read); ``communicators`` adds the
    communicator set-up (the rendezvous part: NCCL's bootstrap); ``process`` is a cold start.

    Example:
        >>> parts = {"fixed_s": 60.0, "rendezvous_s": 2.3, "model_init_s": 21.0, "load_weights_s": 0.0}
        >>> [setup_seconds(lv, parts) for lv in ("none", "model", "communicators", "process")]
        [2.0, 23.0, 25.3, 83.3]
    """
    if level == "process":
        return float(sum(startup_parts.values()))
    total = DATA_LOADER_S
    if knobs.RECONFIGURE.index(level) >= knobs.RECONFIGURE.index("model"):
        total += startup_parts.get("model_init_s", 0.0)
    if level == "communicators":
        total += startup_parts.get("rendezvous_s", 0.0)
    return float(total)


@dataclass(frozen=True, kw_only=True)
class Worker:
    """A coordinator's resident worker between trials, as its sampler sees it."""

    params: Mapping[str, Any]
    """The knob values of the last config it ran."""
    failed: bool = False
    """That config failed (OOM, a refused collective): the worker recovered in place, and its
    next config gets a new model and new communicators (objectives/resident.py, the sim)."""
    build_seconds: float = 0.0
    """Set-up seconds the worker's current model cost (a fresh worker's start-up, or a model or
    communicator rebuild)."""
    model_seconds: float = 0.0
    """Seconds of the trials run on that model so far, its set-up included."""

    def keeps_model(self, max_build_share: float) -> bool:
        """Whether the worker should keep its model: its build is still more than
        ``max_build_share`` of the time run on it (rent-or-buy: a rebuild is paid back by
        the configs that use it).

        Example:
            >>> Worker(params={}, build_seconds=20.0, model_seconds=50.0).keeps_model(0.25)
            True
        """
        return self.build_seconds > max_build_share * self.model_seconds


def worker_after(previous: Worker | None, params: Mapping[str, Any], attrs: Mapping[str, Any]) -> Worker | None:
    """The worker after a trial this coordinator finished (its params and user attrs); None
    when no worker is up (the next trial starts one).

    A trial that never ran (0 GPU-s, no ``warm`` attr: an admission cut short) leaves the
    worker as it was; a cold launch, or one that ended its worker (a timeout, the budget's end,
    an interrupt), leaves none.

    Example:
        >>> worker_after(None, {"micro_batch": 2}, {"warm": False, "status": "ok", "gpu_seconds": 90.0,
        ...                                         "startup_seconds": 60.0})
        Worker(params={'micro_batch': 2}, failed=False, build_seconds=60.0, model_seconds=90.0)
        >>> worker_after(None, {"micro_batch": 2}, {"status": "ok", "gpu_seconds": 90.0}) is None
        True
    """
    if "warm" not in attrs:
        return previous if not attrs.get("gpu_seconds") else None
    status = attrs.get("status")
    if status not in ("ok", "oom", "error"):
        return None
    seconds = float(attrs.get("gpu_seconds") or 0.0) / max(1, int(attrs.get("world_size") or 1))
    level = switch_level(previous if attrs["warm"] else None, params)
    if knobs.RECONFIGURE.index(level) >= knobs.RECONFIGURE.index("model") or previous is None:
        build, spent = float(attrs.get("startup_seconds") or 0.0), seconds
    else:
        build, spent = previous.build_seconds, previous.model_seconds + seconds
    return Worker(params=dict(params), failed=status != "ok", build_seconds=build, model_seconds=spent)


def switch_level(worker: Worker | None, params: Mapping[str, Any]) -> str:
    """What running ``params`` next needs of ``worker`` (tuner.knobs.RECONFIGURE): ``process``
    when none is up; after a failed config at least new ``communicators``.

    Example:
        >>> w = Worker(params={"micro_batch": 2, "activation_checkpointing": False})
        >>> switch_level(w, {"micro_batch": 4, "activation_checkpointing": False})
        'none'
        >>> switch_level(w, {"micro_batch": 2, "activation_checkpointing": True})
        'model'
        >>> switch_level(Worker(params=w.params, failed=True), w.params), switch_level(None, w.params)
        ('communicators', 'process')
    """
    if worker is None:
        return "process"
    level = knobs.reconfiguration(worker.params, params)
    if worker.failed:
        level = max(level, "communicators", key=knobs.RECONFIGURE.index)
    return level


def setup_seconds_by_level(startup_parts: Mapping[str, float], trials: Iterable[Any] = ()) -> dict[str, float]:
    """Set-up seconds of a trial for each reconfiguration level: the median this study
    measured where its trials record it, else :func:`setup_seconds` from ``startup_parts``.

    Measured: a warm trial's ``startup_seconds`` at its ``reconfigured`` level (the sim
    launcher records both), and a worker's start-up (``worker_startup_gpu_seconds`` /
    ``world_size``) for ``process``. Trials: Optuna FrozenTrials or anything with user_attrs.

    Example:
        >>> parts = {"fixed_s": 60.0, "rendezvous_s": 2.3, "model_init_s": 21.0, "load_weights_s": 0.0}
        >>> class T:
        ...     user_attrs = {"warm": True, "reconfigured": "model", "startup_seconds": 30.0}
        >>> setup_seconds_by_level(parts, [T()])["model"], setup_seconds_by_level(parts)["model"]
        (30.0, 23.0)
    """
    seen: dict[str, list[float]] = {}
    for t in trials:
        a = t.user_attrs
        if a.get("warm") is True and a.get("reconfigured") in knobs.RECONFIGURE and a.get("startup_seconds"):
            seen.setdefault(a["reconfigured"], []).append(float(a["startup_seconds"]))
        elif a.get("warm") is False and a.get("worker_startup_gpu_seconds") and a.get("world_size"):
            seen.setdefault("process", []).append(float(a["worker_startup_gpu_seconds"]) / float(a["world_size"]))
    return {level: float(statistics.median(seen[level])) if level in seen else setup_seconds(level, startup_parts)
            for level in knobs.RECONFIGURE}
