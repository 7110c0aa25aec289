"""A resident trial worker: one torchrun job runs a sequence of trial configs, paying the
interpreter, imports, rendezvous, data set-up and model build once.

    TUNER_WORKER_DIR=dir TUNER_TRIAL_CONFIG=trial.json TUNER_RESULT_FILE=result.jsonl \\
        torchrun --standalone --nproc_per_node N -m objectives.fsdp_finetune

(objectives.fsdp_finetune hands over to :func:`main` when TUNER_WORKER_DIR is set, passing
itself as the :class:`Workload` whose functions build and measure each config.) Job 0 is
the config it was started with; then every rank polls the folder for ``job-00001.json``,
... (tuner.protocol.write_job) until a stop job, or no job for TUNER_WORKER_IDLE_S seconds.
Every job's result file gets the cold trial's lines, then ``job_end``.

Between configs the worker rebuilds only what the change needs (tuner.knobs.reconfiguration):

- ``none`` (micro_batch, grad_accum): the sharded model is kept;
- ``data_loader`` (padding, num_workers, prefetch_factor): nothing more, because the
  DataLoader is rebuilt for every config anyway: a trial's seed sets its batch order, and
  the batches must be the cold trial's for the two to measure the same thing;
- ``model`` (activation_checkpointing, sharding, reshard_after_forward): the model is rebuilt
  from meta-device init with random weights (throughput does not depend on their values);
- ``communicators`` (NCCL_ALGO, NCCL_PROTO): the variables are set in this process, a new
  process group is created (NCCL reads them when a communicator is initialised), the model
  is rebuilt on a DeviceMesh over it and the old group is destroyed.

Every config gets a fresh AdamW, and memory is freed before it starts (gc, the CUDA cache,
peak counters reset; on CPU the peak RSS through /proc/self/clear_refs), so its peak memory
is its own. A failure is handled first as in a cold trial: the failing rank writes the error line,
and the worker goes on only if every rank failed alike (an OOM on equal shards: each rank
reports the config's end in a file, not a collective, which a peer stuck in a collective
would never join); the next config then gets a new model and new communicators. Otherwise
the failed rank exits, torchrun stops the others, and the launcher starts a fresh worker.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Protocol

from objectives.parallel import build_mesh, gpus_per_node_from_env, plan_layout
from objectives.trial_config import TrialConfig, load_config
from tuner import knobs as catalogue
from tuner import protocol
from tuner.errors import TrialConfigError

__all__ = ["ResidentWorker", "Workload", "main", "POLL_S"]

POLL_S = 0.02  # how often an idle rank looks for its next job file
AGREE_S = 30.0  # how long a failed rank waits for its peers to report the same config's end
_SECTIONS = ("model", "data", "cluster")  # a change of these rebuilds everything (not within one study)


class Workload(Protocol):
    """What a resident worker needs of a trial workload (objectives.fsdp_finetune has it all):
    the functions a cold trial runs, called once per config here."""

    NCCL_ENV_VARS: tuple[str, ...]
    CONFIG_ERROR_GRACE_S: float

    def trial_device(self, config: TrialConfig) -> Any: ...
    def init_distributed(self, backend: str) -> None: ...
    def build_data(self, config: TrialConfig, *, rank: int, world_size: int, **kw: Any) -> Any: ...
    def build_loader(self, config: TrialConfig, examples: Any, tokenizer: Any, *, rank: int, world_size: int,
                     **kw: Any) -> Any: ...
    def build_sharded_model(self, config: TrialConfig, *, vocab_size: int, device: Any, **kw: Any) -> Any: ...
    def measure_trial(self, config: TrialConfig, writer: protocol.ResultWriter, **kw: Any) -> dict[str, Any]: ...
    def error_event(self, exc: BaseException, *, rank: int) -> dict[str, Any]: ...


class ResidentWorker:
    """What a rank keeps between configs: data, tokenizer, process group, model."""

    def __init__(self, trial: Workload) -> None:
        self.trial = trial
        self.config: TrialConfig | None = None
        self.raw: dict[str, Any] | None = None
        self.examples = self.tokenizer = self.model = self.dtype = None
        self.group = self.mesh = None
        self.jobs = 0
        self.broken = False

    def level(self, raw: dict[str, Any]) -> str:
        """What moving from the current config to ``raw`` needs (tuner.knobs.RECONFIGURE)."""
        if self.raw is None or any(self.raw.get(k) != raw.get(k) for k in _SECTIONS):
            return "process"
        return catalogue.reconfiguration(self.raw["params"], raw["params"])

    def run(self, raw: dict[str, Any], config: TrialConfig, writer: protocol.ResultWriter, *,
            job: int) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        started = time.perf_counter()
        level = self.level(raw)
        if self.broken and level in ("none", "data_loader", "model"):
            level = "communicators"
        self.broken = False
        if job > 0 and level != "process":  # warm: one step absorbs what is new (spec: trial.warm_warmup_steps)
            warm_warmup = int((raw.get("trial") or {}).get("warm_warmup_steps", config.warmup_steps))
            config = dataclasses.replace(config, warmup_steps=min(config.warmup_steps, warm_warmup))
        rebuild = catalogue.RECONFIGURE.index(level)
        device, _ = self.trial.trial_device(config)
        rank, world = dist.get_rank(), dist.get_world_size()
        self._free(device, drop_model=rebuild >= catalogue.RECONFIGURE.index("model"))

        # ---- communicators: the environment first, then a group whose communicators read it
        if job > 0 and rebuild >= catalogue.RECONFIGURE.index("communicators"):
            env = catalogue.environment(config.launch_params, os.environ)
            for var in self.trial.NCCL_ENV_VARS:  # set, or unset for `default`, as the launcher does
                if var in env:
                    os.environ[var] = env[var]
                else:
                    os.environ.pop(var, None)
            old = self.group
            self.group = dist.new_group(backend=config.backend)
            if old is not None:
                dist.destroy_process_group(old)
            self.mesh = None
        # ---- layout: the mesh over this worker's group, rebuilt with the model (the layout may change)
        layout = plan_layout(config.knobs, world_size=world, gpus_per_node=gpus_per_node_from_env(world))
        if self.model is None:
            self.mesh = build_mesh(layout, device.type, group=self.group)

        # ---- data: examples and tokenizer once; the loader (seeded per trial) every time
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        if self.examples is None or level == "process":
            from objectives.data import load_examples

            self.tokenizer, _ = self.trial.build_data(config, rank=layout.dp_rank(rank), world_size=layout.dp,
                                                 broadcast=self._broadcast)
            self.examples = load_examples(config.data)
        loader = self.trial.build_loader(config, self.examples, self.tokenizer, rank=layout.dp_rank(rank),
                                    world_size=layout.dp,
                                    pin_memory=device.type == "cuda")

        # ---- model: rebuilt from meta-device init only when the change needs it
        if self.model is None:
            self.model, self.dtype = self.trial.build_sharded_model(config, vocab_size=self.tokenizer.vocab_size,
                                                               device=device, layout=layout, mesh=self.mesh)
        self.config, self.raw = config, raw
        self.jobs += 1
        return self.trial.measure_trial(config, writer, model=self.model, dtype=self.dtype, loader=loader,
                                   layout=layout, group=self.group, setup_started=None if job == 0 else started,
                                   extra={"resident": {"job": job, "reconfigured": level if job else "process",
                                                       "worker_trial": self.jobs,
                                                       "setup_seconds": time.perf_counter() - started}})

    def reset(self) -> None:
        """After a failed config: drop the model, and take new communicators next time (a
        failed collective may leave its communicator unusable)."""
        self.model, self.broken = None, True

    def _broadcast(self, text: str | None) -> str:
        import torch.distributed as dist

        box = [text]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0) if self.group else 0,
                                   group=self.group)
        return box[0]

    def _free(self, device, *, drop_model: bool) -> None:
        """Free the previous config's memory and reset the peak counters."""
        import torch

        if drop_model:
            self.model = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        else:
            try:  # proc(5): writing 5 to clear_refs resets the peak RSS (VmHWM)
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                pass


def _agree(worker_dir: str, job: int, *, rank: int, world: int, failed: bool) -> bool:
    """Whether every rank ended job ``job``: through files, not a collective, because a rank
    that failed outside a collective leaves its peers waiting in one (they never get here,
    and the failed rank exits after AGREE_S, so torchrun stops them all). When every rank
    failed alike (an OOM on equal shards, a collective every rank refused), the worker goes on."""
    folder = Path(worker_dir)
    (folder / f"end-{job:05d}-{rank}").write_text("failed" if failed else "ok")
    deadline = time.monotonic() + (AGREE_S if failed else AGREE_S * 10)
    while time.monotonic() < deadline:
        if all((folder / f"end-{job:05d}-{r}").exists() for r in range(world)):
            return True
        time.sleep(POLL_S)
    return False


def _next_job(worker_dir: str, job: int, idle_s: float) -> dict[str, Any] | None:
    """Wait for job ``job``'s file; None after ``idle_s`` without one."""
    path = protocol.job_path(worker_dir, job)
    deadline = time.monotonic() + idle_s
    while time.monotonic() < deadline:
        doc = protocol.read_job(path)
        if doc is not None:
            return doc
        time.sleep(POLL_S)
    return None


def main(trial: Workload) -> int:
    """Serve configs until a stop job or the idle timeout, building and measuring each with ``trial``."""
    import json

    rank = int(os.environ.get("RANK", "0"))
    worker_dir = os.environ[protocol.WORKER_ENV]
    idle_s = float(os.environ.get(protocol.WORKER_IDLE_ENV, protocol.WORKER_IDLE_S))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    writer = protocol.ResultWriter(os.environ.get(protocol.RESULT_ENV), enabled=rank == 0)
    try:
        if protocol.CONFIG_ENV not in os.environ:
            raise TrialConfigError(f"{protocol.CONFIG_ENV} is not set (path of the trial config JSON)")
        config_path = os.environ[protocol.CONFIG_ENV]
        config = load_config(config_path)
        trial.init_distributed(config.backend)
        import torch.distributed as dist

        if rank == 0:
            protocol.announce_worker(worker_dir, pid=os.getpid(), world_size=dist.get_world_size())
        worker, job = ResidentWorker(trial), 0
        world = dist.get_world_size()
        while True:
            raw = json.loads(Path(config_path).read_text())
            try:
                worker.run(raw, config, writer, job=job)
                failed = None
            except (KeyboardInterrupt, TrialConfigError):
                raise
            except Exception as exc:  # noqa: BLE001 - recovered only if every rank failed alike
                traceback.print_exc()
                failed = exc
                if not writer.has_error():
                    writer.enabled = True
                    writer.emit(trial.error_event(exc, rank=rank))
                writer.enabled = rank == 0
            if not _agree(worker_dir, job, rank=rank, world=world, failed=failed is not None):
                raise failed or RuntimeError("a peer rank failed while this one finished the config")
            if failed is not None:
                worker.reset()
            writer.emit(protocol.job_end_event(job=job, **({"recovered": True} if failed else {})))
            doc = _next_job(worker_dir, job + 1, idle_s)
            if doc is None or doc.get("stop"):
                break
            job, config_path = job + 1, doc["config"]
            writer = protocol.ResultWriter(doc["result"], enabled=rank == 0)
            config = load_config(config_path)
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - as a cold trial: the error line, then exit at once
        traceback.print_exc()
        sys.stderr.flush()
        if isinstance(exc, TrialConfigError) and rank != 0:
            time.sleep(trial.CONFIG_ERROR_GRACE_S)
        elif not writer.has_error():
            writer.enabled = True
            writer.emit(trial.error_event(exc, rank=rank))
        sys.stdout.flush()
        os._exit(1)
