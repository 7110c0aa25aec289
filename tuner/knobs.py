"""The one catalogue of knobs. Standard library only: the trial workload imports it too.

A knob is an Optuna parameter name that changes how a trial runs. Everything that knows
about a knob reads it from :data:`KNOBS`: spec validation (``tuner.spec``), the search space
(``tuner.search``), the trial's environment (``tuner.launch``), the trial config and the
workload (``objectives.fsdp_finetune``), the sim launcher, distill and the report.

Each entry says:

- its name, type, allowed values and default;
- the environment variable it sets, for launch-level knobs (NCCL reads ``NCCL_ALGO`` and
  ``NCCL_PROTO`` when a communicator is created; docs.nvidia.com/deeplearning/nccl/
  user-guide/docs/env.html); the value ``default`` leaves the variable unset;
- when it is active (``prefetch_factor`` only with ``num_workers > 0``: PyTorch's
  DataLoader rejects it otherwise);
- what changing it needs inside a running trial (:data:`RECONFIGURE`);
- its one-line meaning, for reports and ``--help``.

A new knob is one entry here, plus the code that acts on it in the workload (and in the
sim's model, if the sim should respond to it).

Example:
    >>> is_active("prefetch_factor", {"num_workers": 0})
    False
    >>> resolve({"num_workers": 4})["prefetch_factor"]
    2
    >>> value_problem("micro_batch", 0)
    '0 is not an integer >= 1'
    >>> reconfiguration({"micro_batch": 1}, {"micro_batch": 4, "padding": "packed"})
    'data_loader'
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Knob", "KNOBS", "RECONFIGURE", "LAUNCH_KNOBS", "WORKLOAD_KNOBS", "get_knob",
           "value_problem", "is_active", "activity_rule", "ordered", "resolve", "environment",
           "reconfiguration", "fsdp_reshard_after_forward", "ENV_DEFAULT"]

RECONFIGURE = ("none", "data_loader", "model", "communicators", "process")
"""What a change of a knob needs in a running trial, lightest first: nothing (read at the
next step), a new DataLoader, a model rebuilt from meta-device init, new communicators
created after the environment changed, or a fresh process."""

ENV_DEFAULT = "default"
"""The value of a launch knob that leaves its environment variable unset (NCCL's default)."""

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One knob of the catalogue."""

    name: str
    """The Optuna parameter name (and the spec's [space] key)."""
    kind: str
    """`int`, `bool`, `choice` (one of ``choices``) or `str` (any non-empty string)."""
    default: Any
    """The value a trial runs with when the space does not search the knob."""
    meaning: str
    """One line for reports and help."""
    reconfigure: str
    """One of RECONFIGURE."""
    minimum: int | None = None
    """For `int` knobs: the smallest allowed value."""
    choices: tuple[Any, ...] = ()
    """For `choice` knobs: the allowed values."""
    env_var: str | None = None
    """Launch-level knobs: the environment variable the launcher sets (``default`` = unset)."""
    active_when: tuple[str, str, Any] | None = None
    """(parent knob, operator, value): the knob applies only when the parent's value
    satisfies it; otherwise it is absent from the trial's params."""

    @property
    def is_launch(self) -> bool:
        return self.env_var is not None


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob(name="nccl_algo", kind="str", default=ENV_DEFAULT, env_var="NCCL_ALGO", reconfigure="communicators",
         meaning="NCCL's collective algorithm (Ring, Tree, NVLS, ...); `default` leaves NCCL_ALGO unset"),
    Knob(name="nccl_proto", kind="str", default=ENV_DEFAULT, env_var="NCCL_PROTO", reconfigure="communicators",
         meaning="NCCL's protocol (Simple, LL, LL128); `default` leaves NCCL_PROTO unset"),
    Knob(name="micro_batch", kind="int", minimum=1, default=1, reconfigure="none",
         meaning="sequences per micro-batch per GPU"),
    Knob(name="grad_accum", kind="int", minimum=1, default=1, reconfigure="none",
         meaning="micro-batches per optimizer step; gradients are reduced on the last one only"),
    Knob(name="num_workers", kind="int", minimum=0, default=0, reconfigure="data_loader",
         meaning="DataLoader worker processes per GPU (they tokenize); 0 loads in the training process"),
    Knob(name="prefetch_factor", kind="int", minimum=1, default=2, reconfigure="data_loader",
         active_when=("num_workers", ">", 0),
         meaning="batches each DataLoader worker loads ahead (PyTorch's default is 2)"),
    Knob(name="padding", kind="choice", choices=("max_length", "longest", "packed"), default="max_length",
         reconfigure="data_loader",
         meaning="rows padded to seq_len, to the batch's longest example, or examples packed into full rows"),
    Knob(name="activation_checkpointing", kind="bool", default=False, reconfigure="model",
         meaning="recompute each block's activations in backward: less memory, about a third more compute"),
    Knob(name="sharding", kind="choice", choices=("full_shard", "shard_grad_op", "hybrid_shard"),
         default="full_shard", reconfigure="model",
         meaning="FSDP2 layout: full_shard frees gathered weights after forward; shard_grad_op keeps them "
                 "until backward (reshard_after_forward=False); hybrid_shard (HSDP) shards inside groups of "
                 "shard_group_size ranks and replicates across groups (objectives/parallel.py)"),
    Knob(name="shard_group_size", kind="int", minimum=0, default=0, reconfigure="model",
         active_when=("sharding", "==", "hybrid_shard"),
         meaning="HSDP: data-parallel ranks one shard group spans; 0 = the GPUs of a node not used by "
                 "tensor parallelism (gpus_per_node / tp_degree)"),
    Knob(name="tp_degree", kind="int", minimum=1, default=1, reconfigure="model",
         meaning="tensor parallelism of each Llama block over this many GPUs of a node "
                 "(torch.distributed.tensor.parallel); FSDP2 shards over the rest"),
    Knob(name="reshard_after_forward", kind="bool", default=True, reconfigure="model",
         active_when=("sharding", "!=", "shard_grad_op"),
         meaning="FSDP2: free each block's gathered weights after forward and gather them again for backward"),
)}

LAUNCH_KNOBS = tuple(n for n, k in KNOBS.items() if k.is_launch)
"""Knobs the launcher turns into environment variables."""
WORKLOAD_KNOBS = tuple(n for n, k in KNOBS.items() if not k.is_launch)
"""Knobs the workload reads from the trial config."""


def get_knob(name: str) -> Knob:
    """The catalogue entry of ``name``.

    Raises:
        KeyError: naming the known knobs.
    """
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"unknown knob {name!r}; known: {', '.join(KNOBS)}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def value_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a valid value of knob ``name``, or None when it is."""
    knob = get_knob(name)
    if knob.kind == "int" and not (_is_int(value) and value >= knob.minimum):
        return f"{value!r} is not an integer >= {knob.minimum}"
    if knob.kind == "bool" and not isinstance(value, bool):
        return f"{value!r} is not true/false"
    if knob.kind == "choice" and value not in knob.choices:
        return f"unknown {name} {value!r}; one of {', '.join(map(str, knob.choices))}"
    if knob.kind == "str" and not (isinstance(value, str) and value.strip()):
        what = "an NCCL value string (`default` leaves it unset)" if knob.is_launch else "a non-empty string"
        return f"{value!r} is not {what}"
    return None


def is_active(name: str, params: Mapping[str, Any]) -> bool:
    """Whether a knob applies given the other knobs' values (missing parents take their default)."""
    rule = get_knob(name).active_when
    if rule is None:
        return True
    parent, op, target = rule
    return _OPS[op](params.get(parent, KNOBS[parent].default), target)


def activity_rule(name: str) -> str:
    """The condition under which a knob applies, in words ("" for an unconditional knob).

    Example:
        >>> activity_rule("prefetch_factor")
        'num_workers > 0'
    """
    rule = get_knob(name).active_when
    return "" if rule is None else f"{rule[0]} {rule[1]} {rule[2]}"


def _depth(name: str) -> int:
    rule = KNOBS[name].active_when if name in KNOBS else None
    return 0 if rule is None else 1 + _depth(rule[0])


def ordered(names: Iterable[str]) -> list[str]:
    """``names`` with every conditional knob after its parent (stable otherwise)."""
    return list(_ordered(tuple(names)))


@functools.lru_cache(maxsize=256)
def _ordered(names: tuple[str, ...]) -> tuple[str, ...]:
    # resolve() orders the catalogue on every call: the sampler resolves thousands of configs
    return tuple(sorted(names, key=_depth))


def resolve(params: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every knob's value: ``params``, then ``defaults`` (e.g. the spec's [model] settings),
    then the catalogue's default; knobs that are not active are left out.

    Unknown names in ``params`` are kept as they are (a custom workload may read them).
    """
    out = dict(params)
    for name in ordered(KNOBS):
        if name not in out:
            out[name] = (defaults or {}).get(name, KNOBS[name].default)
    for name in ordered(KNOBS):
        if not is_active(name, out):
            out.pop(name, None)
    return out


def environment(params: Mapping[str, Any], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with each launch knob's variable set, or removed where its value is ``default``
    (even when the coordinator's own shell set it: the default really is NCCL's).

    Other values pass through verbatim, including NCCL >= 2.24's per-collective syntax
    (``allgather:ring;reducescatter:ring``).
    """
    env = dict(base)
    for name in LAUNCH_KNOBS:
        var = KNOBS[name].env_var
        value = params.get(name, ENV_DEFAULT)
        if value is None or str(value).lower() == ENV_DEFAULT:
            env.pop(var, None)
        else:
            env[var] = str(value)
    return env


def reconfiguration(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The heaviest RECONFIGURE level among the knobs whose values differ (after defaults)."""
    a, b = resolve(old), resolve(new)
    levels = [KNOBS[n].reconfigure for n in KNOBS if a.get(n) != b.get(n)]
    return max(levels, key=RECONFIGURE.index, default="none")


def fsdp_reshard_after_forward(values: Mapping[str, Any]) -> bool:
    """FSDP2's ``reshard_after_forward`` for resolved knob values: False for shard_grad_op.

    Example:
        >>> fsdp_reshard_after_forward(resolve({"sharding": "shard_grad_op"}))
        False
    """
    if values.get("sharding", KNOBS["sharding"].default) == "shard_grad_op":
        return False
    return bool(values.get("reshard_after_forward", KNOBS["reshard_after_forward"].default))
