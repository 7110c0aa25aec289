"""The trial config a workload accepts: TUNER_TRIAL_CONFIG parsed and validated.

The knob values are checked against tuner's knob catalogue and completed with its defaults;
the rest of the document (model, data, trial, cluster sections) is checked for what the
FSDP2 workload needs. docs/contracts.md describes the file. Standard library only, so a
training rank loads no control plane to read it.

Example:
    >>> cfg = parse_config({"params": {"micro_batch": 4, "nccl_algo": "Ring"},
    ...                     "model": {"preset": "tiny", "seq_len": 128}, "data": {},
    ...                     "trial": {"warmup_steps": 1, "measure_steps": 2}})
    >>> cfg.knobs.micro_batch, cfg.knobs.prefetch_factor, cfg.launch_params
    (4, None, {'nccl_algo': 'Ring'})
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner import knobs as catalogue
from tuner.errors import TrialConfigError
from tuner.protocol import DTYPES  # fp16 runs without a loss scaler: a few steps' numbers don't matter for speed

__all__ = ["Knobs", "TrialConfig", "TrialConfigError", "parse_config", "load_config", "LAUNCH_KNOB_PREFIX", "DTYPES",
           "ATTENTIONS", "STACKS"]

LAUNCH_KNOB_PREFIX = "nccl_"  # launch-level knobs: the launcher turns them into NCCL_* variables
ATTENTIONS = ("sdpa", "eager")
"""[model] attention: Hugging Face's ``attn_implementation`` (unset: its default, ``sdpa``)."""
STACKS = {"sdpa": "hf-sdpa", "eager": "hf-eager"}
"""The training stack this workload is, in helper.stacks' names, by attention: Hugging Face's
Llama (unfused RMSNorm, the loss's fp32 upcast), per-block ``checkpoint_wrapper`` (full),
FSDP2 with reduce_dtype fp32 (objectives/parallel.py) and ``set_requires_gradient_sync``
accumulation (objectives/fsdp_finetune.py). Its summary line records it (``stack``)."""


class Knobs(Mapping[str, Any]):
    """The workload knobs of one trial (tuner.knobs names), validated, defaults filled in.

    Read as attributes (``knobs.micro_batch``) or as a mapping; a conditional knob that is
    not active (``prefetch_factor`` with no workers) reads as None.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = {k: v for k, v in values.items() if k in catalogue.WORKLOAD_KNOBS}

    def __getattr__(self, name: str) -> Any:
        if name in catalogue.WORKLOAD_KNOBS:
            return self._values.get(name)
        raise AttributeError(f"no knob {name!r}; workload knobs: {', '.join(catalogue.WORKLOAD_KNOBS)}")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Knobs({self._values!r})"


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    """The parsed TUNER_TRIAL_CONFIG file (docs/contracts.md)."""

    knobs: Knobs
    """Workload knobs with defaults filled in."""
    launch_params: dict[str, Any]
    """Launch-level knobs (nccl_*), recorded only: the launcher already acted on them."""
    model: dict[str, Any]
    """The spec's [model] section: preset or path, seq_len, dtype, attention (sdpa | eager)."""
    data: dict[str, Any]
    """The spec's [data] section: source, tokenizer, vocab_size, num_examples, cache_dir..."""
    warmup_steps: int
    """Optimizer steps run before measuring (excluded)."""
    measure_steps: int
    """Optimizer steps measured (at most, with adaptive measurement)."""
    adaptive: bool = False
    """Stop measuring early once precise enough or clearly worse than the study's best
    (`tuner.measurement.stop_reason`, the rule the sim launcher uses too)."""
    min_steps: int = 4
    """Adaptive measurement never stops before this many measured steps."""
    target_rel_ci: float = 0.02
    """Stop once the 95% CI half-width is below this fraction of the mean."""
    stop_below: float | None = None
    """The best trial's CI lower bound (tokens/s/GPU): stop once this trial's upper bound is below."""
    backend: str = "gloo"
    """torch.distributed backend: `nccl` (GPU) or `gloo` (CPU)."""
    seed: int = 0
    """Seeds model init and data order."""
    study: str = ""
    """The study's name (names the trial's checkpoint folder)."""
    trial_number: int = 0
    """The trial's number (names its checkpoint folder)."""
    checkpoint_every: int = 0
    """[trial] checkpoint_every: save every this many optimizer steps (0: never)."""
    checkpoint_mode: str = "sync"
    """[trial] checkpoint_mode: `sync` or `async` (objectives/checkpoint.py)."""
    checkpoint_dir: str | None = None
    """[trial] checkpoint_dir: the trial saves under <dir>/<study>/trial-<number>/."""

    @property
    def seq_len(self) -> int:
        return int(self.model["seq_len"])


def parse_config(raw: Mapping[str, Any]) -> TrialConfig:
    """A TrialConfig from the config file's JSON object.

    Raises:
        TrialConfigError: an unknown workload knob or a bad value; the message names the key.

    Example:
        >>> cfg = parse_config({"params": {"micro_batch": 4, "nccl_algo": "Ring"},
        ...                     "model": {"preset": "tiny", "seq_len": 128}, "data": {},
        ...                     "trial": {"warmup_steps": 1, "measure_steps": 2}})
        >>> cfg.knobs.micro_batch, cfg.launch_params
        (4, {'nccl_algo': 'Ring'})
    """
    params = dict(raw.get("params") or {})
    unknown = sorted(k for k in params if k not in catalogue.KNOBS and not k.startswith(LAUNCH_KNOB_PREFIX))
    if unknown:
        raise TrialConfigError(f"unknown knob {unknown[0]!r} in params; objectives.fsdp_finetune knows "
                               f"{', '.join(catalogue.WORKLOAD_KNOBS)} (and launch-level nccl_* knobs)")
    for name, value in params.items():
        problem = catalogue.value_problem(name, value) if name in catalogue.KNOBS else None
        if problem:
            raise TrialConfigError(f"params.{name}: {problem}")
    model = dict(raw.get("model") or {})
    knobs = Knobs(catalogue.resolve(params, {"activation_checkpointing": bool(model.get("activation_checkpointing", False))}))
    if model.get("dtype", "auto") not in DTYPES:
        raise TrialConfigError(f"model.dtype {model.get('dtype')!r}: one of {', '.join(DTYPES)}")
    if model.get("attention") is not None and model["attention"] not in ATTENTIONS:
        raise TrialConfigError(f"model.attention {model['attention']!r}: one of {', '.join(ATTENTIONS)}")
    if not isinstance(model.get("seq_len"), int) or model["seq_len"] < 2:
        raise TrialConfigError(f"model.seq_len {model.get('seq_len')!r}: an integer >= 2")
    trial = raw.get("trial") or {}
    for key, low in (("warmup_steps", 0), ("measure_steps", 1)):
        if isinstance(trial.get(key), bool) or not isinstance(trial.get(key), int) or trial[key] < low:
            raise TrialConfigError(f"trial.{key} {trial.get(key)!r}: an integer >= {low}")
    every, mode, folder = trial.get("checkpoint_every", 0), trial.get("checkpoint_mode", "sync"), trial.get("checkpoint_dir")
    if isinstance(every, bool) or not isinstance(every, int) or every < 0 or (every and not folder):
        raise TrialConfigError(f"trial.checkpoint_every {every!r}: an integer >= 0, with a checkpoint_dir when > 0")
    if mode not in ("sync", "async"):
        raise TrialConfigError(f"trial.checkpoint_mode {mode!r}: sync or async")
    return TrialConfig(
        study=str(raw.get("study", "")), trial_number=int(raw.get("trial_number", 0)),
        checkpoint_every=every, checkpoint_mode=mode, checkpoint_dir=folder,
        knobs=knobs,
        launch_params={k: v for k, v in params.items() if k.startswith(LAUNCH_KNOB_PREFIX)},
        model=model, data=dict(raw.get("data") or {}),
        warmup_steps=trial["warmup_steps"], measure_steps=trial["measure_steps"],
        adaptive=bool(trial.get("adaptive", False)), min_steps=int(trial.get("min_steps", 4)),
        target_rel_ci=float(trial.get("target_rel_ci", 0.02)),
        stop_below=(float(raw["stop_below_tokens_per_sec_per_gpu"])
                    if raw.get("stop_below_tokens_per_sec_per_gpu") is not None else None),
        backend=str((raw.get("cluster") or {}).get("backend", "gloo")), seed=int(raw.get("seed", 0)))


def load_config(path: str | Path) -> TrialConfig:
    """Read and parse a TUNER_TRIAL_CONFIG file (see :func:`parse_config`)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TrialConfigError(f"trial config {path}: {exc}") from None
    return parse_config(raw)
