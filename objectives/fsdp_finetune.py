"""One trial: a short FSDP2 fine-tune that reports its throughput in the trial protocol.

    TUNER_TRIAL_CONFIG=trial.json TUNER_RESULT_FILE=result.jsonl \\
        torchrun --standalone --nproc_per_node N -m objectives.fsdp_finetune

Reads TUNER_TRIAL_CONFIG (docs/contracts.md); rank 0 appends JSON lines to TUNER_RESULT_FILE
(stdout when unset): one per measured optimizer step, then a summary. A failing rank writes
an `error` line itself (kind `oom` or `error`) and exits non-zero at once, so torchrun stops
the others. NCCL_ALGO / NCCL_PROTO come from the environment (the launcher sets them); they
are recorded, never interpreted. Without torchrun (`python -m ...`) it runs a world of one.

Measurement protocol: a step is one optimizer step (grad_accum micro-batches). The device
is synchronised before and after each step (CUDA), time is perf_counter wall time of the
slowest rank, warm-up steps are excluded. `tokens` is the step's non-padding tokens summed
over all ranks. Time blocked in the DataLoader's next() is data wait (slowest rank, per step).
"""

from __future__ import annotations

import faulthandler
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Layouts and checkpoints: their own modules (torch imported lazily inside).
from objectives import resident
from objectives.checkpoint import Checkpointer

# Peak memory, process age, peak FLOPs and FLOPs per token: objectives.metrics.
from objectives.metrics import model_flops_per_token, peak_flops_for, peak_memory_gib, peak_reserved_gib, process_age_s
from objectives.parallel import build_mesh, build_parallel_model, describe_layout, gpus_per_node_from_env, plan_layout

# The trial config: parsed and validated in objectives.trial_config, re-exported here.
from objectives.trial_config import STACKS, Knobs, TrialConfig, load_config, parse_config

# The trial protocol and the knob catalogue: standard library only, no control plane.
from tuner import knobs as catalogue
from tuner import protocol
from tuner.errors import TrialConfigError
from tuner.protocol import ResultWriter

__all__ = ["main", "load_config", "parse_config", "TrialConfig", "Knobs", "TrialConfigError", "ResultWriter",
           "classify_error", "error_event", "init_distributed", "build_data", "build_sharded_model",
           "train_step", "StepStats", "run_trial", "measure_trial", "build_loader", "trial_device",
           "peak_flops_for", "model_flops_per_token",
           "peak_memory_gib", "process_age_s"]

# ------------------------------------------------------------------------------ defaults
LEARNING_RATE = 2e-5  # Stanford Alpaca's fine-tuning LR (tatsu-lab/stanford_alpaca README); values don't change speed
NCCL_ENV_VARS = tuple(catalogue.KNOBS[name].env_var for name in catalogue.LAUNCH_KNOBS)
CONFIG_ERROR_GRACE_S = 10.0  # how long ranks > 0 wait for rank 0 to report a config error
# ------------------------------------------------------------------- protocol output

def classify_error(exc: BaseException) -> str:
    """`oom` for out-of-memory of any allocator, else `error`.

    Example:
        >>> classify_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        'oom'
    """
    torch = sys.modules.get("torch")  # no torch yet: no torch OOM (and no 2 s import on the way out)
    if isinstance(exc, MemoryError) or (torch is not None and isinstance(exc, torch.OutOfMemoryError)):
        return "oom"
    return "oom" if "out of memory" in str(exc).lower() else "error"


def error_event(exc: BaseException, *, rank: int) -> dict[str, Any]:
    """The protocol's error line for ``exc``: kind, the reason on one line, which rank.

    All of the message's lines are kept (joined by " | "): NCCL puts the reason ("no
    algorithm/protocol available ...") on a "Last error:" line after the first.
    """
    text = " | ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())
    return protocol.error_event(kind=classify_error(exc), message=f"{type(exc).__name__}: {text}", rank=rank)


# ---------------------------------------------------------------------- data and model

def build_data(config: TrialConfig, *, rank: int, world_size: int, pin_memory: bool = False,
               broadcast: Callable[[str | None], str] | None = None):
    """(tokenizer, DataLoader) of this rank, exactly as the trial builds them.

    A `train` tokenizer is trained (or read from the cache) by rank 0 alone and sent to the
    others with ``broadcast`` (rank 0's string in, everyone's copy out), so ranks on other
    nodes need no shared cache directory. Without ``broadcast`` every rank reads the cache
    (how tests replay a finished trial's batches). HF tokenizers load on every rank.
    """
    from objectives.data import TextTokenizer, load_examples, load_tokenizer

    examples = load_examples(config.data)
    if config.data.get("tokenizer", "train") != "train":
        tokenizer = load_tokenizer(config.data, examples)
    elif broadcast is None:
        tokenizer = load_tokenizer(config.data, examples, is_writer=rank == 0)
    else:
        tokenizer = load_tokenizer(config.data, examples) if rank == 0 else None
        payload = broadcast(tokenizer.to_json() if tokenizer is not None else None)
        tokenizer = tokenizer or TextTokenizer.from_json(payload)
    return tokenizer, build_loader(config, examples, tokenizer, rank=rank, world_size=world_size,
                                   pin_memory=pin_memory)


def build_loader(config: TrialConfig, examples, tokenizer, *, rank: int, world_size: int, pin_memory: bool = False):
    """This rank's DataLoader for the config's data knobs and seed (examples and tokenizer given)."""
    from objectives.data import build_dataloader

    k = config.knobs
    return build_dataloader(examples, tokenizer, seq_len=config.seq_len, micro_batch=k.micro_batch,
                            padding=k.padding, num_workers=k.num_workers, prefetch_factor=k.prefetch_factor,
                            rank=rank, world_size=world_size, seed=config.seed, pin_memory=pin_memory)


def broadcast_from_rank0(text: str | None) -> str:
    """Rank 0's string on every rank (torch.distributed.broadcast_object_list)."""
    import torch.distributed as dist

    box = [text]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def build_sharded_model(config: TrialConfig, *, vocab_size: int, device, layout=None, mesh=None) -> tuple[Any, Any]:
    """Meta model -> TP -> activation checkpointing per block -> fully_shard each block, then
    the root -> storage and weights: torchtitan's order, in objectives.parallel. Without a
    ``layout`` it is planned from the knobs over the whole world; without a ``mesh``
    (objectives.parallel.build_mesh, e.g. over a resident worker's own group) one is built
    over the default group."""
    import torch.distributed as dist

    if layout is None:
        world = dist.get_world_size()
        layout = plan_layout(config.knobs, world_size=world, gpus_per_node=gpus_per_node_from_env(world))
    mesh = mesh if mesh is not None else build_mesh(layout, device.type)
    return build_parallel_model(config, layout, mesh, vocab_size=vocab_size, device=device)


# -------------------------------------------------------------------------- one step

@dataclass(frozen=True)
class StepStats:
    """One optimizer step on this rank."""

    step_time_s: float
    """Wall time of the step, device synchronised at both ends."""
    data_wait_s: float
    """Time blocked in the DataLoader's next()."""
    tokens: int
    """Non-padding tokens of the step's micro-batches."""
    padded_tokens: int
    """Tokens computed, padding included."""
    loss: Any
    """Last micro-batch's loss (a tensor: read it after timing)."""


def train_step(model, optimizer, batches: Iterator[dict], *, grad_accum: int, device, packed: bool,
               sync: Callable[[], None]) -> StepStats:
    """grad_accum forward/backward passes, gradient sync only on the last, one AdamW step."""
    from objectives.data import count_tokens

    sync()
    t0 = time.perf_counter()
    wait_s, tokens, padded = 0.0, 0, 0
    for micro in range(grad_accum):
        tw = time.perf_counter()
        batch = next(batches)
        wait_s += time.perf_counter() - tw
        tokens += count_tokens(batch)
        padded += batch["input_ids"].numel()
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        model.set_requires_gradient_sync(micro == grad_accum - 1)  # reduce-scatter once per step
        mask = None if packed else batch["attention_mask"]  # packed rows: plain causal attention
        loss = model(input_ids=batch["input_ids"], attention_mask=mask, labels=batch["labels"]).loss
        (loss / grad_accum).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sync()
    return StepStats(time.perf_counter() - t0, wait_s, tokens, padded, loss.detach())


# ------------------------------------------------------------------------------ trial

def trial_device(config: TrialConfig):
    """(device, sync): this rank's GPU and a device synchronise for nccl, the CPU and a no-op for gloo."""
    import torch

    if config.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return device, (lambda: torch.cuda.synchronize(device))
    return torch.device("cpu"), (lambda: None)


def run_trial(config: TrialConfig, writer: ResultWriter) -> dict[str, Any]:
    """Run the trial in an initialised process group; emit step lines and return the summary."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    device, _ = trial_device(config)
    random.seed(config.seed)
    torch.manual_seed(config.seed)

    # ---- layout: the device mesh (objectives.parallel); the ranks of a TP group read one batch
    layout = plan_layout(config.knobs, world_size=world, gpus_per_node=gpus_per_node_from_env(world))
    mesh = build_mesh(layout, device.type)

    # ---- data: tokenization happens in the DataLoader workers
    tokenizer, loader = build_data(config, rank=layout.dp_rank(rank), world_size=layout.dp,
                                   pin_memory=device.type == "cuda", broadcast=broadcast_from_rank0)

    # ---- model: built on meta, sharded, then materialised; AdamW over the shards
    model, dtype = build_sharded_model(config, vocab_size=tokenizer.vocab_size, device=device, layout=layout, mesh=mesh)
    return measure_trial(config, writer, model=model, dtype=dtype, loader=loader, layout=layout)


def measure_trial(config: TrialConfig, writer: ResultWriter, *, model, dtype, loader, layout, group=None,
                  setup_started: float | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Warm-up and measured steps of a built model on a fresh AdamW; emit step lines, then the summary.

    ``layout``: the objectives.parallel.Layout the model was built with (a TP group's ranks
    share their rows, so their tokens count once).

    ``group``: the process group of the trial's collectives (None: the default group).
    ``setup_started``: perf_counter() when this trial's set-up began in a resident worker
    (its startup_seconds count from there); None in a cold trial (from process start).
    ``extra``: more summary fields.
    """
    import torch
    import torch.distributed as dist

    from objectives.data import iterate_batches
    from objectives.models import count_params
    from tuner.measurement import stop_reason

    world = dist.get_world_size(group)
    device, sync = trial_device(config)
    use_cuda = device.type == "cuda"
    knobs = config.knobs
    batches = iterate_batches(loader)
    n_params = count_params(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=use_cuda)
    ckpt = Checkpointer.for_trial(config)  # None unless [trial] checkpoint_every > 0
    start = ckpt.resume(model, optimizer) if ckpt else 0
    if ckpt and ckpt.resumed_from_step is not None:
        writer.emit({"event": "resume", "step": start, "reload_s": ckpt.reload_s, "unix_time": time.time(),
                     "process_start": time.time() - process_age_s()})

    # ---- steps: warm-up, then measured
    total_tokens = total_padded = 0
    total_s = total_wait_s = 0.0
    startup_s = None
    values: list[float] = []  # tokens/s/GPU per measured step, the same on every rank
    stopped = ""
    for step in range(start, config.warmup_steps + config.measure_steps):
        if ckpt and step > start and ckpt.due(step):
            ckpt.save(step, model, optimizer)  # outside the timed step: its cost is reported apart
        if step == config.warmup_steps:
            startup_s = process_age_s() if setup_started is None else time.perf_counter() - setup_started
        stats = train_step(model, optimizer, batches, grad_accum=knobs.grad_accum, device=device,
                           packed=knobs.padding == "packed", sync=sync)
        counts = torch.tensor([stats.tokens, stats.padded_tokens], dtype=torch.float64, device=device)
        dist.all_reduce(counts, group=group)  # every rank's tokens
        times = torch.tensor([stats.step_time_s, stats.data_wait_s], dtype=torch.float64, device=device)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=group)  # the slowest rank sets the pace
        if step < config.warmup_steps:
            continue
        tokens, padded = int(counts[0].item()) // layout.tp, int(counts[1].item()) // layout.tp  # TP ranks share rows
        step_s, wait_s = times.tolist()
        total_tokens, total_padded = total_tokens + tokens, total_padded + padded
        total_s, total_wait_s = total_s + step_s, total_wait_s + wait_s
        writer.emit(protocol.step_event(step=step, tokens=tokens, seconds=step_s, padded_tokens=padded,
                                        data_wait_s=wait_s, loss=float(stats.loss.item()), unix_time=time.time()))
        values.append(tokens / step_s / world)
        if config.adaptive:
            # every rank holds the same reduced numbers, so every rank decides alike: no extra collective
            stopped = stop_reason(values, min_steps=config.min_steps, target_rel_ci=config.target_rel_ci,
                                  stop_below=config.stop_below)
            if stopped:
                break

    # ---- summary
    if ckpt:
        ckpt.wait()
    mem_gib, mem_kind = peak_memory_gib(device)
    reserved_gib = peak_reserved_gib(device)
    mem = torch.tensor([mem_gib, reserved_gib or 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(mem, op=dist.ReduceOp.MAX, group=group)
    device_name = torch.cuda.get_device_name(device) if use_cuda else "cpu"
    _, peak_flops = peak_flops_for(device_name) if use_cuda else (None, None)
    mfu = None
    if peak_flops:  # all computed tokens (padding too: the GPU did that work), per GPU
        flops = model_flops_per_token(model.config, n_params, config.seq_len)
        mfu = total_padded / total_s / world * flops / peak_flops
    summary = protocol.summary_event(**{
        "tokens_per_sec_per_gpu": total_tokens / total_s / world,
        "peak_mem_gib": mem[0].item(), "data_wait_frac": total_wait_s / total_s,
        "peak_mem_reserved_gib": mem[1].item() if reserved_gib is not None else None,
        "peak_mem_kind": mem_kind + ", max over ranks", "data_wait_kind": "slowest rank per step",
        "step_time_s": total_s / len(values), "measured_steps": len(values), "stopped_early": stopped or None,
        "warmup_steps": config.warmup_steps, "world_size": world, "tokens_counted": "non_padding",
        "padding_efficiency": total_tokens / total_padded if total_padded else None,
        "timing": ("cuda-synchronized" if use_cuda else "cpu") + " wall clock per optimizer step, slowest rank",
        "startup_seconds": startup_s, "mfu": mfu, "mfu_peak_flops": peak_flops, "device": device_name,
        "dtype": str(dtype).removeprefix("torch."), "n_params": n_params,
        "attention": getattr(model.config, "_attn_implementation", None),
        "stack": STACKS.get(getattr(model.config, "_attn_implementation", None) or "sdpa"),
        "knobs": dict(knobs), "launch_params": config.launch_params,
        "layout": describe_layout(layout, config.knobs), "checkpoint": ckpt.summary() if ckpt else None,
        "nccl_env": {var: os.environ.get(var) for var in NCCL_ENV_VARS},
        "torch_version": torch.__version__, **(extra or {}),
    })
    writer.emit(summary)
    return summary


def init_distributed(backend: str) -> None:
    """init_process_group from torchrun's environment, or a world of one without it."""
    import torch
    import torch.distributed as dist

    if backend not in ("nccl", "gloo"):
        raise TrialConfigError(f"cluster.backend {backend!r}: nccl (GPU) or gloo (CPU)")
    device_id = None
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise TrialConfigError('cluster.backend "nccl" needs CUDA; use backend = "gloo" on CPU')
        device_id = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device_id)
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend, device_id=device_id)
    else:  # plain `python -m objectives.fsdp_finetune`
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device_id)


def _exit_at_once(code: int) -> None:
    """End a rank whose work is done and written without the interpreter's finalization. There,
    under load, a gloo rank aborted once in a dozen runs of three concurrent two-rank trials
    ("terminate called without an active exception", SIGABRT, no Python frame left) after its
    result was complete, and torchrun reported the finished trial as failed. C++ objects that
    still own threads at static destruction abort the process (pytorch/pytorch#179291 describes
    gloo's); ``os._exit`` runs no finalizers. Everything a trial writes is flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> int:
    # A rank that dies inside torch's C++ (SIGSEGV, SIGABRT: a std::terminate in gloo or NCCL)
    # writes no protocol line; its threads' Python stacks in the job's log say where it was.
    faulthandler.enable(all_threads=True)
    if os.environ.get(protocol.WORKER_ENV):  # resident mode: several configs in one process group
        _exit_at_once(resident.main(sys.modules[__name__]))
    rank = int(os.environ.get("RANK", "0"))
    writer = ResultWriter(os.environ.get(protocol.RESULT_ENV), enabled=rank == 0)
    # Workers tokenize one text at a time; the Rust pool only adds a fork warning.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        if protocol.CONFIG_ENV not in os.environ:
            raise TrialConfigError(f"{protocol.CONFIG_ENV} is not set (path of the trial config JSON)")
        config = load_config(os.environ[protocol.CONFIG_ENV])
        init_distributed(config.backend)
        import torch.distributed as dist

        run_trial(config, writer)
        dist.barrier()
        dist.destroy_process_group()
        _exit_at_once(0)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a protocol line
        # The failing rank reports, then exits at once without destroy_process_group: peers
        # may sit in a collective that never completes; torchrun sees the exit and stops
        # them. A peer's collective that fails because of it (gloo: "Connection reset by
        # peer") is a consequence, not the cause: a line already written wins. A config
        # error is every rank's: rank 0 reports it, the others wait to be stopped, so rank 0
        # is not killed before its line is written.
        traceback.print_exc()
        sys.stderr.flush()
        if isinstance(exc, TrialConfigError) and rank != 0:
            time.sleep(CONFIG_ERROR_GRACE_S)
        elif not writer.has_error():
            writer.enabled = True
            writer.emit(error_event(exc, rank=rank))
        _exit_at_once(1)


if __name__ == "__main__":
    raise SystemExit(main())
