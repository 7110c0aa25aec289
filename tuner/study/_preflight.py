"""Preflight: before any trial, check that the machine, data, tokenizer and model can serve one.

One mistake in a spec (an empty or broken data file, `[]`, a ``model.path`` without ``./``
that therefore goes to the Hugging Face hub) used to fail every trial the same way and burn
the whole budget. The coordinator now loads what the workload will load, with the
workload's own code (objectives.data, objectives.models; the coordinator may import the
objective, never the reverse), and stops in one line naming the key when it cannot.

It runs for the built-in workload (``trial.command`` = ``-m objectives.fsdp_finetune``) and a
launcher that runs real jobs; a custom command reads [data] and [model] its own way, and the
sim launcher loads nothing. Failures preflight cannot see are the circuit breaker's
(tuner.study).

Example:
    >>> spec = load_spec("studies/quickstart.toml")                # doctest: +SKIP
    >>> preflight(spec)                                          # doctest: +SKIP
    'preflight ok: data 2000 examples; tokenizer vocabulary 541; model tiny (2 layers)'
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from tuner.errors import PreflightError
from tuner.spec import StudySpec

__all__ = ["preflight", "needs_preflight", "check_runs_dir", "local_device_problem", "WORKLOAD_COMMAND"]

WORKLOAD_COMMAND = ("-m", "objectives.fsdp_finetune")
"""The built-in workload, whose loading code preflight runs."""


def needs_preflight(spec: StudySpec, *, simulated: bool) -> bool:
    """True when trials will run the built-in workload on real jobs."""
    return not simulated and tuple(spec.trial.command) == WORKLOAD_COMMAND


def _why(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def preflight(spec: StudySpec, *, launcher: str | None = None) -> str:
    """Load the examples and the tokenizer and read the model's config, as a trial would.

    ``launcher``: the name of the launcher that runs the trials (None: the spec's).

    Returns one line saying what was found. The `train` tokenizer is trained and cached here,
    so the trials reuse it.

    Raises:
        PreflightError: one line naming the key (data.source, data.tokenizer, model.path or
            model.preset) and why it cannot serve a trial.
    """
    from objectives.data import format_alpaca, load_examples, load_tokenizer
    from objectives.models import model_config

    problem = local_device_problem(spec, launcher=launcher)
    if problem:
        raise PreflightError(f"preflight: {problem}")
    data: dict[str, Any] = dataclasses.asdict(spec.data)
    model: dict[str, Any] = dataclasses.asdict(spec.model)
    source = data.get("source")
    try:
        examples = load_examples(data)
    except Exception as exc:  # noqa: BLE001 - whatever datasets raises, it is this file's fault
        network = isinstance(exc, (ConnectionError, TimeoutError)) or "connection" in type(exc).__name__.lower()
        why = ("the hub cannot be reached from this machine: give a local path (a JSON/JSONL file or a "
               "datasets folder), or set HF_HUB_OFFLINE=1 to read the local cache" if network
               else "it must be Alpaca-style records (instruction, input, output)")
        raise PreflightError(f"preflight: data.source {source}: cannot be loaded ({_why(exc)}); {why}") from None
    if not examples:
        raise PreflightError(f"preflight: data.source {source}: no examples (an empty file or `[]`)")
    try:
        tokenizer = load_tokenizer(data, examples)
        n_tokens = len(tokenizer.encode(format_alpaca(examples[0])))
    except Exception as exc:  # noqa: BLE001
        raise PreflightError(f"preflight: data.tokenizer {data.get('tokenizer')}: cannot be loaded "
                             f"({_why(exc)})") from None
    if n_tokens == 0:
        raise PreflightError(f"preflight: data.tokenizer {data.get('tokenizer')}: the first example "
                             "encodes to no tokens")
    key, value = ("model.path", model["path"]) if model.get("path") else ("model.preset", model.get("preset"))
    try:
        config = model_config(model, vocab_size=tokenizer.vocab_size)
    except OSError as exc:
        hint = (" (a local folder needs a path such as ./models/x or /abs/path; without one the name "
                "is looked up on the Hugging Face hub)" if key == "model.path" else "")
        raise PreflightError(f"preflight: {key} {value}: no model config ({_why(exc)}){hint}") from None
    except Exception as exc:  # noqa: BLE001
        raise PreflightError(f"preflight: {key} {value}: {_why(exc)}") from None
    layers = getattr(config, "num_hidden_layers", "?")
    return (f"preflight ok: data {len(examples)} examples; tokenizer vocabulary {tokenizer.vocab_size}; "
            f"model {value} ({layers} layers)")


def local_device_problem(spec: StudySpec, cuda_devices: int | None = None, *,
                         launcher: str | None = None) -> str | None:
    """Why this machine cannot run the spec's trials itself, or None: the local launcher runs
    them here, and backend nccl needs a CUDA GPU per process (each trial would otherwise fail
    alike, one after another). Another launcher runs them elsewhere: nothing to check here.
    ``cuda_devices``: this machine's count (None: ask torch); ``launcher``: the launcher that
    will run the trials, where the caller passes one other than the spec's."""
    c = spec.cluster
    if (launcher or c.launcher) != "local" or c.backend != "nccl":
        return None
    if cuda_devices is None:
        import torch

        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cuda_devices == 0:
        return ('cluster.backend "nccl": this machine has no CUDA GPU for the local launcher; '
                'use backend = "gloo" and gpu = "cpu" to run on its CPUs, or launcher = "slurm" '
                "to run the trials on GPU nodes")
    if cuda_devices < c.gpus_per_node:
        return (f"cluster.gpus_per_node {c.gpus_per_node}: this machine has {cuda_devices} CUDA "
                f"GPU{'s' if cuda_devices > 1 else ''} for the local launcher")
    return None


def check_runs_dir(folder: Path) -> Path:
    """Create the study's runs folder and prove it writable, before any trial is admitted:
    an unwritable ``--runs-dir`` used to leave a FAIL trial and a queued retry behind.

    Raises:
        PreflightError: naming the folder and the operating system's reason.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise PreflightError(f"--runs-dir: cannot write in {folder}: {exc.strerror or exc}") from None
    return folder
