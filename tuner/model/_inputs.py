"""The one translation of a trial's knob values into helper's model inputs.

A trial runs with every knob's value (tuner.spec.complete_params); helper's performance model
reads a configuration as a *measurement dict* (helper.measurements.measurement_plan): the
model, the cluster, the computed row length, the share of real tokens, the layout. Between the
two sit three choices, made here once for the sampler, screening, the sim and the fits:

- the padding mode becomes a row length, a real-token share and examples per row
  (helper.padding.padded_rows), for examples of ``mean_tokens`` tokens (helper's default
  length unless the study measured its data's);
- FSDP2's ``shard_grad_op`` is helper's zero3 without reshard-after-forward
  (tuner.knobs.fsdp_reshard_after_forward);
- the layout knobs become helper's one layout type (helper.mesh.Layout);
- the spec's [model] stack (helper.stacks) says what ``activation_checkpointing`` keeps and how
  gradients accumulate; tuner's own workload is ``hf-sdpa``, helper's default.

Example:
    >>> inp = model_inputs({"micro_batch": 4, "grad_accum": 2, "padding": "packed", "num_workers": 2,
    ...                     "prefetch_factor": 2}, model="llama-2-7b", gpu="H100-80GB", world_size=32,
    ...                    gpus_per_node=8, seq_len=2048, mean_tokens=256.0)
    >>> inp.seq_len, inp.padding_efficiency, inp.examples_per_sequence, inp.layout.name
    (2048, 1.0, 8.0, 'fsdp')
    >>> sorted(inp.measurement(9000.0))[:4]
    ['activation_checkpointing', 'examples_per_sequence', 'gpu', 'gpu_count']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helper.mesh import Layout
from helper.padding import padded_rows
from helper.stacks import DEFAULT_STACK, get_stack
from tuner import knobs
from tuner.spec import StudySpec, complete_params

__all__ = ["ModelInputs", "model_inputs", "spec_model_inputs"]


@dataclass(frozen=True, kw_only=True)
class ModelInputs:
    """One configuration as helper's model reads it."""

    model: str
    """A helper preset or size (``llama-2-7b``, ``7b``)."""
    gpu: str
    """A helper GPU name (``H100-80GB``)."""
    gpu_count: int
    """GPUs the trial runs on (its world size)."""
    gpus_per_node: int
    """GPUs per node."""
    seq_len: int
    """Tokens per computed row, padding applied (``longest`` pads to the batch's longest example)."""
    micro_batch: int
    """Rows per GPU per micro-step."""
    grad_accum: int
    """Micro-steps per optimizer step."""
    activation_checkpointing: bool
    """Each block recomputed in backward."""
    nccl_algo: str
    """NCCL_ALGO (``default``: unset)."""
    nccl_proto: str
    """NCCL_PROTO (``default``: unset)."""
    num_workers: int
    """DataLoader workers per GPU."""
    prefetch_factor: int | None
    """Batches each worker loads ahead (None without workers)."""
    padding: str
    """The padding mode the row length and real-token share come from."""
    padding_efficiency: float
    """Share of the computed tokens that are real."""
    examples_per_sequence: float
    """Examples tokenised per row (1 when padded; row / mean length when packed)."""
    reshard_after_forward: bool
    """FSDP2's reshard_after_forward (False for ``shard_grad_op``)."""
    layout: Layout
    """How the GPUs split the work (helper.mesh.Layout)."""
    stack: str = DEFAULT_STACK
    """The training stack (a helper.stacks preset; the spec's [model] stack): what
    ``activation_checkpointing`` keeps, the attention kernel, reduce dtype, accumulation."""

    def step_kwargs(self) -> dict[str, Any]:
        """Arguments of ``helper.plan_step`` and ``helper.predict_throughput`` (FSDP over every GPU)."""
        return dict(model_size=self.model, gpu_count=self.gpu_count, gpu=self.gpu, seq_len=self.seq_len,
                    micro_batch=self.micro_batch, grad_accum=self.grad_accum,
                    activation_checkpointing=self.activation_checkpointing, gpus_per_node=self.gpus_per_node,
                    nccl_algo=self.nccl_algo, nccl_proto=self.nccl_proto, num_workers=self.num_workers,
                    prefetch_factor=self.prefetch_factor, padding_efficiency=self.padding_efficiency,
                    examples_per_sequence=self.examples_per_sequence,
                    reshard_after_forward=self.reshard_after_forward, stack=self.stack)

    def memory_kwargs(self) -> dict[str, Any]:
        """Arguments of ``helper.estimate_memory`` for FSDP2 over every GPU (helper's zero3)."""
        return dict(model_size=self.model, gpu_count=self.gpu_count, sharding="zero3", micro_batch=self.micro_batch,
                    seq_len=self.seq_len, activation_checkpointing=self.activation_checkpointing,
                    grad_accum=self.grad_accum, reshard_after_forward=self.reshard_after_forward, gpu=self.gpu,
                    stack=self.stack)

    def layout_kwargs(self) -> dict[str, Any]:
        """Arguments of ``helper.layout_memory`` / ``layout_step_time`` besides the layout."""
        return dict(gpu=self.gpu, micro_batch=self.micro_batch, seq_len=self.seq_len,
                    activation_checkpointing=self.activation_checkpointing, grad_accum=self.grad_accum,
                    stack=self.stack)

    def measurement(self, tokens_per_sec_per_gpu: float | None = None, *,
                    padding_known: bool = True) -> dict[str, Any]:
        """helper's measurement dict (helper.measurements.measurement_plan; the input of
        ``helper.fit_calibration``): an HSDP or TP layout is given as ``layout``.

        ``padding_known=False``: the real-token share was not measured, so the dict gives the
        padding mode alone and the fit estimates the share (one nuisance constant per mode).
        """
        m: dict[str, Any] = {
            "preset": self.model, "gpu": self.gpu, "gpu_count": self.gpu_count, "gpus_per_node": self.gpus_per_node,
            "seq_len": self.seq_len, "micro_batch": self.micro_batch, "grad_accum": self.grad_accum,
            "activation_checkpointing": self.activation_checkpointing, "nccl_algo": self.nccl_algo,
            "nccl_proto": self.nccl_proto, "num_workers": self.num_workers, "prefetch_factor": self.prefetch_factor,
            "padding_efficiency": self.padding_efficiency, "examples_per_sequence": self.examples_per_sequence,
            "reshard_after_forward": self.reshard_after_forward, "padding": self.padding}
        if self.stack != DEFAULT_STACK:  # tuner's own workload's stack is helper's default
            m["stack"] = self.stack
        if not padding_known:
            del m["padding_efficiency"], m["examples_per_sequence"]
        if self.prefetch_factor is None:  # no workers: no prefetch (tuner.knobs' rule)
            del m["prefetch_factor"]
        if self.layout.dp_replicate > 1 or self.layout.tp > 1:  # fitted through helper.layouts
            m["layout"] = {"dp_shard": self.layout.dp_shard, "dp_replicate": self.layout.dp_replicate,
                           "tp": self.layout.tp}
        if tokens_per_sec_per_gpu is not None:
            m["tokens_per_sec_per_gpu"] = float(tokens_per_sec_per_gpu)
        return m


def model_inputs(values: Mapping[str, Any], *, model: str, gpu: str, world_size: int, gpus_per_node: int,
                 seq_len: int, mean_tokens: float | None = None,
                 padding_efficiency: float | None = None, stack: str = DEFAULT_STACK) -> ModelInputs:
    """helper's inputs for complete knob values (tuner.spec.complete_params) on a cluster.

    ``mean_tokens``: the data's mean tokens per example (helper's default when None), which
    sets the rows' real-token share; ``padding_efficiency``: a measured share that overrides it;
    ``stack``: the training stack the trial runs (helper.stacks; the spec's [model] stack).
    """
    v = knobs.resolve(values)
    micro_batch = int(v["micro_batch"])
    row, efficiency, per_row = padded_rows(str(v["padding"]), int(seq_len), micro_batch, mean_tokens)
    return ModelInputs(
        model=model, gpu=gpu, gpu_count=int(world_size), gpus_per_node=int(gpus_per_node), seq_len=row,
        micro_batch=micro_batch, grad_accum=int(v["grad_accum"]),
        activation_checkpointing=bool(v["activation_checkpointing"]), nccl_algo=v["nccl_algo"],
        nccl_proto=v["nccl_proto"], num_workers=int(v["num_workers"]), prefetch_factor=v.get("prefetch_factor"),
        padding=str(v["padding"]),
        padding_efficiency=float(padding_efficiency) if padding_efficiency is not None else efficiency,
        examples_per_sequence=per_row, reshard_after_forward=knobs.fsdp_reshard_after_forward(v),
        layout=Layout.from_knobs(v, world_size=int(world_size), gpus_per_node=int(gpus_per_node)),
        stack=get_stack(stack).name)


def spec_model_inputs(params: Mapping[str, Any], spec: StudySpec, *, mean_tokens: float | None = None,
                      padding_efficiency: float | None = None) -> ModelInputs:
    """:func:`model_inputs` for a trial's params on the spec's model and cluster."""
    c = spec.cluster
    return model_inputs(complete_params(dict(params), spec), model=spec.model.preset or spec.model.path,
                        gpu=c.gpu, world_size=c.world_size, gpus_per_node=c.gpus_per_node, seq_len=spec.model.seq_len,
                        mean_tokens=mean_tokens, padding_efficiency=padding_efficiency, stack=spec.model.stack)
