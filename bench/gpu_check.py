"""One command that validates tuner on a GPU in nine minutes (issue 35).

    cd REPO && PYTHONPATH=. python3 bench/gpu_check.py --out OUT       # one NVIDIA GPU, <= 9 min
    python bench/gpu_check.py --dry-run --out /tmp/gpu-check           # CPU/gloo: same code, tiny shapes
    python3 bench/gpu_check.py --out OUT --only device,throughput,checkpoint \
        --runs "mb1 packed eager,mb4 packed eager" --box checkpoint=170    # finish what a box cut short

Checks (bench/gpu_kit/checks.py), each in a process of its own with a time box
(bench/gpu_kit/plan.py); one killed at its box is recorded as ``timeout`` with what it
finished, and the others still run:

1. ``device``: GPU name and memory, driver, CUDA, torch, NCCL, transformers versions;
2. ``throughput``: ``objectives/fsdp_finetune.py`` as a cold trial under torchrun for
   micro-batch 1/2/4/8, activation checkpointing on/off, sdpa vs eager, padding vs packing:
   tokens/s/GPU, MFU, peak memory, helper's ``predict_throughput`` beside each;
3. ``memory``: helper's ``estimate_memory`` (analytic and trace) for every config of check 2,
   on the host CPU beside the GPU checks, joined with ``max_memory_allocated/reserved``;
4. ``warm_switches``: one resident worker through none / data loader / model / communicators,
   seconds to the first measured step against a cold start of the same config;
5. ``checkpoint``: DCP sync save, async save (blocking part), load, and ``checkpoint_plan``;
6. ``nccl``: NCCL_ALGO / NCCL_PROTO reach the trial (NCCL_DEBUG=INFO shows NCCL read them)
   and an NCCL_ALGO that NCCL refuses comes back as the trial's error line.

Writes, rewritten after every check (a kill leaves what was done): ``OUT/gpu_check.json``,
``OUT/gpu_check.md`` (the section for docs/validation.md); and ``OUT/checks/<check>.json``
(each check's own partial record), ``OUT/runs/`` (each trial's config, result lines, log),
``OUT/logs/<check>.log``. Checkpoints and the tokenizer cache go to ``--scratch`` (default a
temporary folder, removed at the end). Prints a table at the end. Exit status: 0 when every
check finished, 1 when one did not, 2 for bad input or no GPU without ``--dry-run``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_kit.checks import CHECK_FUNCTIONS, Context, KitError, Recorder, read_json, write_json  # noqa: E402
from bench.gpu_kit.plan import CHECKS, KitPlan, dry_run_plan, gpu_plan, plan_from_json, plan_to_json  # noqa: E402
from bench.gpu_kit.report import markdown, memory_rows, table  # noqa: E402
from bench.gpu_kit.trials import die_with_parent  # noqa: E402

SCHEMA_VERSION = 1
MIN_BOX_S = 5.0
"""A check with less time than this left in the budget is skipped, not started."""
CHECK_MARGIN_S = 3.0
"""A check's own deadline comes this long before its kill, to write its last record."""
KILL_GRACE_S = 8.0
"""SIGTERM to SIGKILL for a check past its box: time for it to stop its trials (SIGTERM, 5 s,
SIGKILL: bench/gpu_kit/trials.py); a trial it leaves gets SIGTERM from the kernel (PR_SET_PDEATHSIG)."""
POLL_S = 0.2


# ------------------------------------------------------------------ one check (a child)

def run_check(name: str, plan: KitPlan, out: Path, scratch: Path, deadline_unix: float) -> int:
    """Run check ``name`` in this process; its record goes to ``out/checks/<name>.json``."""
    rec = Recorder(out / "checks" / f"{name}.json")
    rec.write("running")
    ctx = Context(plan=plan, out=out, scratch=scratch, deadline_unix=deadline_unix, rec=rec)
    try:
        CHECK_FUNCTIONS[name](ctx)
    except KitError as exc:
        rec.write("error", str(exc))
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # noqa: BLE001 - the check's failure is its record, the kit goes on
        traceback.print_exc()
        rec.write("error", f"{type(exc).__name__}: {exc}")
        return 1
    rec.write("ok")
    return 0


# ------------------------------------------------------------------ the kit (the parent)

@dataclass
class _Job:
    name: str
    proc: subprocess.Popen
    started: float
    kill_at: float
    log: Any


class Kit:
    """Runs the checks in their time boxes and keeps gpu_check.json / .md up to date."""

    def __init__(self, plan: KitPlan, out: Path, scratch: Path, only: tuple[str, ...]) -> None:
        self.plan, self.out, self.scratch, self.only = plan, out, scratch, only
        self.started = time.time()
        self.end = self.started + plan.budget_s
        self.live: list[_Job] = []
        """Checks running now."""
        self.doc: dict[str, Any] = {
            "kit": "bench/gpu_check.py", "schema_version": SCHEMA_VERSION, "dry_run": plan.dry_run,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started)), "finished": None,
            "elapsed_s": None, "git_commit": _git_commit(), "argv": sys.argv[1:], "plan": plan.describe(),
            "checks": {n: {"status": "pending" if n in only else "not selected", "time_box_s": plan.time_boxes_s[n],
                           "seconds": None, "error": None, "result": None} for n in CHECKS}}

    # ---- files
    def write(self) -> None:
        self._join_memory()
        self.doc["elapsed_s"] = time.time() - self.started
        write_json(self.out / "gpu_check.json", self.doc)
        (self.out / "gpu_check.md").write_text(markdown(self.doc))

    def _join_memory(self) -> None:
        mem = self.doc["checks"]["memory"]
        own = read_json(self.out / "checks" / "memory.json") or {}
        if not own:
            return
        result = dict(own.get("result") or {})
        measured = ((self.doc["checks"]["throughput"].get("result") or {}).get("rows")
                    or ((read_json(self.out / "checks" / "throughput.json") or {}).get("result") or {}).get("rows") or [])
        capacity = (self.doc["checks"]["device"].get("result") or {}).get("memory_gb")
        result["rows"] = memory_rows(result.get("predictions") or {}, measured, capacity_gb=capacity,
                                     framework_overhead_gb=result.get("framework_overhead_gb") or 0.0)
        mem["result"] = result

    def say(self, text: str) -> None:
        print(f"[{time.time() - self.started:6.1f} s] {text}", flush=True)

    # ---- checks
    def start(self, name: str) -> _Job | None:
        check = self.doc["checks"][name]
        box = min(self.plan.time_boxes_s[name], self.end - time.time())
        if box < MIN_BOX_S:
            check.update(status="skipped", error=f"budget: {max(box, 0):.0f} s left of {self.plan.budget_s:.0f} s")
            self.say(f"{name}: skipped (budget spent)")
            return None
        now = time.time()
        (self.out / "checks" / f"{name}.json").unlink(missing_ok=True)
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.out / "logs" / f"{name}.log", "wb")  # noqa: SIM115 - closed in _collect
        cmd = [sys.executable, str(Path(__file__).resolve()), "--check", name, "--out", str(self.out),
               "--scratch", str(self.scratch), "--deadline-unix", f"{now + box - CHECK_MARGIN_S:.3f}",
               "--plan", str(self.out / "checks" / "plan.json")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        self.live.append(_Job(name, proc, now, now + box, log))
        check.update(status="running", time_box_s=box)
        self.say(f"{name}: started ({box:.0f} s box)")
        self.write()
        return self.live[-1]

    def poll(self, job: _Job) -> bool:
        """Collect ``job`` if it ended or its box is over; True once collected."""
        if job.proc.poll() is None and time.time() < job.kill_at:
            return False
        killed = job.proc.poll() is None
        if killed:
            try:
                os.killpg(job.proc.pid, signal.SIGTERM)
                job.proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)  # whatever of it is left
        except ProcessLookupError:
            pass
        job.proc.wait()
        job.log.close()
        self.live.remove(job)
        own = read_json(self.out / "checks" / f"{job.name}.json") or {}
        check = self.doc["checks"][job.name]
        check.update(seconds=time.time() - job.started, result=own.get("result"))
        if killed:
            check.update(status="timeout", error=f"killed at its {check['time_box_s']:.0f} s time box")
        elif job.proc.returncode == 0 and own.get("status") == "ok":
            check.update(status="ok", error=None)
        else:
            tail = (self.out / "logs" / f"{job.name}.log").read_text(errors="replace")[-400:]
            check.update(status="error", error=own.get("error") or f"exited {job.proc.returncode}: {tail}")
        self.say(f"{job.name}: {check['status']} ({check['seconds']:.1f} s)"
                 + (f": {check['error']}" if check["error"] else ""))
        self.write()
        return True

    def wait(self, job: _Job | None, beside: list[_Job]) -> None:
        """Wait for ``job``, collecting any of ``beside`` that ends meanwhile."""
        while job is not None and not self.poll(job):
            beside[:] = [b for b in beside if not self.poll(b)]
            time.sleep(POLL_S)

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(self.out / "checks" / "plan.json", plan_to_json(self.plan))
        self.write()
        try:
            return self._run()
        finally:  # stopped from outside (SIGTERM, Ctrl-C): stop the checks, keep what they wrote
            for job in list(self.live):
                job.kill_at = 0.0
                self.poll(job)
            if self.doc["finished"] is None:
                self._close()

    def _run(self) -> int:
        selected = [n for n in CHECKS if n in self.only]
        beside: list[_Job] = []
        if "device" in selected:
            self.wait(self.start("device"), beside)
            device = self.doc["checks"]["device"]
            if device["status"] == "error" and "no CUDA device" in (device["error"] or ""):
                for n in selected[1:]:
                    self.doc["checks"][n].update(status="skipped", error="no CUDA device")
                self._close()
                print(f"gpu_check: {device['error']}", file=sys.stderr)
                return 2
        if "memory" in selected:  # host CPU only: beside the GPU checks
            job = self.start("memory")
            beside += [job] if job else []
        for name in (n for n in selected if n not in ("device", "memory")):
            self.wait(self.start(name), beside)
        for job in beside:
            self.wait(job, [])
        self._close()
        print(table(self.doc))
        print(f"\n{self.out / 'gpu_check.json'}\n{self.out / 'gpu_check.md'}")
        return 0 if all(self.doc["checks"][n]["status"] == "ok" for n in selected) else 1

    def _close(self) -> None:
        self.doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        self.write()


def _git_commit() -> str | None:
    try:
        got = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return got.stdout.strip() or None if got.returncode == 0 else None


# -------------------------------------------------------------------------------- CLI

def narrowed_plan(plan: KitPlan, runs: str | None, boxes: list[str]) -> tuple[KitPlan, str | None]:
    """``plan`` with only the throughput configs named in ``runs`` and the time boxes in
    ``boxes`` (``CHECK=SECONDS``); or the problem with the input, in one line."""
    if runs is not None:
        by_name = {r.name: r for r in plan.throughput_runs}
        wanted = [n.strip() for n in runs.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in by_name]
        if unknown or not wanted:
            return plan, (f"--runs: unknown config {unknown[0]!r}; one of {', '.join(by_name)}" if unknown
                          else "--runs: no config named")
        plan = dataclasses.replace(plan, throughput_runs=tuple(by_name[n] for n in wanted))
    time_boxes = dict(plan.time_boxes_s)
    for item in boxes:
        name, _, seconds = item.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = float("nan")
        if name not in CHECKS:
            return plan, f"--box {item}: unknown check {name!r}; one of {', '.join(CHECKS)}"
        if not value > MIN_BOX_S:
            return plan, f"--box {item}: seconds must be a number above {MIN_BOX_S:.0f}"
        time_boxes[name] = value
    return dataclasses.replace(plan, time_boxes_s=time_boxes), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for gpu_check.json, gpu_check.md, runs/, logs/")
    ap.add_argument("--dry-run", action="store_true", help="CPU and gloo, tiny shapes: the code paths, no measurements")
    ap.add_argument("--scratch", type=Path, help="checkpoints and tokenizer cache (default: a temporary folder)")
    ap.add_argument("--only", help=f"comma-separated checks to run (default all: {','.join(CHECKS)})")
    ap.add_argument("--budget-s", type=float, help="wall-time budget of the whole kit (default 540; dry run 600)")
    ap.add_argument("--runs", help="comma-separated throughput configs to run, by name as the report writes them "
                                   "(e.g. 'mb1 packed eager,mb2 packed sdpa ac'; default all)")
    ap.add_argument("--box", action="append", default=[], metavar="CHECK=SECONDS",
                    help="a check's time box in seconds instead of the plan's (repeatable)")
    ap.add_argument("--check", choices=CHECKS, help=argparse.SUPPRESS)  # internal: run one check in this process
    ap.add_argument("--deadline-unix", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--plan", type=Path, help=argparse.SUPPRESS)  # the parent's plan, as JSON
    args = ap.parse_args(argv)
    plan = dry_run_plan() if args.dry_run else gpu_plan()
    problem = None
    if args.out is None:
        problem = "--out DIR is required (where gpu_check.json goes)"
    elif args.out.exists() and not args.out.is_dir():
        problem = f"--out {args.out}: exists and is not a folder"
    elif args.budget_s is not None and not args.budget_s > MIN_BOX_S:
        problem = f"--budget-s {args.budget_s}: must be more than {MIN_BOX_S:.0f} seconds"
    only = tuple(c.strip() for c in (args.only or ",".join(CHECKS)).split(",") if c.strip())
    unknown = [c for c in only if c not in CHECKS]
    if not problem and unknown:
        problem = f"--only: unknown check {unknown[0]!r}; one of {', '.join(CHECKS)}"
    if not problem:
        plan, problem = narrowed_plan(plan, args.runs, args.box)
    if problem:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2
    if args.budget_s is not None:
        plan = dataclasses.replace(plan, budget_s=args.budget_s)
    out = args.out.resolve()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the finally clauses
    if args.check:
        plan = plan_from_json(read_json(args.plan)) if args.plan else plan
        return run_check(args.check, plan, out, args.scratch.resolve(), args.deadline_unix or time.time() + 60)
    scratch = args.scratch.resolve() if args.scratch else Path(tempfile.mkdtemp(prefix="gpu_check-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        return Kit(plan, out, scratch, only).run()
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
