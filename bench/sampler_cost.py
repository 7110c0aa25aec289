"""What the model-guided sampler costs a study: a sim study run end to end, its calibration
refits counted, on this checkout and (``--compare DIR``) another, side by side.

Each study runs in a process of its own whose working directory is the checkout, so it imports
that checkout's tuner: ``run_study`` with the sim launcher and SQLite storage, sampler ``auto``,
ablation as the spec says. It prints one row per checkout and seed (trials, refits, CPU and wall
seconds, the best measured tokens/s/GPU) and the CPU ratio.

    python bench/sampler_cost.py --spec studies/sim-llama13b-h100x8.toml --budget-gpuh 8 \\
        --seeds 0,1 --compare /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import json, re, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, ".")
import optuna
import tuner.model as model
from tuner import RunOptions, load_spec, run_study
calls = [0]
fit = model.calibrated_constants
def counted(*a, **k):
    calls[0] += 1
    return fit(*a, **k)
model.calibrated_constants = counted
spec_path, budget_h, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
d = Path(tempfile.mkdtemp())
text = Path(spec_path).read_text().replace('launcher = "slurm"', 'launcher = "sim"')
text = re.sub(r"(?m)^seed = \d+", f"seed = {seed}", text) if re.search(r"(?m)^seed = ", text) else \
    text.replace("[study]\n", f"[study]\nseed = {seed}\n", 1)
(d / "s.toml").write_text(text)
spec = load_spec(d / "s.toml")
cpu, wall = time.process_time(), time.monotonic()
s = run_study(spec, RunOptions(storage_url=f"sqlite:///{d}/s.db", budget_gpu_seconds=budget_h * 3600,
                               runs_dir=d / "runs", preflight=False))
cpu, wall = time.process_time() - cpu, time.monotonic() - wall
study = optuna.load_study(study_name=s.study_name, storage=f"sqlite:///{d}/s.db")
ok = [t.value for t in study.trials if t.value is not None and t.user_attrs.get("status") == "ok"]
print(json.dumps({"trials": s.launched, "refits": calls[0], "cpu_s": cpu, "wall_s": wall,
                  "best": max(ok) if ok else None}))
'''


def run_one(code: Path, spec: Path, budget_gpuh: float, seed: int) -> dict:
    """One study on ``code``'s tuner; its figures (or the error's last line)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(_CHILD)
        out = subprocess.run([sys.executable, str(script), str(spec.resolve()), str(budget_gpuh), str(seed)],
                             cwd=code, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", type=Path, default=ROOT / "studies" / "sim-llama13b-h100x8.toml")
    p.add_argument("--budget-gpuh", type=float, default=8.0, help="GPU-hours of each study")
    p.add_argument("--seeds", default="0", help="comma-separated study seeds")
    p.add_argument("--compare", type=Path, metavar="DIR", help="another checkout of tuner, run first")
    args = p.parse_args(argv)
    if not args.spec.exists():
        p.error(f"--spec {args.spec}: no such file")
    codes = [c for c in (args.compare, ROOT) if c is not None]
    print("| code | seed | trials | refits | CPU s | wall s | best measured tokens/s/GPU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    cpu: dict[Path, float] = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for code in codes:
            r = run_one(code, args.spec, args.budget_gpuh, seed)
            if "error" in r:
                print(f"| {code} | {seed} | failed: {r['error'][:120]} | | | | |", flush=True)
                continue
            cpu[code] = cpu.get(code, 0.0) + r["cpu_s"]
            best = f"{r['best']:,.0f}" if r["best"] is not None else "-"
            print(f"| {code} | {seed} | {r['trials']} | {r['refits']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {best} |",
                  flush=True)
    if args.compare is not None and args.compare in cpu and ROOT in cpu:
        print(f"\nCPU seconds, this checkout / {args.compare}: {cpu[ROOT] / cpu[args.compare]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
