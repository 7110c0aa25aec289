"""Each parallel layout measured on the CPU proxy: real trials under torchrun (gloo).

    nice -n 10 python bench/layouts_proxy.py                 # 4 processes, every layout
    nice -n 10 python bench/layouts_proxy.py --nproc 2 --checkpoints
    python bench/layouts_proxy.py --nproc 1 --backend nccl --checkpoints   # 1-GPU smoke run
    python bench/layouts_proxy.py --predict-only             # helper's prediction; no torchrun

For every layout (FSDP full shard, shard-grad-op, HSDP, each with tp_degree 1 and 2) it
runs objectives.fsdp_finetune on the tiny Llama with synthetic data and prints one row:
layout, world, mesh (replicate x shard x tp), tokens/s/GPU, peak MiB (CPU peak RSS, max over
ranks) and step time. ``--checkpoints`` adds a sync and an async DCP save every 2 steps on
full_shard and prints blocking time, background time and checkpoint size, then the time
to restore the latest one. Every row also shows helper's prediction for it
(``helper.layouts.layout_step_time`` with the ``cpu`` entry of helper/gpus.py and the default
calibration); ``--predict-only`` prints the predictions next to the measured run that
docs/validation.md keeps (4 processes), without starting torchrun.
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


MEASURED_4PROC = {  # docs/validation.md "Layouts on the CPU proxy (measured)": this bench, --nproc 4, 2-core VM
    "full_shard": 603.1, "shard_grad_op": 601.0, "hybrid_shard": 568.2,
    "full_shard+tp2": 261.9, "shard_grad_op+tp2": 291.5, "hybrid_shard+tp2": 276.9,
}


def predict(params: dict, nproc: int) -> dict:
    """helper's tokens/s/GPU and memory for one row: helper.layouts on the ``cpu`` GPU entry."""
    import dataclasses

    from helper.calibration import resolve_constants
    from helper.layouts import layout_memory, layout_step_time
    from helper.mesh import Layout
    from helper.presets import get_preset
    from helper.sizes import ModelShape
    from tuner.knobs import fsdp_reshard_after_forward

    arch = dataclasses.replace(get_preset("tiny"), vocab=2000)  # the bench's trained tokenizer's vocabulary
    shape = ModelShape(n_params=float(arch.n_params), arch=arch, label="tiny", note="tiny preset, 2,000-token vocabulary")
    layout = Layout.from_knobs(params, world_size=nproc, gpus_per_node=nproc)
    common = dict(gpu="cpu", micro_batch=4, seq_len=128, activation_checkpointing=False)
    t = layout_step_time(shape, layout, constants=resolve_constants(None, "cpu")[0], gpus_per_node=nproc,
                         reshard_after_forward=fsdp_reshard_after_forward(params), **common)
    return {"tokens_per_sec_per_gpu": t["tokens_per_sec_per_gpu"], "step_time_s": t["step_time_s"],
            "mem_gib": layout_memory(shape, layout, **common)["total"] * 1e9 / 2**30, "name": layout.name}


def print_predictions(nproc: int) -> None:
    print(f"helper.layouts, gpu 'cpu', default calibration, {nproc} processes; measured: docs/validation.md (4 processes)")
    print(f"{'layout':20s} {'predicted tok/s/GPU':>19s} {'measured':>9s} {'pred/meas':>9s} {'pred step s':>11s} "
          f"{'pred MiB':>8s}")
    for name, params in LAYOUTS:
        if nproc % params["tp_degree"]:
            continue
        params = {**params, "shard_group_size": min(params.get("shard_group_size", 0), nproc // params["tp_degree"])}
        p = predict(params, nproc)
        meas = MEASURED_4PROC.get(name) if nproc == 4 else None
        ratio = f"{p['tokens_per_sec_per_gpu'] / meas:9.2f}" if meas else f"{'-':>9s}"
        print(f"{name:20s} {p['tokens_per_sec_per_gpu']:19.1f} {meas or float('nan'):9.1f} {ratio} "
              f"{p['step_time_s']:11.3f} {p['mem_gib'] * 1024:8.1f}")


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
    ap.add_argument("--predict-only", action="store_true",
                    help="print helper's predicted tokens/s/GPU per layout next to the measured run in "
                         "docs/validation.md; starts no torchrun")
    args = ap.parse_args()
    if args.predict_only:
        print_predictions(args.nproc)
        return 0
    folder = Path(tempfile.mkdtemp(prefix="layouts-proxy-"))
    print(f"{'layout':20s} {'world':>5s} {'mesh r x s x tp':>15s} {'tok/s/GPU':>10s} {'peak MiB':>9s} {'step s':>7s} "
          f"{'predicted':>9s}")
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
        pred = predict(params, args.nproc)["tokens_per_sec_per_gpu"]
        print(f"{name:20s} {s['world_size']:5d} {mesh:>15s} {s['tokens_per_sec_per_gpu']:10.1f} "
              f"{s['peak_mem_gib'] * 1024:9.0f} {s['step_time_s']:7.3f} {pred:9.1f}", flush=True)
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
