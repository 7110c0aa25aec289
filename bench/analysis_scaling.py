"""How `tuner analyze` and `tuner report` scale with a study's trials: 100, 1,000, 10,000.

Each size is a finished study in a SQLite file, built once (and kept under ``--cache``): the
7B space of studies/llama7b-h100x32.toml, a baseline first, then search trials on random
configs (8 measured steps each, AR(1) step noise, a few percent of them out of memory), then
the ablation round tuner's coordinator would enqueue (tuner.study.plan_ablation_once),
re-measured. What is timed is the command a user runs, in a fresh process:
``tuner analyze --storage sqlite:///... --study-name ... --out DIR`` and then ``tuner report``.

    python bench/analysis_scaling.py                                  # 100, 1000, 10000
    python bench/analysis_scaling.py --sizes 100,1000 --compare /path/to/other/checkout

``--compare DIR`` times DIR's tuner on the same study files, side by side: the same command
with DIR first on PYTHONPATH. Wall seconds on a shared machine wander; the table also gives
each command's CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "studies" / "llama7b-h100x32.toml"
STEPS = 8


def _truth(params: dict, rng_effects: dict) -> float:
    """A config's tokens/s/GPU: a product of per-level effects (fixed per study)."""
    value = 9000.0
    for knob, level in params.items():
        value *= rng_effects.get((knob, str(level)), 1.0)
    return value


def build(path: Path, n_trials: int, *, seed: int = 0) -> str:
    """A finished tuner study of ``n_trials`` trials in ``path``; returns its name."""
    sys.path.insert(0, str(ROOT))
    from tuner import load_spec
    from tuner.storage import rdb_storage
    from tuner.study import open_study, plan_ablation_once

    spec = load_spec(SPEC).with_launcher("sim")
    url = f"sqlite:///{path}"
    study, limit = open_study(spec, storage_url=url, budget_gpu_seconds=144_000.0)
    rng = np.random.default_rng(seed)
    effects = {(k.name, str(v)): float(np.exp(rng.normal(0.0, 0.05))) for k in spec.space for v in k.choices}
    effects[("padding", "packed")] = 6.0
    dists = {k.name: CategoricalDistribution(k.choices) for k in spec.space}

    def trial(params: dict, attrs: dict) -> optuna.trial.FrozenTrial:
        params = {k: v for k, v in params.items() if k != "prefetch_factor" or params.get("num_workers", 0) > 0}
        d = {k: dists[k] for k in params}
        if rng.random() < 0.04 and not attrs.get("role"):
            return optuna.trial.create_trial(params=params, distributions=d, value=0.0,
                                             user_attrs={**attrs, "status": "oom", "gpu_seconds": 300.0},
                                             system_attrs={"constraints:failed": 1.0})
        mean = _truth(params, effects) * float(np.exp(rng.normal(0.0, 0.01)))
        e, steps = 0.0, []
        for _ in range(STEPS):
            e = 0.6 * e + 0.8 * rng.normal(0.0, 0.03)
            steps.append(mean * float(np.exp(e)))
        return optuna.trial.create_trial(
            params=params, distributions=d, value=float(np.mean(steps)), intermediate_values=dict(enumerate(steps)),
            user_attrs={**attrs, "status": "ok", "gpu_seconds": 600.0, "world_size": 32, "startup_seconds": 18.0,
                        "peak_mem_gib": 60.0, "mfu": 0.4, "step_seconds": [1.0] * STEPS},
            system_attrs={"constraints:failed": 0.0})

    def run_queued() -> None:  # the queued runs (the baseline, the ablation round), as a coordinator runs them
        while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            asked = study.ask()
            done = trial(asked.params, dict(asked.user_attrs))
            for key, value in done.user_attrs.items():
                asked.set_user_attr(key, value)
            for step, value in done.intermediate_values.items():
                asked.report(value, step)
            study.tell(asked, done.value)

    run_queued()
    configs = [{k.name: k.choices[rng.integers(len(k.choices))] for k in spec.space} for _ in range(n_trials - 1)]
    for i in range(0, len(configs), 500):
        study.add_trials([trial(p, {}) for p in configs[i:i + 500]])
    plan_ablation_once(study, spec, study.get_trials(deepcopy=False), limit_gpu_seconds=limit)
    run_queued()
    rdb_storage(study).engine.dispose()  # the last connection checkpoints SQLite's write-ahead log
    return study.study_name


def timed(cmd: list[str], code: str | None) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of ``cmd`` in a fresh process, with ``code`` first on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (code or str(ROOT), os.environ.get("PYTHONPATH")) if p))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # run from the checkout's folder: `python -m` puts the working directory ahead of PYTHONPATH,
    # so from another checkout's folder its tuner would be timed instead
    out = subprocess.run(cmd, env=env, cwd=code or str(ROOT), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        print(out.stderr[-1500:], file=sys.stderr)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="trials per study, comma-separated")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tuner-analysis-scaling",
                        help="folder for the built studies (reused across runs)")
    parser.add_argument("--compare", metavar="DIR", help="another checkout of tuner, timed on the same studies")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    codes = ([("compare", args.compare)] if args.compare else []) + [("this", None)]
    print(f"# load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; seconds are wall / CPU")
    print("| trials | code | analyze s | report s |")
    print("| ---: | --- | ---: | ---: |")
    for n in (int(s) for s in args.sizes.split(",")):
        db = args.cache / f"study-{n}.db"
        if not db.exists():  # built beside, then renamed: an interrupted build is never reused
            t0 = time.perf_counter()
            partial = db.with_suffix(".partial.db")
            partial.unlink(missing_ok=True)
            build(partial, n)
            partial.rename(db)
            print(f"# built {n} trials in {time.perf_counter() - t0:.0f} s: {db}", file=sys.stderr)
        name = "llama7b-h100x32"
        for _, code in codes:
            out = Path(tempfile.mkdtemp())
            common = ["--storage", f"sqlite:///{db}", "--study-name", name, "--out", str(out)]
            a = timed([sys.executable, "-m", "tuner.cli", "analyze", *common], code)
            r = timed([sys.executable, "-m", "tuner.cli", "report", *common], code)
            name_of = Path(code).name if code else "this checkout"
            fail = " (failed)" if a[2] or r[2] else ""
            print(f"| {n:,} | {name_of} | {a[0]:.1f} / {a[1]:.1f} | {r[0]:.1f} / {r[1]:.1f}{fail} |", flush=True)


if __name__ == "__main__":
    main()
