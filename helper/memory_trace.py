"""Peak memory per GPU from the implementation: PyTorch's FSDP2 memory tracker on fake tensors.

The trial's own model (``helper.presets.llama_config``, the config objectives.models builds:
Hugging Face Llama, SDPA or eager attention) is built under ``FakeTensorMode`` (no storage), wrapped as the trial wraps it
(``checkpoint_wrapper`` per block when checkpointing, ``fully_shard`` per block then the root,
bf16 params with fp32 reduction), and two training steps run on a ``fake`` process group of
``gpu_count`` ranks on CPU. ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``
records every tensor's bytes by kind (sharded/unsharded params and grads, activations,
all-gather and reduce-scatter buffers, optimizer state); its peak of step 2 (optimizer state
exists) is the answer. The same recipe as torchtitan's ``scripts/estimate`` (read, not
copied): fake store, mesh built outside fake mode, tracker around fwd/bwd/step.

Limits: this counts tensors, not the caching allocator's fragmentation nor the CUDA context
(``estimate_memory`` adds both as allowances); AdamW runs with ``foreach=False`` because the
foreach path on fake DTensors reported optimizer temporaries of ~13x the state (an artefact
of fake dispatch, not what a GPU allocates).

torch and transformers are imported inside :func:`trace_memory`: ``import helper`` stays light.
"""

from __future__ import annotations

import functools

from helper.sizes import ModelShape, parse_model_size

__all__ = ["trace_memory", "GIB"]

GIB = 2**30


def _run(arch_key: tuple, gpu_count: int, micro_batch: int, seq_len: int,
         activation_checkpointing: bool, reshard_after_forward: bool, attention: str,
         grad_accum: int) -> dict[str, float]:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoModelForCausalLM

    from helper.presets import ModelArch, llama_config

    arch = ModelArch(**dict(arch_key))
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=gpu_count, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (gpu_count,))  # outside fake mode (torchtitan does the same)
        cfg = llama_config(arch, seq_len=seq_len)
        with FakeTensorMode():
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)
            layers = model.model.layers
            if activation_checkpointing:
                for i, block in enumerate(layers):
                    layers[i] = checkpoint_wrapper(block)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for block in layers:
                fully_shard(block, mp_policy=mp, reshard_after_forward=reshard_after_forward, mesh=mesh)
            fully_shard(model, mp_policy=mp, reshard_after_forward=reshard_after_forward, mesh=mesh)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
            ids = torch.randint(0, arch.vocab, (micro_batch, seq_len))
            tracker = FSDPMemTracker(mod=model, optm=opt)
            tracker.track_inputs((ids,))
            with tracker:
                for step in range(2):
                    for micro in range(grad_accum):
                        model.set_requires_gradient_sync(micro == grad_accum - 1)
                        model(input_ids=ids, labels=ids).loss.backward()
                    opt.step()
                    opt.zero_grad()
                    if step == 0:
                        tracker.reset_mod_stats()  # step 1 has no optimizer state yet
            peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    finally:
        dist.destroy_process_group()
    return {str(getattr(k, "value", k)): float(v) for k, v in peak.items()}


@functools.lru_cache(maxsize=64)
def _cached(*args) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(_run(*args).items()))


def trace_memory(model_size: float | int | str | ModelShape, gpu_count: int = 8, *,
                 micro_batch: int = 1, seq_len: int = 2048, activation_checkpointing: bool = False,
                 reshard_after_forward: bool = True, attention: str = "sdpa",
                 grad_accum: int = 1) -> dict[str, float]:
    """Peak bytes per GPU by kind, as PyTorch's FSDP2 memory tracker counts them on fake tensors.

    Args:
        model_size: a preset or size (its Llama shape is built: see ``parse_model_size``).
        gpu_count: ranks of the fake process group (FSDP2 over all of them).
        micro_batch, seq_len: the batch of each forward.
        activation_checkpointing: ``checkpoint_wrapper`` around every block (the trial's way).
        reshard_after_forward: FSDP2's option (full_shard True, shard_grad_op False).
        attention: Hugging Face ``attn_implementation``: ``sdpa`` or ``eager``.
        grad_accum: micro-batches per step (gradient sync on the last only, as the trial does).

    Returns:
        The tracker's peak snapshot in bytes: ``Sharded Param``, ``Unsharded Param``,
        ``Activation``, ``All Gather``, ``OptState``, ... and ``Total``.

    Raises:
        ImportError: torch or transformers is not installed.

    Example:
        >>> trace_memory("tiny", 2, micro_batch=1, seq_len=64)["Total"] > 0  # doctest: +SKIP
        True
    """
    shape = parse_model_size(model_size)
    if attention not in ("sdpa", "eager"):
        raise ValueError(f"attention must be sdpa or eager, got {attention!r}")
    arch_key = tuple(sorted(vars(shape.arch).items()))
    return dict(_cached(arch_key, int(gpu_count), int(micro_batch), int(seq_len),
                        bool(activation_checkpointing), bool(reshard_after_forward), attention,
                        int(grad_accum)))
