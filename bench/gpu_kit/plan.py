"""What the GPU kit runs, as data: the configs of each check, their steps and time boxes.

Two plans share one shape. :func:`gpu_plan` is the real one: TinyLlama-1.1B's architecture
(helper's ``llama-1b`` preset, random weights, no download), FSDP2 on one GPU, bf16, seq 2048,
NCCL. :func:`dry_run_plan` runs the same code paths on CPU: the ``tiny`` preset, gloo, seq 64,
one or two steps, so the kit is exercised by the test suite.

Time boxes: the whole kit must finish in one device command of 10 minutes with room to spare,
so it is budgeted to 540 s of wall time. The sequential boxes add up to 530 s; the memory
predictions run on the host CPU alongside the GPU checks. The boxes are sized from the first
H100 run (2026-11-27, docs/validation.md): device 11 s, throughput 197 s for 8 of 12 configs,
warm switches 65 s, nccl 20 s; the checkpoint check needs two cold starts (~20 s each), a
13 GB sync save (28 s), a load (10 s) and an async save, which a 95 s box cut short. On the
H200 (2026-11-28) the whole kit took 398 s and the 215 s throughput box ran 10 of 12 configs
(about 19 s each): the box is now 245 s, for the last two (micro-batch 1 and 2 with
checkpointing, where helper's host-dispatch share under recompute was read on the H100).

Example:
    >>> p = gpu_plan()
    >>> sum(p.time_boxes_s[c] for c in SEQUENTIAL_CHECKS) <= p.budget_s
    True
    >>> run_name({"micro_batch": 4, "padding": "packed", "activation_checkpointing": True}, "sdpa")
    'mb4 packed sdpa ac'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunSpec", "KitPlan", "gpu_plan", "dry_run_plan", "run_name", "trial_document", "CHECKS",
           "SEQUENTIAL_CHECKS", "STUDY", "plan_to_json", "plan_from_json"]

CHECKS = ("device", "throughput", "memory", "warm_switches", "checkpoint", "nccl")
"""Every check, in the order of the report."""
SEQUENTIAL_CHECKS = ("device", "throughput", "warm_switches", "checkpoint", "nccl")
"""The checks that hold the GPU, run one after the other; ``memory`` runs beside them."""
STUDY = "gpu-check"
"""The study name in the trial configs (it names the checkpoint folder)."""


def run_name(params: Mapping[str, Any], attention: str) -> str:
    """A config's canonical name: the same knobs give the same name, in every check."""
    name = f"mb{params['micro_batch']} {params.get('padding', 'max_length')} {attention}"
    if params.get("activation_checkpointing"):
        name += " ac"
    algo, proto = params.get("nccl_algo", "default"), params.get("nccl_proto", "default")
    if (algo, proto) != ("default", "default"):
        name += f" {algo}/{proto}"
    return name


@dataclass(frozen=True)
class RunSpec:
    """One trial config of the kit: knob values and the attention implementation."""

    params: dict[str, Any]
    """Knob values (tuner.knobs names); the catalogue fills in the rest."""
    attention: str = "sdpa"
    """[model] attention: ``sdpa`` or ``eager`` (objectives.trial_config.ATTENTIONS)."""

    @property
    def name(self) -> str:
        return run_name(self.params, self.attention)


def _run(micro_batch: int, padding: str = "packed", attention: str = "sdpa", ac: bool = False,
         **nccl: str) -> RunSpec:
    return RunSpec({"micro_batch": micro_batch, "grad_accum": 1, "padding": padding,
                    "activation_checkpointing": ac, "sharding": "full_shard",
                    "nccl_algo": nccl.get("algo", "default"), "nccl_proto": nccl.get("proto", "default")},
                   attention)


@dataclass(frozen=True, kw_only=True)
class KitPlan:
    """Everything one run of the kit does."""

    dry_run: bool
    """True: CPU, gloo, tiny shapes (the test suite's run)."""
    preset: str
    """helper.presets name of the model of the throughput, memory, switch and checkpoint checks."""
    small_preset: str
    """The model of the NCCL check (what it checks does not depend on the model)."""
    seq_len: int
    """Tokens per row."""
    backend: str
    """torch.distributed backend: ``nccl`` or ``gloo``."""
    gpu_fallback: str
    """helper GPU used for memory predictions when the device is not in helper's table."""
    warmup_steps: int
    """Optimizer steps before measuring, in a cold trial."""
    measure_steps: int
    """Optimizer steps measured per trial."""
    num_workers: int
    """DataLoader workers per rank (they tokenize)."""
    data: dict[str, Any]
    """The trial config's [data] section, less the cache folder (the kit's scratch)."""
    throughput_runs: tuple[RunSpec, ...]
    """Check 2, most informative first (a time box that runs out skips the last)."""
    switch_runs: tuple[RunSpec, ...]
    """Check 4: job 0 cold, then one reconfiguration level per job (none, data loader,
    model, communicators); the targets are throughput configs where possible, so their cold
    starts are already measured."""
    max_cold_twins: int
    """Check 4: cold runs of switch targets that check 2 did not measure."""
    checkpoint_run: RunSpec
    """Check 5's config (the checkpoint's size does not depend on the batch)."""
    checkpoint_every: int
    """Check 5: a save every this many steps (one save per run)."""
    nccl_ok: tuple[str, str]
    """Check 6: (NCCL_ALGO, NCCL_PROTO) that NCCL accepts."""
    nccl_rejected_algo: str
    """Check 6: an NCCL_ALGO NCCL refuses at communicator init. One rank never selects an
    algorithm (NCCL's enqueue.cc runs a one-rank collective as a local copy), so a real
    algorithm that cannot run a collective is not refused on one GPU; a name NCCL does not know
    is (src/graph/tuning.cc, parseList: "Unrecognized element token")."""
    trial_timeout_s: float
    """Cap on one trial's wall time."""
    first_trial_estimate_s: float
    """What a trial is assumed to take before one has been timed (to skip what cannot finish)."""
    time_boxes_s: dict[str, float] = field(default_factory=dict)
    """Per check: the most wall time it may take before it is killed."""
    budget_s: float = 540.0
    """The whole kit's wall time."""

    def describe(self) -> dict[str, Any]:
        """The JSON's ``plan`` entry."""
        return {"dry_run": self.dry_run, "preset": self.preset, "small_preset": self.small_preset,
                "seq_len": self.seq_len, "backend": self.backend, "dtype": "auto (bf16 on CUDA, fp32 on CPU)",
                "warmup_steps": self.warmup_steps, "measure_steps": self.measure_steps,
                "num_workers": self.num_workers, "world_size": 1, "sharding": "full_shard (FSDP2)",
                "throughput_runs": [r.name for r in self.throughput_runs],
                "switch_runs": [r.name for r in self.switch_runs],
                "time_boxes_s": dict(self.time_boxes_s), "budget_s": self.budget_s}


def gpu_plan() -> KitPlan:
    """The plan for one H100/H200: about 8 minutes of trials."""
    return KitPlan(
        dry_run=False, preset="llama-1b", small_preset="tiny", seq_len=2048, backend="nccl",
        gpu_fallback="H100-80GB", warmup_steps=2, measure_steps=5, num_workers=2,
        data={"source": "synthetic", "split": "train", "template": "alpaca", "tokenizer": "train",
              "vocab_size": 8000, "num_examples": 2000},
        throughput_runs=(
            _run(1), _run(2), _run(4), _run(8),                  # micro-batch
            _run(4, ac=True), _run(8, ac=True),                  # activation checkpointing
            _run(4, "max_length"), _run(4, "longest"),           # padding vs packing
            _run(1, attention="eager"), _run(4, attention="eager"),  # eager keeps the s x s scores
            _run(1, ac=True), _run(2, ac=True)),
        switch_runs=(_run(4), _run(2), _run(4, "max_length"), _run(4, ac=True),
                     _run(4, ac=True, algo="Ring", proto="Simple")),
        max_cold_twins=4, checkpoint_run=_run(1), checkpoint_every=3,
        nccl_ok=("Ring", "Simple"), nccl_rejected_algo="NoSuchAlgo",
        trial_timeout_s=90.0, first_trial_estimate_s=25.0,
        # device: the machine's first `import torch` (cold page cache); checkpoint: two ~13 GB saves
        time_boxes_s={"device": 25.0, "throughput": 245.0, "memory": 400.0, "warm_switches": 75.0,
                      "checkpoint": 160.0, "nccl": 25.0},
        budget_s=540.0)


def dry_run_plan() -> KitPlan:
    """The same code paths on CPU (gloo), tiny shapes: what the test suite runs."""
    return KitPlan(
        dry_run=True, preset="tiny", small_preset="tiny", seq_len=64, backend="gloo",
        gpu_fallback="cpu", warmup_steps=1, measure_steps=1, num_workers=0,
        data={"source": "synthetic", "split": "train", "template": "alpaca", "tokenizer": "train",
              "vocab_size": 300, "num_examples": 200},
        # One config with every knob off its default (a trial takes ~10-25 s on a loaded 2-core
        # VM); it is also switch job 3's target, so both cold references are exercised: check 2's
        # trial (job 3) and a cold twin (job 4).
        throughput_runs=(_run(2, "max_length", "eager", ac=True),),
        switch_runs=(_run(1, attention="eager"), _run(2, attention="eager"), _run(2, "max_length", "eager"),
                     _run(2, "max_length", "eager", ac=True),
                     _run(2, "max_length", "eager", ac=True, algo="Ring", proto="Simple")),
        max_cold_twins=1, checkpoint_run=_run(1), checkpoint_every=2,
        nccl_ok=("Ring", "Simple"), nccl_rejected_algo="NoSuchAlgo",
        trial_timeout_s=150.0, first_trial_estimate_s=10.0,
        time_boxes_s={"device": 60.0, "throughput": 150.0, "memory": 300.0, "warm_switches": 150.0,
                      "checkpoint": 120.0, "nccl": 90.0},
        budget_s=600.0)


def trial_document(plan: KitPlan, run: RunSpec, *, cache_dir: Path, trial_number: int = 0,
                   preset: str | None = None, measure_steps: int | None = None,
                   trial: Mapping[str, Any] | None = None, backend: str | None = None) -> dict[str, Any]:
    """The TUNER_TRIAL_CONFIG document of ``run`` (docs/contracts.md). Seed 0 everywhere, so
    a warm job and a cold run of the same config read the same batches."""
    params = dict(run.params, num_workers=plan.num_workers)
    if plan.num_workers:
        params["prefetch_factor"] = 2  # PyTorch's default
    return {
        "study": STUDY, "trial_number": trial_number, "seed": 0, "params": params,
        "model": {"preset": preset or plan.preset, "path": None, "seq_len": plan.seq_len, "dtype": "auto",
                  "attention": run.attention},
        "data": {**plan.data, "cache_dir": str(cache_dir)},
        "trial": {"warmup_steps": plan.warmup_steps, "measure_steps": measure_steps or plan.measure_steps,
                  "adaptive": False, "warm_warmup_steps": 1, **(trial or {})},
        "cluster": {"launcher": "local", "nodes": 1, "gpus_per_node": 1, "backend": backend or plan.backend},
    }


_RUN_FIELDS = ("throughput_runs", "switch_runs", "checkpoint_run")


def plan_to_json(plan: KitPlan) -> dict[str, Any]:
    """The whole plan as JSON (each check's process reads the plan its parent ran with).

    Example:
        >>> plan_from_json(plan_to_json(gpu_plan())) == gpu_plan()
        True
    """
    return dataclasses.asdict(plan)


def plan_from_json(doc: Mapping[str, Any]) -> KitPlan:
    """The inverse of :func:`plan_to_json`."""
    fields = dict(doc)
    for key in _RUN_FIELDS:
        value = fields[key]
        fields[key] = RunSpec(**value) if isinstance(value, Mapping) else tuple(RunSpec(**v) for v in value)
    fields["nccl_ok"] = tuple(fields["nccl_ok"])
    return KitPlan(**fields)
