"""Coordinator bookkeeping overhead per trial on one PostgreSQL study, by concurrent workers.

Each worker is a process with its own storage (as each `tuner run` is) running `run_study`
with a zero-cost in-process launcher, so what is timed is tuner's own work per trial: the
stale-trial check and admission under the advisory lock (ledger read, ask, reserve), the
heartbeat, and the tell (intermediate values, user attrs, state), plus the progress
read-outs. A worker's first trial also pays for joining the study; it is reported apart
("join"). Every run gets a fresh database; the table is markdown.

The admission lock is timed wherever tuner takes it: every module's reference to
``tuner.storage``'s ``admission_lock`` is replaced by a timed one, so the same bench measures any
checkout. ``--compare DIR`` runs each worker count on DIR's code (another checkout of tuner, e.g.
the last release) and on this one, side by side in one run.

    python bench/storage_scaling.py --url postgresql+psycopg2://postgres@127.0.0.1:5432/postgres
    python bench/storage_scaling.py --workers 1,16 --trials-per-worker 40,5 --compare /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import optuna
import sqlalchemy
from optuna.trial import TrialState

# which checkout's tuner is measured: this one, or --code DIR's (set before tuner is imported)
_CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv else str(Path(__file__).resolve().parents[1])
sys.path.insert(0, _CODE)

from tuner import RunOptions, load_spec, run_study  # noqa: E402  (names every checkout has)
from tuner.budget import ledger_from_trials  # noqa: E402
from tuner.launch import Launcher, TrialResult  # noqa: E402

TRIAL_GPU_SECONDS = 10.0

SPEC = """
[study]
name = "bench"
sampler = "auto"
ablation_share = 0.0
[model]
preset = "tiny"
seq_len = 64
[cluster]
gpus_per_node = 8
[trial]
estimate_gpu_seconds = 10
[space]
micro_batch = [1, 2, 4, 8]
grad_accum = [1, 2, 4]
num_workers = [0, 2, 4]
prefetch_factor = [2, 4]
nccl_proto = ["default", "Simple", "LL128"]
"""


class FreeLauncher(Launcher):
    """Costs no time: returns a fixed result so only the bookkeeping is timed."""

    name = "bench"

    def launch(self, request):
        return TrialResult(status="ok", launcher="bench", world_size=8, gpu_seconds=TRIAL_GPU_SECONDS,
                           wall_seconds=0.0, step_values=tuple((s, 1000.0 + s) for s in range(8)))


def _time_admission_lock(taken: list[tuple[float, float]]) -> None:
    """Replace every loaded module's reference to the real admission lock with one that records
    (seconds waited for it, seconds held) into ``taken``."""
    import tuner.storage

    real = tuner.storage.admission_lock

    @contextlib.contextmanager
    def timed(storage, name):
        t0 = time.perf_counter()
        with real(storage, name) as held:
            t1 = time.perf_counter()
            try:
                yield held
            finally:
                taken.append((t1 - t0, time.perf_counter() - t1))

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("tuner") and getattr(module, "admission_lock", None) is real:
            module.admission_lock = timed


def worker(url: str, spec_path: str, budget: float, out: mp.Queue) -> None:
    spec = load_spec(spec_path)
    times: list[float] = []
    errors: list[str] = []
    last = [time.perf_counter()]

    def on_event(event):
        if event.kind == "end":
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

    taken: list[tuple[float, float]] = []
    _time_admission_lock(taken)  # every admission lock this worker takes
    try:
        run_study(spec, RunOptions(storage_url=url, budget_gpu_seconds=budget, ablation=False,
                                   runs_dir=Path(tempfile.gettempdir()) / "bench-runs"),
                  on_event=on_event, launcher=FreeLauncher(spec))
    except Exception as exc:  # noqa: BLE001 - counted, reported
        errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    waits, holds = [w for w, _ in taken], [h for _, h in taken]
    # the first lock is open_study's (joining), the first loop sample includes the join
    out.put({"join": times[:1], "loop": times[1:], "wait": waits[1:], "hold": holds[1:], "errors": errors})


def _watch_connections(admin: sqlalchemy.engine.Engine, db: str, stop: threading.Event, peak: list[int]) -> None:
    with admin.connect() as conn:
        while not stop.wait(0.2):
            n = conn.execute(sqlalchemy.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d"),
                             {"d": db}).scalar()
            peak[0] = max(peak[0], n)


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, round(q * (len(values) - 1)))]


def run(base_url: str, workers: int, trials_per_worker: int, spec_path: str) -> dict:
    db = f"bench_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sqlalchemy.text(f'CREATE DATABASE "{db}"'))
    url = base_url.rsplit("/", 1)[0] + f"/{db}"
    budget = workers * trials_per_worker * TRIAL_GPU_SECONDS
    q: mp.Queue = mp.get_context("fork").Queue()
    stop, peak = threading.Event(), [0]
    watcher = threading.Thread(target=_watch_connections, args=(admin, db, stop, peak), daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    procs = [mp.get_context("fork").Process(target=worker, args=(url, spec_path, budget, q)) for _ in range(workers)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    stop.set()
    watcher.join()
    loop = [t for r in results for t in r["loop"]]
    storage = optuna.storages.RDBStorage(url)
    trials = optuna.load_study(study_name="bench", storage=storage).get_trials()
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    used = ledger_from_trials(trials, budget).used_gpu_seconds
    storage.engine.dispose()
    with admin.connect() as c:
        c.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": db})
        c.execute(sqlalchemy.text(f'DROP DATABASE "{db}"'))
    admin.dispose()
    errors = [e for r in results for e in r["errors"]]
    for e in sorted(set(errors)):
        print(f"  worker error ({errors.count(e)}x): {e}", file=sys.stderr)
    return {"workers": workers, "done": done, "expected": int(budget / TRIAL_GPU_SECONDS),
            "lost": sum(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials),
            "p50": _p(loop, 0.5), "p95": _p(loop, 0.95),
            "wait50": _p([w for r in results for w in r["wait"]], 0.5),
            "hold50": _p([h for r in results for h in r["hold"]], 0.5),
            "join50": _p([j for r in results for j in r["join"]], 0.5),
            "errors": len(errors), "over": max(0.0, used - budget), "peak_conn": peak[0],
            "rate": done / wall, "wall": wall}


def _row(label: str, r: dict) -> str:
    return (f"| {label} | {r['workers']} | {r['done']} / {r['expected']} | {r['lost']} | {r['errors']} | {r['over']:.0f} "
            f"| {r['p50']:.0f} | {r['p95']:.0f} | {r['wait50']:.0f} | {r['hold50']:.0f} | {r['join50']:.0f} "
            f"| {r['peak_conn']} | {r['rate']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres",
                        help="an admin URL; each run gets its own fresh database")
    parser.add_argument("--workers", default="1,4,16,64", help="comma-separated worker counts")
    parser.add_argument("--trials-per-worker", default="40,12,5,3",
                        help="one number, or one per worker count (a modest 64-worker run)")
    parser.add_argument("--compare", metavar="DIR",
                        help="another checkout of tuner: each worker count runs on its code, then on this one's")
    parser.add_argument("--code", metavar="DIR", help="measure DIR's tuner instead of this checkout's")
    parser.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    per = [int(x) for x in args.trials_per_worker.split(",")]
    per = per * len(counts) if len(per) == 1 else per
    spec_path = Path(tempfile.mkdtemp()) / "bench.toml"
    spec_path.write_text(textwrap.dedent(SPEC))
    label = Path(_CODE).name + ("" if args.code else " (this checkout)")
    if not args.rows_only:
        engine = sqlalchemy.create_engine(args.url)
        with engine.connect() as c:
            version = c.execute(sqlalchemy.text("SHOW server_version")).scalar()
            max_conn = c.execute(sqlalchemy.text("SHOW max_connections")).scalar()
        engine.dispose()
        print(f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"Optuna {optuna.__version__}, PostgreSQL {version} (max_connections {max_conn}), "
              f"load average {os.getloadavg()[0]:.1f} at start")
        print("| code | workers | trials done / expected | lost (RUNNING/WAITING) | errors | over budget GPU-s "
              "| bookkeeping p50 ms/trial | p95 ms | lock wait p50 ms | lock held p50 ms | join p50 ms "
              "| peak connections | trials/s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, k in zip(counts, per):
        if args.compare:  # the other checkout first, in a process of its own (its own imports)
            other = subprocess.run([sys.executable, __file__, "--code", args.compare, "--url", args.url,
                                    "--workers", str(n), "--trials-per-worker", str(k), "--rows-only"],
                                   capture_output=True, text=True)
            print(other.stdout.strip() or f"| {args.compare} | {n} | failed: {other.stderr.strip()[-200:]} |",
                  flush=True)
        print(_row(label, run(args.url, n, k, str(spec_path))), flush=True)


if __name__ == "__main__":
    main()
