"""Chaos bench: many coordinators on one study, random faults, every invariant checked (issue 34).

N coordinators (each a process running ``run_study``, as each `tuner run` is) share one study on
a PostgreSQL server of the bench's own (initdb in a temporary folder, its own port: the shared
server is never touched). For ``--duration-s`` a seeded schedule injects faults:

- ``kill_coordinator``: kill -9 of a coordinator (one running a trial, where one is), which a
  supervisor restarts a moment later (longer after an exit: a start during an outage fails);
- ``kill_trial``: kill -9 of a running trial's process (its job);
- ``outage``: the server stopped (clients get "connection refused") for up to ``--outage-max-s``;
- ``freeze``: a coordinator (one running a trial, where one is) SIGSTOPped for 1.5x the grace
  period, then SIGCONTed;
- ``exhaust``: every free connection of the server held (``max_connections``), old ones working;
- ``spool_full``: the spool's file system (a small tmpfs) filled for a while.

Sim trials (``--launcher sim``) take the performance model's result but run for seconds as a
real process (``sleep``), charged GPUs x wall time, like a real launcher; ``--launcher local``
runs real CPU trials (studies/quickstart.toml). When the schedule ends, the faults are undone,
killed coordinators are restarted once more, and every coordinator runs to the budget's end.
Then the invariants are checked on the study (``check_invariants``): no trial RUNNING or
WAITING; no finished result lost (spool empty, every result a coordinator received recorded
once, except one whose coordinator was killed while the spool's disk was full: reported apart,
its trial `lost` and retried); GPU-seconds charged once per run; spend within the budget plus one trial; no live
trial failed by a peer; every FAIL with a status and a message; each config's retries
bounded. It prints one table row per seeded run.

    python -m bench.chaos --coordinators 16 --duration-s 600 --seeds 0,1,2,3,4
    python -m bench.chaos --coordinators 4 --launcher local --duration-s 600 --seeds 0
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import glob
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.local_services import free_port, postgres_bindir

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD, DB = "chaos", "chaos", "chaos"
FAULTS = ("kill_coordinator", "kill_trial", "outage", "freeze", "exhaust", "spool_full")


# ------------------------------------------------------------------ a private server

def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd  # initdb refuses root


@dataclass
class Server:
    """A throwaway PostgreSQL server (tests/pg.py starts its private servers the same way)."""

    base: Path
    port: int
    max_connections: int
    bindir: Path | None = field(default_factory=postgres_bindir)  # None: main() refuses to start

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DB}"

    def _ctl(self, *args: str) -> None:
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.base / "data"),
                                     "-l", str(self.base / "server.log"), "-w", *args]),
                       check=True, timeout=120, capture_output=True)

    def init(self) -> None:
        (self.base / "pw").write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres", "postgres")
            shutil.chown(self.base / "pw", "postgres", "postgres")
        subprocess.run(_as_postgres([str(self.bindir / "initdb"), "-D", str(self.base / "data"), "-U", USER,
                                     f"--pwfile={self.base / 'pw'}", "--auth-local=trust",
                                     "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"]),
                       check=True, timeout=120, capture_output=True)
        self.start()
        conn = self.connect("postgres")
        conn.cursor().execute(f'CREATE DATABASE "{DB}"')
        conn.close()

    def start(self) -> None:
        # superuser_reserved_connections 0: the coordinators (superusers here) meet the same
        # wall as an ordinary role does on a real server
        self._ctl("start", "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.base} "
                                 f"-c fsync=off -c max_connections={self.max_connections} "
                                 "-c superuser_reserved_connections=0")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(Exception):
            self._ctl("stop", "-m", mode)

    def connect(self, db: str = DB):
        import psycopg2
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, dbname=db,
                                connect_timeout=3)
        conn.autocommit = True
        return conn


# ------------------------------------------------------------------ the coordinator process

def _sim_launcher(spec, wall_s: float, log_dir: Path):
    """The sim launcher's result, run for seconds as a real process (the 'trial process' a
    fault kills), charged GPUs x wall time as a real launcher is; every run logged."""
    import ctypes

    from tuner.launch import TrialResult
    from tuner.sim import SimLauncher

    class SlowSim(SimLauncher):
        name = "sim"

        def launch(self, request):
            # the sim's verdict (ok, oom, a refused collective) without its own clock: this run's
            # cap is checked against the wall time below (the sim's 7B trial takes minutes)
            result = super().launch(dataclasses.replace(request, max_gpu_seconds=None))
            gpus = result.world_size or spec.cluster.world_size
            wall = wall_s * random.Random(request.number).uniform(0.5, 1.5)
            if result.status in ("oom", "error"):
                wall = min(wall, 1.0)  # fails fast, as on the cluster
            limit = (request.max_gpu_seconds or float("inf")) / gpus
            t0, start = time.monotonic(), time.time()
            proc = subprocess.Popen(["sleep", f"{min(wall, limit):.3f}"], start_new_session=True,
                                    preexec_fn=lambda: ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL))
            _log(log_dir, {"event": "start", "number": request.number, "pid": os.getpid(), "job": proc.pid,
                           "t": start})
            try:
                while proc.poll() is None:
                    time.sleep(0.05)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                _log(log_dir, {"event": "end", "number": request.number, "pid": os.getpid(), "t": time.time(),
                               "stopped": True})
                raise
            ran = time.monotonic() - t0
            _log(log_dir, {"event": "end", "number": request.number, "pid": os.getpid(), "t": time.time()})
            common = {"launcher": "sim", "world_size": gpus, "gpu_seconds": gpus * ran, "wall_seconds": ran}
            if proc.returncode != 0:
                return TrialResult(status="error", message=f"trial process died (signal {-proc.returncode})", **common)
            if wall > limit:
                return TrialResult(status="timeout", message="stopped at its GPU-second cap", **common)
            return dataclasses.replace(result, **common)

    return SlowSim(spec)


def _logged_local(spec, log_dir: Path):
    """The local launcher (real CPU trials under torchrun), each run's start and end logged."""
    from tuner.launch import get_launcher

    class Logged(type(get_launcher(spec))):
        def launch(self, request):
            _log(log_dir, {"event": "start", "number": request.number, "pid": os.getpid(), "t": time.time()})
            stopped = True
            try:
                result = super().launch(request)
                stopped = False
                return result
            finally:
                _log(log_dir, {"event": "end", "number": request.number, "pid": os.getpid(), "t": time.time(),
                               "stopped": stopped})

    return Logged(spec)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _log(log_dir: Path, record: dict) -> None:
    with open(log_dir / f"{os.getpid()}.jsonl", "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def coordinator(args: argparse.Namespace) -> int:
    """One coordinator: run_study on the shared study; every result it receives is logged
    (after the spool has it) for the 'recorded once' check."""
    from tuner import RunOptions, load_spec, run_study
    from tuner.study import Spool, outcome

    log_dir = Path(args.log_dir)
    put = Spool.put

    def logged_put(self, number, result):
        out = outcome(result)
        record = {"event": "received", "number": number, "pid": os.getpid(), "status": out.attrs.get("status"),
                  "gpu_seconds": result.gpu_seconds, "t": time.time()}
        try:
            path = put(self, number, result)
        except OSError:  # a full spool: the coordinator records it anyway
            _log(log_dir, {**record, "spooled": False})
            raise
        _log(log_dir, record)
        return path

    Spool.put = logged_put
    spec = load_spec(args.spec)
    launcher = _sim_launcher(spec, args.wall_s, log_dir) if args.launcher == "sim" else _logged_local(spec, log_dir)
    summary = run_study(spec, RunOptions(storage_url=args.url, budget_gpu_seconds=args.budget,
                                         runs_dir=Path(args.runs_dir), grace_period_s=args.grace_s,
                                         preflight=args.launcher != "sim"), launcher=launcher)
    print(json.dumps({"pid": os.getpid(), "stopped": summary.stopped, "launched": summary.launched}), flush=True)
    return 0


# ------------------------------------------------------------------ the schedule

@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    length_s: float = 0.0
    target: float = 0.0
    """Which coordinator (a fraction of the live ones, drawn with the schedule)."""


def schedule(seed: int, *, duration_s: float, kill_every_s: float, outages: int, outage_max_s: float,
             freezes: int, exhausts: int, spool_fulls: int, grace_s: float, window_s: float = 30.0) -> list[Fault]:
    """The seeded fault schedule: kills as a Poisson process (half of them of a coordinator,
    half of a trial's process), the windows at random times, outages never overlapping.

    Example:
        >>> s = schedule(0, duration_s=600, kill_every_s=10, outages=2, outage_max_s=300, freezes=1,
        ...              exhausts=1, spool_fulls=1, grace_s=24)
        >>> sorted({f.kind for f in s}) == sorted(FAULTS)
        True
    """
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.expovariate(1 / kill_every_s) if kill_every_s else duration_s
    while t < duration_s:
        faults.append(Fault(t, rng.choice(["kill_coordinator", "kill_trial"]), target=rng.random()))
        t += rng.expovariate(1 / kill_every_s)
    # outages in disjoint slots of the run, each up to outage_max_s long (and within its slot)
    slot = duration_s / max(outages, 1)
    for i in range(outages):
        length = min(rng.uniform(outage_max_s / 2, outage_max_s), slot * 0.8)
        faults.append(Fault(i * slot + rng.uniform(0, slot - length), "outage", length))
    for kind, n, length in (("freeze", freezes, 1.5 * grace_s), ("exhaust", exhausts, window_s),
                            ("spool_full", spool_fulls, window_s)):
        for _ in range(n):
            faults.append(Fault(rng.uniform(0, max(duration_s - length, 1.0)), kind, length, rng.random()))
    return sorted(faults, key=lambda f: f.at_s)


# ------------------------------------------------------------------ one run

@dataclass
class Coordinator:
    index: int
    proc: subprocess.Popen
    starts: int = 1
    counted: int = 0
    """The pid whose death was counted already."""
    restart_at: float = 0.0
    exits: int = 0
    """Exits other than a kill, in a row: the restart waits longer after each."""


class Chaos:
    """One seeded run: server, study spec, coordinators, faults, and what happened."""

    def __init__(self, args: argparse.Namespace, seed: int, base: Path) -> None:
        self.args, self.seed, self.base = args, seed, base
        self.server = Server(base / "pg", free_port(), max_connections=args.max_connections)
        self.runs_dir = base / "runs"
        self.log_dir = base / "log"
        self.injected: collections.Counter[str] = collections.Counter()
        self.frozen: list[tuple[int, float, float]] = []  # (pid, from, to): a frozen coordinator is not live
        self.killed: list[tuple[int, float]] = []
        self.exits: collections.Counter[str] = collections.Counter()
        self.coordinators: list[Coordinator] = []
        self.held: list = []  # connections held by an exhaust window

    # -- setup
    def setup(self) -> None:
        os.chmod(self.base, 0o755)  # the server runs as `postgres` in a folder below it
        (self.base / "pg").mkdir(parents=True)
        self.log_dir.mkdir()
        self.server.init()
        self.spec_path, self.budget, self.study_name = self._spec()
        spool_root = self.runs_dir / self.study_name / "spool"
        spool_root.mkdir(parents=True)
        self.spool_root = spool_root
        # the spool on a small file system of its own, which the spool_full fault fills
        self.tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(spool_root)],
                                    capture_output=True).returncode == 0

    def _spec(self) -> tuple[Path, float, str]:
        a = self.args
        if a.launcher == "sim":
            text = (ROOT / "studies" / "llama7b-h100x32.toml").read_text()
            text = text.replace('name = "llama7b-h100x32"', 'name = "chaos"').replace('launcher = "slurm"',
                                                                                       'launcher = "sim"')
            text = re.sub(r"estimate_gpu_seconds = \d+", f"estimate_gpu_seconds = {32 * a.wall_s:.0f}", text)
            text = text.replace('sampler = "auto"', 'sampler = "random"')  # reliability, not search: spare the CPU
            # each trial is charged GPUs x its wall time, start-up included, as a cold launch is: the
            # sim's resident-worker start-up (32 x ~55 s) would otherwise be the next trial's estimate
            text = text.replace("[trial]\n", "[trial]\nresident = false\n", 1)
            # the coordinators together run about duration / wall trials each, of 32 GPUs x wall
            budget = a.coordinators * a.duration_s * 32 * a.budget_fill
        else:
            text = (ROOT / "studies" / "quickstart.toml").read_text().replace('name = "quickstart"',
                                                                                'name = "chaos"')
            text = text.replace("num_examples = 2000", "num_examples = 200")
            budget = a.coordinators * a.duration_s * 2 * a.budget_fill
        path = self.base / "chaos.toml"
        path.write_text(text)
        return path, budget, "chaos"

    def _start(self, index: int) -> subprocess.Popen:
        a = self.args
        cmd = [sys.executable, "-m", "bench.chaos", "coordinator", "--url", self.server.url, "--spec",
               str(self.spec_path), "--budget", str(self.budget), "--runs-dir", str(self.runs_dir),
               "--grace-s", str(a.grace_s), "--wall-s", str(a.wall_s), "--launcher", a.launcher,
               "--log-dir", str(self.log_dir)]
        out = open(self.base / f"coordinator-{index}.log", "ab")  # noqa: SIM115 - the child keeps it
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    # -- faults
    def _live(self) -> list[Coordinator]:
        return [c for c in self.coordinators if c.proc.poll() is None]

    def _pick(self, target: float) -> Coordinator | None:
        """A live coordinator, one running a trial where there is one (the moment that matters)."""
        live = self._live()
        busy = [c for c in live if self._children(c.proc.pid)]
        pool = busy or live
        return pool[int(target * len(pool)) % len(pool)] if pool else None

    def _children(self, pid: int) -> list[int]:
        found = []
        for path in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(path).read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(path.split("/")[2]))
        return found

    def inject(self, fault: Fault, undo: list) -> bool | None:
        """Apply ``fault`` now (its undo queued in ``undo``); False when it must wait for a target."""
        now = time.monotonic()
        if fault.kind == "kill_coordinator":
            c = self._pick(fault.target)
            if c is None or any(pid == c.proc.pid and t1 > time.time() for pid, _, t1 in self.frozen):
                return
            os.kill(c.proc.pid, signal.SIGKILL)
            self.killed.append((c.proc.pid, time.time()))
        elif fault.kind == "kill_trial":
            jobs = [j for c in self._live() for j in self._children(c.proc.pid)]
            if not jobs:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(jobs[int(fault.target * len(jobs)) % len(jobs)], signal.SIGKILL)
        elif fault.kind == "outage":
            self.server.stop()
            undo.append((now + fault.length_s, self.server.start))
        elif fault.kind == "freeze":
            c = self._pick(fault.target)
            if c is None:   # none live (an outage): freeze one once there is one, not never
                return False
            os.kill(c.proc.pid, signal.SIGSTOP)
            self.frozen.append((c.proc.pid, time.time(), time.time() + fault.length_s + 1.0))
            undo.append((now + fault.length_s, lambda pid=c.proc.pid: _signal(pid, signal.SIGCONT)))
        elif fault.kind == "exhaust":
            self.held = []
            with contextlib.suppress(Exception):
                while len(self.held) < self.server.max_connections:
                    self.held.append(self.server.connect())
            undo.append((now + fault.length_s, self._release))
        elif fault.kind == "spool_full":
            if not self.tmpfs:
                return
            ballast = self.spool_root / "ballast"
            subprocess.run(["dd", "if=/dev/zero", f"of={ballast}", "bs=64k"], capture_output=True)
            undo.append((now + fault.length_s, lambda: ballast.unlink(missing_ok=True)))
        self.injected[fault.kind] += 1
        with open(self.base / "faults.jsonl", "a") as fh:
            fh.write(json.dumps({**dataclasses.asdict(fault), "t": time.time()}) + "\n")

    def _release(self) -> None:
        for conn in self.held:
            with contextlib.suppress(Exception):
                conn.close()
        self.held = []

    def supervise(self, *, restart: bool) -> None:
        """Restart coordinators that died (killed, or gave up on the storage), as systemd would."""
        for c in self.coordinators:
            code = c.proc.poll()
            if code is None or code == 0:
                continue
            if c.counted != c.proc.pid:
                c.counted = c.proc.pid
                self.exits["killed" if code == -signal.SIGKILL else f"exit {code}"] += 1
                # systemd's RestartSec: a moment after a kill, longer after an exit (the storage
                # refused it: a start during an outage fails at once, by design)
                c.exits = 0 if code == -signal.SIGKILL else c.exits + 1
                c.restart_at = time.monotonic() + (1.0 if code == -signal.SIGKILL else min(30.0, 5.0 * 2 ** (c.exits - 1)))
            if restart and time.monotonic() >= c.restart_at:
                c.proc = self._start(c.index)
                c.starts += 1

    # -- the run
    def run(self) -> dict:
        a = self.args
        self.setup()
        faults = schedule(self.seed, duration_s=a.duration_s, kill_every_s=a.kill_every_s, outages=a.outages,
                          outage_max_s=a.outage_max_s, freezes=a.freezes, exhausts=a.exhausts,
                          spool_fulls=a.spool_fulls, grace_s=a.grace_s, window_s=a.window_s)
        self.coordinators = [Coordinator(i, self._start(i)) for i in range(a.coordinators)]
        # the schedule's clock starts with the first trial: faults hit a running study, not start-up
        t_wait = time.monotonic()
        while not any(r["event"] == "start" for r in _records(self.log_dir)) and time.monotonic() - t_wait < 300:
            time.sleep(1.0)
        t0 = time.monotonic()
        undo: list = []
        pending = list(faults)
        while time.monotonic() - t0 < a.duration_s and (self._live() or pending):
            now = time.monotonic()
            for item in [u for u in undo if u[0] <= now]:
                undo.remove(item)
                item[1]()
            while pending and pending[0].at_s <= now - t0:
                fault = pending.pop(0)
                if self.inject(fault, undo) is False:   # tried again 5 s later, in the schedule's order
                    pending.append(dataclasses.replace(fault, at_s=now - t0 + 5.0))
                    pending.sort(key=lambda f: f.at_s)
                    break
            self.supervise(restart=now - t0 < a.duration_s)
            if not self._live() and all(c.proc.returncode == 0 for c in self.coordinators):
                break  # the budget is spent: no fault can land any more
            time.sleep(0.2)
        for at, fn in sorted(undo, key=lambda u: u[0]):  # the schedule is over: each fault runs its length
            time.sleep(max(0.0, at - time.monotonic()))
            fn()
        self.supervise(restart=True)  # a last restart for the coordinators killed at the end
        deadline = time.monotonic() + a.drain_s
        while any(c.proc.poll() != 0 for c in self.coordinators) and time.monotonic() < deadline:
            time.sleep(0.5)
            self.supervise(restart=True)
        hung = [c.proc.pid for c in self._live()]
        for c in self._live():
            c.proc.kill()
        wall_s = time.monotonic() - t0
        result = check_invariants(self.server.url, self.study_name, self.budget, self.runs_dir, self.log_dir,
                                  frozen=self.frozen, killed=self.killed)
        result.update(seed=self.seed, coordinators=a.coordinators, launcher=a.launcher, wall_s=round(wall_s),
                      faults=dict(self.injected), coordinator_exits=dict(self.exits), hung=hung,
                      starts=sum(c.starts for c in self.coordinators))
        if hung:
            result["violations"].append(f"coordinators {hung} still running {a.drain_s:.0f} s after the schedule")
        return result

    def close(self) -> None:
        for c in self._live():  # an interrupted bench leaves no coordinator behind
            c.proc.kill()
        self._release()
        if getattr(self, "tmpfs", False):
            subprocess.run(["umount", "-l", str(self.spool_root)], capture_output=True)
        self.server.stop("immediate")


# ------------------------------------------------------------------ the invariants

def _records(log_dir: Path) -> list[dict]:
    out = []
    for path in sorted(log_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def check_invariants(url: str, study_name: str, limit: float, runs_dir: Path, log_dir: Path, *,
                     frozen: list[tuple[int, float, float]] = (), killed: list[tuple[int, float]] = ()) -> dict:
    """Every invariant of issue 34 on a finished study; ``violations`` lists each breach."""
    import optuna
    from optuna.trial import TrialState

    from tuner.budget import ledger_from_trials
    from tuner.stats import config_key
    from tuner.storage import open_storage

    storage = open_storage(url, heartbeat=False, create_tables=False)
    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    storage.engine.dispose()
    by_number = {t.number: t for t in trials}
    violations: list[str] = []

    # no trial left RUNNING or WAITING
    for t in trials:
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            violations.append(f"trial {t.number} left {t.state.name}")
    # no finished result lost: the spool is empty, and each received result recorded once
    left = glob.glob(str(runs_dir / study_name / "spool" / "*" / "trial-*.json"))
    violations += [f"spool file left: {p}" for p in left]
    recovered = collections.defaultdict(list)
    for t in trials:
        if "recovered_from" in t.user_attrs:
            recovered[t.user_attrs["recovered_from"]].append(t)
    records = _records(log_dir)
    # one per result: a coordinator that retries its recording tries the full spool again, logged each time
    received = list({(r["pid"], r["number"]): r for r in records if r["event"] == "received"}.values())
    ledger = {e.number: e for e in ledger_from_trials(trials, limit).entries}
    unrecordable = []
    for r in received:
        own = by_number.get(r["number"])
        mine = (own is not None and own.user_attrs.get("status") == r["status"]
                and abs(float(own.user_attrs.get("gpu_seconds", -1)) - r["gpu_seconds"]) < 1e-6)
        copies = recovered.get(r["number"], [])
        if (mine + len(copies) == 0 and r.get("spooled") is False and own is not None
                and own.user_attrs.get("status") == "lost"
                and any(pid == r["pid"] and at >= r.get("t", math.inf) for pid, at in killed)):
            # two faults at once that nothing survives: the spool's disk full, and the coordinator
            # SIGKILLed before the storage took the result (the retries of an exhausted server);
            # its trial is `lost`, charged its last beat and retried once, as a kill alone leaves it
            unrecordable.append(r["number"])
            continue
        if mine + len(copies) != 1:
            state = "absent" if own is None else (f"{own.state.name} {own.user_attrs.get('status')}: "
                                                  f"{own.user_attrs.get('message')}")
            violations.append(f"trial {r['number']}'s result recorded {mine + len(copies)} times (received: {r}; "
                              f"trial: {state})")
            continue
        # GPU-seconds charged once per run: the trial and its recovered copy together
        charged = sum(ledger[t.number].charged_gpu_seconds for t in [own, *copies] if t is not None)
        if abs(charged - r["gpu_seconds"]) > 1e-6:
            violations.append(f"trial {r['number']} ran {r['gpu_seconds']:.1f} GPU-s, charged {charged:.1f}")
    # total spend within the budget plus one trial
    used = sum(e.charged_gpu_seconds for e in ledger.values())
    biggest = max((e.charged_gpu_seconds for e in ledger.values()), default=0.0)
    if used > limit + biggest + 1e-6:
        violations.append(f"spent {used:.0f} GPU-s of {limit:.0f} (+ one trial: {biggest:.0f})")
    # no live trial failed by a peer: a `lost` trial whose job ran on past its FAIL while its
    # coordinator was neither frozen nor killed
    runs = collections.defaultdict(dict)
    for r in records:
        if r["event"] in ("start", "end"):
            runs[(r["pid"], r["number"])][r["event"]] = r
    for (pid, number), run in runs.items():
        t = by_number.get(number)
        if t is None or t.user_attrs.get("status") != "lost" or "end" not in run or t.datetime_complete is None:
            continue
        failed_at = t.datetime_complete.timestamp()
        ended = run["end"]["t"]
        excused = any(p == pid and t0 <= ended and failed_at <= t1 + 1.0 for p, t0, t1 in frozen)
        if ended > failed_at + 1.0 and not excused:
            violations.append(f"trial {number} failed as stale at {failed_at:.1f} while its job ran until "
                              f"{ended:.1f} under a live coordinator (pid {pid})")
    # every FAIL carries a status and a message
    for t in trials:
        if t.state == TrialState.FAIL and not (t.user_attrs.get("status") and t.user_attrs.get("message")):
            violations.append(f"FAIL trial {t.number} without status/message: {t.user_attrs}")
    # each config's retries bounded: a trial retried at most once, a launched retry never (a
    # recovered copy of a retry carries its retry_of, tuner.study's spool: it is not another retry)
    retried = collections.Counter(t.user_attrs["retry_of"] for t in trials
                                  if "retry_of" in t.user_attrs and "recovered_from" not in t.user_attrs)
    for number, n in retried.items():
        if n > 1:
            violations.append(f"trial {number} retried {n} times")
        first = by_number.get(number)
        if first is not None and "retry_of" in first.user_attrs and not first.user_attrs.get("never_launched"):
            violations.append(f"trial {number}, itself a retry that launched, was retried again")
    launches = collections.Counter(config_key(t.params) for t in trials if float(t.user_attrs.get("gpu_seconds") or 0) > 0
                                   and t.user_attrs.get("status") in ("lost", "interrupted"))
    statuses = collections.Counter(t.user_attrs.get("status") or t.state.name for t in trials)
    return {"trials": len(trials), "received": len(received), "statuses": dict(statuses),
            "recovered": sum(len(v) for v in recovered.values()), "used_gpu_s": round(used),
            "limit_gpu_s": round(limit), "max_interrupted_per_config": max(launches.values(), default=0),
            "killed_holding_an_unspooled_result": unrecordable, "violations": violations}


# ------------------------------------------------------------------ main

def _row(r: dict) -> str:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())) or "-"
    return (f"| {r['seed']} | {r['launcher']} | {r['coordinators']} | {r['wall_s']} | {faults} | {r['trials']} | "
            f"{r['statuses'].get('lost', 0)} / {r['statuses'].get('interrupted', 0)} / {r['recovered']} | "
            f"{r['used_gpu_s']} / {r['limit_gpu_s']} | {len(r['violations'])} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("coordinator")
    for name in ("--url", "--spec", "--runs-dir", "--log-dir"):
        c.add_argument(name, required=True)
    c.add_argument("--budget", type=float, required=True)
    c.add_argument("--grace-s", type=int, required=True)
    c.add_argument("--wall-s", type=float, default=3.0)
    c.add_argument("--launcher", default="sim")
    p.add_argument("--coordinators", type=int, default=16)
    p.add_argument("--launcher", choices=["sim", "local"], default="sim")
    p.add_argument("--duration-s", type=float, default=600)
    p.add_argument("--seeds", default="0", help="comma-separated: one run per seed")
    p.add_argument("--kill-every-s", type=float, default=10.0, help="mean seconds between kill -9s (0: none)")
    p.add_argument("--outages", type=int, default=2)
    p.add_argument("--outage-max-s", type=float, default=300.0)
    p.add_argument("--freezes", type=int, default=1)
    p.add_argument("--exhausts", type=int, default=1)
    p.add_argument("--spool-fulls", type=int, default=1)
    p.add_argument("--window-s", type=float, default=30.0, help="length of the exhaust and spool_full windows")
    p.add_argument("--grace-s", type=int, default=24, help="the coordinators' --grace-period")
    p.add_argument("--wall-s", type=float, default=3.0, help="a sim trial's mean wall time")
    p.add_argument("--budget-fill", type=float, default=0.5,
                   help="budget = coordinators x duration x GPUs x this (sized to end about with the schedule)")
    p.add_argument("--max-connections", type=int, default=100)
    p.add_argument("--drain-s", type=float, default=900.0, help="how long coordinators may take to finish after")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = p.parse_args(argv)
    if args.command == "coordinator":
        return coordinator(args)
    if postgres_bindir() is None:
        p.error("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: the bench starts a server of "
                "its own (apt-get install postgresql)")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill <pid>: clean up as Ctrl-C does
    print("| seed | trials by | coordinators | wall s | faults injected | trials | lost / interrupted / recovered "
          "| GPU-s used / limit | violations |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        base = Path(tempfile.mkdtemp(prefix=f"tuner-chaos-{seed}-"))
        chaos = Chaos(args, seed, base)
        try:
            r = chaos.run()
        finally:
            chaos.close()
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
        results.append(r)
        print(_row(r), flush=True)
        for v in r["violations"][:20]:
            print(f"  violation: {v}", flush=True)
        for number in r["killed_holding_an_unspooled_result"]:
            print(f"  not a violation: trial {number}'s result died with its coordinator, killed while the spool "
                  "was full (the trial is lost, charged and retried)", flush=True)
        if args.json:  # after each seed: a long series keeps what it measured
            Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
