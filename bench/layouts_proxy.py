"""Each parallel layout measured on the CPU proxy: real trials under torchrun (gloo).

    nice -n 10 python bench/layouts_proxy.py                 # 4 processes, every layout
    nice -n 10 python bench/layouts_proxy.py --nproc 2 --checkpoints
    python bench/layouts_proxy.py --nproc 1 --backend nccl --checkpoints   # 1-GPU smoke run

For every layout (FSDP full shard, shard-grad-op, HSDP, each with tp_degree 1 and 2) it
runs objectives.fsdp_finetune on the tiny Llama with synthetic data and prints one row:
layout, world, mesh (replicate x shard x tp), tokens/s/GPU, peak MiB (CPU peak RSS, max over
ranks) and step time. ``--checkpoints`` adds a sync and an async DCP save every 2 steps on
full_shard and prints blocking time, background time and checkpoint size, then the time
to restore the latest one. The numbers are
for helper's layout model (issue 17) to be compared against; docs/validation.md keeps a run.
Sequential runs on a shared machine: compare rows of one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LAYOUTS = [
    ("full_shard", {"sharding": "full_shard", "tp_degree": 1}),
    ("shard_grad_op", {"sharding": "shard_grad_op", "tp_degree": 1}),
    ("hybrid_shard", {"sharding": "hybrid_shard", "shard_group_size": 2, "tp_degree": 1}),  # groups of 2 (1 on 1 GPU)
    ("full_shard+tp2", {"sharding": "full_shard", "tp_degree": 2}),
    ("shard_grad_op+tp2", {"sharding": "shard_grad_op", "tp_degree": 2}),
    ("hybrid_shard+tp2", {"sharding": "hybrid_shard", "shard_group_size": 1, "tp_degree": 2}),
]


def trial_config(folder: Path, params: dict, *, steps: int, trial: dict | None = None, backend: str = "gloo") -> dict:
    return {
        "study": "layouts-proxy", "trial_number": 0, "seed": 0,
        "params": {"micro_batch": 4, "grad_accum": 1, "num_workers": 0, "padding": "packed", **params},
        "model": {"preset": "tiny", "seq_len": 128, "dtype": "auto"},
        "data": {"source": "synthetic", "tokenizer": "train", "vocab_size": 2000, "num_examples": 800,
                 "cache_dir": str(folder / "cache")},
        "trial": {"warmup_steps": 2, "measure_steps": steps, **(trial or {})},
        "cluster": {"backend": backend},
    }


def run(folder: Path, name: str, raw: dict, nproc: int) -> dict:
    """One torchrun; its summary line (or an error line)."""
    run_dir = folder / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trial.json").write_text(json.dumps(raw))
    result = run_dir / "result.jsonl"
    result.unlink(missing_ok=True)
    env = {**os.environ, "TUNER_TRIAL_CONFIG": str(run_dir / "trial.json"), "TUNER_RESULT_FILE": str(result),
           "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                    "-m", "objectives.fsdp_finetune"], cwd=REPO, env=env, capture_output=True, timeout=600)
    lines = [json.loads(x) for x in result.read_text().splitlines()] if result.exists() else []
    return next((x for x in reversed(lines) if x["event"] in ("summary", "error")), {"event": "error"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=4, help="CPU processes per run (default 4)")
    ap.add_argument("--steps", type=int, default=8, help="measured steps per run (default 8)")
    ap.add_argument("--checkpoints", action="store_true", help="also time sync and async DCP saves")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="gloo on CPU (default), nccl on GPUs")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="layouts-proxy-"))
    print(f"{'layout':20s} {'world':>5s} {'mesh r x s x tp':>15s} {'tok/s/GPU':>10s} {'peak MiB':>9s} {'step s':>7s}")
    for name, params in LAYOUTS:
        if args.nproc % params["tp_degree"]:
            continue
        if "shard_group_size" in params:  # at most the data-parallel ranks (a degenerate HSDP on 1 GPU)
            params = {**params, "shard_group_size": min(params["shard_group_size"], args.nproc // params["tp_degree"])}
        s = run(folder, name, trial_config(folder, params, steps=args.steps, backend=args.backend), args.nproc)
        if s["event"] != "summary":
            print(f"{name:20s} {args.nproc:5d}   error: {s.get('message', '?')[:80]}")
            continue
        mesh = " x ".join(map(str, s["layout"]["mesh"]))
        print(f"{name:20s} {s['world_size']:5d} {mesh:>15s} {s['tokens_per_sec_per_gpu']:10.1f} "
              f"{s['peak_mem_gib'] * 1024:9.0f} {s['step_time_s']:7.3f}", flush=True)
    if args.checkpoints:
        print(f"\n{'DCP save (full_shard)':22s} {'saves':>5s} {'blocking s':>10s} {'background s':>12s} {'MiB':>6s}")
        for mode in ("sync", "async"):
            trial = {"checkpoint_every": 2, "checkpoint_mode": mode, "checkpoint_dir": str(folder / f"ckpt-{mode}")}
            s = run(folder, f"ckpt-{mode}", trial_config(folder, {"sharding": "full_shard"}, steps=args.steps,
                                                         trial=trial, backend=args.backend), args.nproc)
            c = s.get("checkpoint") or {}
            if s["event"] != "summary" or not c.get("saves"):
                print(f"{mode:22s} error: {s.get('message', '?')[:80]}")
                continue
            print(f"{mode:22s} {c['saves']:5d} {c['blocking_s_mean']:10.3f} {c['background_s_mean']:12.3f} "
                  f"{c['bytes'] / 2**20:6.1f}", flush=True)
        # the sync run again: it resumes from its latest checkpoint (dcp.load into the sharded model)
        trial = {"checkpoint_every": 2, "checkpoint_mode": "sync", "checkpoint_dir": str(folder / "ckpt-sync")}
        s = run(folder, "ckpt-restore", trial_config(folder, {"sharding": "full_shard"}, steps=args.steps,
                                                     trial=trial, backend=args.backend), args.nproc)
        c = s.get("checkpoint") or {}
        print(f"restore: from step {c.get('resumed_from_step')} in {c.get('reload_s') or float('nan'):.3f} s "
              "(dcp.load + set_state_dict)")
    print(f"\n(runs kept in {folder})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
