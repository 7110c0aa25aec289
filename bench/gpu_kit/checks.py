"""The six checks of the GPU kit. Each runs in a process of its own (``bench/gpu_check.py
--check NAME``) and rewrites ``OUT/checks/NAME.json`` after every unit of work, so a check
killed at its time box still leaves what it finished.

Predictions come from helper's public API: ``predict_throughput`` (tokens/s/GPU and MFU),
``estimate_memory`` (``analytic`` and ``trace``), ``estimate_startup_seconds`` and
``checkpoint_plan``. Measurements come from the trial's own summary line (docs/contracts.md).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_kit.plan import KitPlan, RunSpec, trial_document
from bench.gpu_kit.report import cold_reference, switch_row, throughput_row
from bench.gpu_kit.trials import finish_cold, helper_gpu_for, run_cold, run_resident, start_cold, stop_cold
from tuner import knobs

__all__ = ["Context", "Recorder", "CHECK_FUNCTIONS", "KitError", "write_json", "read_json"]

START_MARGIN_S = 2.0
"""A trial is started only if its estimated wall time plus this fits before the deadline."""


class KitError(Exception):
    """Bad input or an unusable machine: one line, and the kit stops."""


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Recorder:
    """One check's partial result, rewritten after every change."""

    def __init__(self, path: Path) -> None:
        self.path, self.result = path, {}

    def set(self, key: str, value: Any, *, status: str = "running") -> None:
        self.result[key] = value
        self.write(status)

    def write(self, status: str, error: str | None = None) -> None:
        write_json(self.path, {"status": status, "result": self.result, "error": error})


@dataclass(frozen=True, kw_only=True)
class Context:
    """What a check gets."""

    plan: KitPlan
    """The kit's plan."""
    out: Path
    """The kit's output folder (trial folders go under ``runs/``: they come back with the JSON)."""
    scratch: Path
    """Large or throw-away files: the tokenizer cache, checkpoints."""
    deadline_unix: float
    """When the check must be done (its time box ends shortly after)."""
    rec: Recorder
    """Where the check writes its result."""

    @property
    def cache_dir(self) -> Path:
        return self.scratch / "tokenizer"

    def left_s(self) -> float:
        return self.deadline_unix - time.time()

    def device(self) -> dict[str, Any]:
        """The device check's result (``{}`` if it did not finish)."""
        return (read_json(self.out / "checks" / "device.json") or {}).get("result") or {}

    def helper_gpu(self) -> str | None:
        """helper's name for this device: ``cpu`` in a dry run, None for a GPU helper lacks."""
        if self.plan.dry_run:
            return "cpu"
        device = self.device()
        if "helper_gpu" in device:
            return device["helper_gpu"]
        import torch  # the device check did not run (--only): ask the device itself

        return helper_gpu_for(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None

    def folder(self, check: str, name: str) -> Path:
        return self.out / "runs" / check / name.replace(" ", "_").replace("/", "-")


# ------------------------------------------------------------------------------ 1. device

def _version(v: Any) -> str:
    """NCCL's version as torch reports it: a tuple (2, 27, 5), or an int (2705) in old releases."""
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def check_device(ctx: Context) -> None:
    """GPU name and memory, driver, CUDA, torch, NCCL and transformers versions."""
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    info: dict[str, Any] = {
        "cuda_available": cuda, "gpu_count": torch.cuda.device_count() if cuda else 0,
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_gib=props.total_memory / 2**30, memory_gb=props.total_memory / 1e9,
                    compute_capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
                    nccl=_version(torch.cuda.nccl.version()),
                    cudnn=torch.backends.cudnn.version(), helper_gpu=helper_gpu_for(props.name))
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = smi.stdout.strip().splitlines()[0] if smi.stdout.strip() else smi.stderr.strip()
            info["driver"] = info["nvidia_smi"].split(",")[1].strip() if smi.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
            info["nvidia_smi"], info["driver"] = f"unavailable: {exc}", None
    else:
        info.update(name="cpu", memory_gib=None, memory_gb=None, nccl=None, driver=None, helper_gpu="cpu")
    ctx.rec.result.update(info)
    if not cuda and not ctx.plan.dry_run:
        raise KitError("no CUDA device (torch.cuda.is_available() is False); run with --dry-run on a CPU machine")


# -------------------------------------------------------------------------- 2. throughput

def predicted_throughput(plan: KitPlan, run: RunSpec, gpu: str | None) -> dict[str, Any]:
    """helper's tokens/s/GPU and MFU for ``run`` (its own padding-efficiency estimate)."""
    if gpu is None:
        return {"error": "this GPU is not in helper's table: no prediction rather than a wrong one"}
    from helper import estimate_padding_efficiency, predict_throughput

    mb = run.params["micro_batch"]
    try:
        pad = estimate_padding_efficiency(run.params["padding"], seq_len=plan.seq_len, micro_batch=mb)
        p = predict_throughput(plan.preset, 1, gpu=gpu, seq_len=plan.seq_len, micro_batch=mb,
                               activation_checkpointing=run.params["activation_checkpointing"],
                               num_workers=plan.num_workers, prefetch_factor=2 if plan.num_workers else None,
                               padding_efficiency=pad, attention=run.attention)
    except Exception as exc:  # noqa: BLE001 - a prediction that fails is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"}
    d = p.details
    return {"tokens_per_sec_per_gpu": float(p), "mfu": d.get("mfu"), "step_time_s": d.get("step_time_s"),
            "padding_efficiency": pad, "fits_in_memory": d.get("fits_in_memory"), "gpu": gpu, "source": p.source}


def check_throughput(ctx: Context) -> None:
    """Each throughput config as a cold trial: tokens/s/GPU, MFU, peak memory, with helper's prediction."""
    plan, rows, walls = ctx.plan, [], []
    for run in plan.throughput_runs:
        estimate_s = statistics.median(walls) if walls else plan.first_trial_estimate_s
        if ctx.left_s() < estimate_s + START_MARGIN_S:
            rows.append({"name": run.name, "params": run.params, "attention": run.attention, "status": "skipped",
                         "error": {"kind": "skipped", "message": f"time box: {ctx.left_s():.0f} s left, "
                                   f"a trial takes ~{estimate_s:.0f} s"}})
        else:
            doc = trial_document(plan, run, cache_dir=ctx.cache_dir)
            rec = run_cold(doc, ctx.folder("throughput", run.name),
                           timeout_s=min(plan.trial_timeout_s, ctx.left_s()))
            walls.append(rec["wall_s"])
            rows.append(throughput_row(run, rec, predicted_throughput(plan, run, ctx.helper_gpu())))
        ctx.rec.set("rows", rows)


# ------------------------------------------------------------------ 3. memory predictions

def check_memory(ctx: Context) -> None:
    """helper's estimate_memory, analytic then trace, for every throughput config (host CPU only).

    Predictions only: bench/gpu_check.py joins them with check 2's measurements."""
    from helper import estimate_memory, get_gpu

    os.environ.setdefault("OMP_NUM_THREADS", "2")  # beside GPU trials: leave their host cores alone
    plan = ctx.plan
    gpu = ctx.helper_gpu() or plan.gpu_fallback
    ctx.rec.result.update(gpu_for_model=gpu, framework_overhead_gb=get_gpu(gpu).framework_overhead_gb)
    preds: dict[str, dict[str, Any]] = {}
    traced: dict[tuple, dict[str, Any]] = {}
    for method in ("analytic", "trace"):
        for run in plan.throughput_runs:
            mb, ac = run.params["micro_batch"], run.params["activation_checkpointing"]
            key = (mb, ac, run.attention)  # padding does not change the shapes: one trace per key
            if method == "trace" and key in traced:
                preds[run.name]["trace"] = traced[key]
                continue
            t0 = time.perf_counter()
            try:
                est = estimate_memory(plan.preset, 1, sharding="zero3", micro_batch=mb, seq_len=plan.seq_len,
                                      activation_checkpointing=ac, attention=run.attention, gpu=gpu, method=method)
                entry: dict[str, Any] = {k: float(v) for k, v in est.items()}
            except Exception as exc:  # noqa: BLE001 - one failed estimate is a row, not the end
                entry = {"error": f"{type(exc).__name__}: {exc}"}
            entry["seconds"] = time.perf_counter() - t0
            preds.setdefault(run.name, {})[method] = entry
            if method == "trace":
                traced[key] = entry
            ctx.rec.set("predictions", preds)


# ---------------------------------------------------------------------- 4. warm switches

def check_warm_switches(ctx: Context) -> None:
    """One resident worker through every reconfiguration level; each switch against a cold start."""
    from helper import estimate_startup_seconds

    plan, runs = ctx.plan, ctx.plan.switch_runs
    gpu = ctx.helper_gpu()
    if gpu is not None:
        ctx.rec.result["predicted_cold_startup_s"] = float(estimate_startup_seconds(plan.preset, 1, gpu=gpu))
    docs = [trial_document(plan, run, cache_dir=ctx.cache_dir, trial_number=100 + i) for i, run in enumerate(runs)]
    expected = ["process"] + [knobs.reconfiguration(a.params, b.params) for a, b in zip(runs, runs[1:])]
    measured = (read_json(ctx.out / "checks" / "throughput.json") or {}).get("result", {}).get("rows", [])
    cold: dict[str, dict[str, Any]] = {}
    records: list[dict[str, Any]] = []

    def publish(*_: Any) -> None:
        rows = [switch_row(runs[i], runs[i - 1] if i else None, rec, expected[i],
                           cold_reference(runs[i].name, measured, cold))
                for i, rec in enumerate(records)]
        rows += [{"job": i, "to": runs[i].name, "level": expected[i], "status": "not reached"}
                 for i in range(len(records), len(runs))]
        ctx.rec.set("switches", rows)

    run_resident(docs, ctx.folder("warm_switches", "worker"), deadline_unix=ctx.deadline_unix,
                 on_job=lambda job, rec: (records.append(rec), publish()))
    # Cold starts of the targets check 2 did not measure (the communicators target, at least).
    missing = [r for r in runs[1:] if not any(m.get("name") == r.name and m.get("status") == "ok" for m in measured)]
    missing.sort(key=lambda r: r.params.get("nccl_algo", "default") == "default")  # NCCL targets first
    for run in missing[:plan.max_cold_twins]:
        walls = [r["wall_s"] for r in records[:1]] or [plan.first_trial_estimate_s]
        if ctx.left_s() < max(walls) + START_MARGIN_S:
            break
        doc = trial_document(plan, run, cache_dir=ctx.cache_dir, trial_number=200)
        cold[run.name] = run_cold(doc, ctx.folder("warm_switches", "cold " + run.name),
                                  timeout_s=min(plan.trial_timeout_s, ctx.left_s()))
        publish()
    publish()


# ------------------------------------------------------------------------- 5. checkpoints

def check_checkpoint(ctx: Context) -> None:
    """DCP: a sync save, then a run that loads it and saves async; helper's checkpoint_plan beside."""
    from helper import checkpoint_plan

    plan, run = ctx.plan, ctx.plan.checkpoint_run
    folder = ctx.scratch / "checkpoints"
    shutil.rmtree(folder, ignore_errors=True)
    every = plan.checkpoint_every
    try:
        runs = {}
        for mode, steps in (("sync", every), ("async", 2 * every)):  # async resumes at `every`, saves at 2x
            trial = {"warmup_steps": 1, "checkpoint_every": every, "checkpoint_mode": mode,
                     "checkpoint_dir": str(folder)}
            doc = trial_document(plan, run, cache_dir=ctx.cache_dir, measure_steps=steps, trial=trial)
            rec = run_cold(doc, ctx.folder("checkpoint", mode), timeout_s=min(plan.trial_timeout_s, ctx.left_s()))
            runs[mode] = rec
            ctx.rec.set("runs", {m: {k: r[k] for k in ("status", "wall_s", "error", "log")} for m, r in runs.items()})
            if rec["status"] != "ok":
                break
        sync = ((runs.get("sync") or {}).get("summary") or {})
        later = runs.get("async") or {}
        asyn, resume = later.get("summary") or {}, later.get("resume") or {}
        s_ck, a_ck = sync.get("checkpoint") or {}, asyn.get("checkpoint") or {}
        n_params = sync.get("n_params") or asyn.get("n_params")
        pred = (checkpoint_plan(n_params, gpu_count=1, nodes=1, step_time_s=sync.get("step_time_s") or 1.0)
                if n_params else {})
        size_gb = (s_ck.get("bytes") or a_ck.get("bytes") or 0) / 1e9 or None
        ctx.rec.result.update({
            "n_params": n_params, "bytes": s_ck.get("bytes") or a_ck.get("bytes"),
            "sync_save_blocking_s": s_ck.get("blocking_s_mean"), "sync_saves": s_ck.get("saves"),
            "async_save_blocking_s": a_ck.get("blocking_s_mean"), "async_save_background_s": a_ck.get("background_s_mean"),
            "async_saves": a_ck.get("saves"), "load_s": resume.get("reload_s"),
            "loaded_step": resume.get("step"), "step_time_s": sync.get("step_time_s"),
            "measured_write_gbs": size_gb / s_ck["blocking_s_mean"] if size_gb and s_ck.get("blocking_s_mean") else None,
            "predicted": {k: pred.get(k) for k in ("size_gb", "write_s", "stall_s", "reload_s")},
            "predicted_assumes": "helper.checkpoint_plan defaults: 2 GB/s storage per node, 10 GB/s GPU-to-host "
                                 "staging; the folder is the kit's scratch (local disk, page cache included)"})
        ctx.rec.write("running")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- 6. NCCL

ONE_RANK_NOTE = ("one rank: NCCL runs a one-rank collective as a local copy and never reads NCCL_ALGO or "
                 "NCCL_PROTO (NCCL 2.28.9 on one H100, 2026-11-27: no 'set by environment' line, an unknown "
                 "NCCL_ALGO accepted); that NCCL reads them needs two GPUs")
"""What the check says when NCCL left the variables unread: a fact of one GPU, not a failure."""


def check_nccl(ctx: Context) -> None:
    """The trial's environment shows NCCL_ALGO / NCCL_PROTO as set (and NCCL read them, with
    NCCL_DEBUG=INFO); an NCCL_ALGO that NCCL refuses comes back as the trial's error line.
    The two trials run at once (a small model; neither measures speed)."""
    plan = ctx.plan
    algo, proto = plan.nccl_ok
    gloo = plan.backend != "nccl"
    base = plan.checkpoint_run.params
    ok_run = RunSpec({**base, "nccl_algo": algo, "nccl_proto": proto})
    bad_run = RunSpec({**base, "nccl_algo": plan.nccl_rejected_algo})
    one_step = {"cache_dir": ctx.cache_dir, "preset": plan.small_preset, "measure_steps": 1, "trial": {"warmup_steps": 0}}
    ok = bad = None
    try:
        ok = start_cold(trial_document(plan, ok_run, **one_step), ctx.folder("nccl", "env"),
                        extra_env={"NCCL_DEBUG": "INFO"})
        # gloo has no NCCL to refuse anything: the dry run asks for the nccl backend on a machine
        # without CUDA, which the trial refuses with its own error line (the same path to the report).
        bad = start_cold(trial_document(plan, bad_run, backend="nccl", **one_step), ctx.folder("nccl", "rejected"),
                         extra_env={"NCCL_DEBUG": "WARN"})
        rec = finish_cold(ok, timeout_s=min(plan.trial_timeout_s, ctx.left_s()))
        bad_rec = finish_cold(bad, timeout_s=min(plan.trial_timeout_s, ctx.left_s()))
    finally:
        stop_cold(ok)
        stop_cold(bad)
    log = Path(rec["log"]).read_text(errors="replace") if Path(rec["log"]).exists() else ""
    said = [ln.strip() for ln in log.splitlines() if "set by environment to" in ln and "NCCL_" in ln]
    version = next((ln.strip() for ln in log.splitlines() if "NCCL version" in ln), None)
    in_trial = ((rec["summary"] or {}).get("nccl_env")) or {}
    requested = {"NCCL_ALGO": algo, "NCCL_PROTO": proto}
    ctx.rec.set("env", {
        "status": rec["status"], "error": rec["error"], "requested": requested, "in_trial": in_trial,
        "as_set": all(in_trial.get(k) == v for k, v in requested.items()), "nccl_debug": "INFO",
        "nccl_log_lines": said[:4], "nccl_version_line": version,
        "read_by_nccl": None if gloo else all(any(f"{k} set by environment to {v}" in ln for ln in said)
                                              for k, v in requested.items()),
        "note": "gloo: NCCL is never loaded; only the trial's environment is checked" if gloo else
                (ONE_RANK_NOTE if not said else None)})
    rec = bad_rec
    message = (rec["error"] or {}).get("message") or ""
    ctx.rec.set("rejected", {
        "nccl_algo": plan.nccl_rejected_algo, "status": rec["status"], "error": rec["error"],
        "reported_as_trial_error": rec["status"] == "error" and rec["error_line"],  # the protocol's error line
        "names_the_value": plan.nccl_rejected_algo in message,
        "note": ONE_RANK_NOTE if not gloo and rec["status"] == "ok" else None,
        "emulated": ("gloo: no NCCL to refuse NCCL_ALGO; the trial was asked for backend nccl without CUDA "
                     "and reported its own error line instead") if gloo else None})


CHECK_FUNCTIONS: dict[str, Callable[[Context], None]] = {
    "device": check_device, "throughput": check_throughput, "memory": check_memory,
    "warm_switches": check_warm_switches, "checkpoint": check_checkpoint, "nccl": check_nccl}
