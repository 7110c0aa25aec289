"""The trial workload: error lines, and real FSDP2 runs (in-process world of
one; 2 CPU processes under torchrun over gloo) on tiny models."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from objectives.data import count_tokens, iterate_batches
from objectives.fsdp_finetune import (
    ResultWriter,
    TrialConfigError,
    build_data,
    classify_error,
    error_event,
    parse_config,
    run_trial,
    train_step,
)

REPO = Path(__file__).resolve().parents[2]
PORT_RACE = re.compile(r"EADDRINUSE|[Aa]ddress already in use|failed to listen on any local network address")
"""What a torchrun (`--standalone`, gloo) prints when another job took the port it chose."""


def trial_config(tmp_path, **params):
    """A trial config in the format of docs/contracts.md: tiny preset, gloo, synthetic data."""
    return {
        "study": "test", "trial_number": 0, "seed": 0,
        "params": {"micro_batch": 2, "grad_accum": 2, "num_workers": 0, "padding": "longest",
                   "nccl_algo": "default", "nccl_proto": "default", **params},
        "model": {"preset": "tiny", "path": None, "seq_len": 128, "dtype": "auto", "activation_checkpointing": False},
        "data": {"source": "synthetic", "split": "train", "template": "alpaca", "tokenizer": "train",
                 "vocab_size": 1000, "num_examples": 400, "cache_dir": str(tmp_path / "cache")},
        "trial": {"warmup_steps": 1, "measure_steps": 3, "timeout_s": 120},
        "cluster": {"launcher": "local", "nodes": 1, "gpus_per_node": 2, "backend": "gloo", "gpu": "cpu"},
    }


def read_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# --------------------------------------------------------------------------- pure parts


def test_model_attention_is_checked_and_reaches_the_model(tmp_path):
    from objectives.models import build_model

    raw = trial_config(tmp_path)
    raw["model"]["attention"] = "flash"
    with pytest.raises(TrialConfigError, match="model.attention 'flash': one of sdpa, eager"):
        parse_config(raw)
    assert build_model({"preset": "tiny", "seq_len": 64, "attention": "eager"}).config._attn_implementation == "eager"
    assert build_model({"preset": "tiny", "seq_len": 64}).config._attn_implementation == "sdpa"  # HF's default


def test_error_classification_and_error_lines(tmp_path):
    assert classify_error(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
    assert classify_error(RuntimeError("DefaultCPUAllocator: can't allocate memory: out of memory")) == "oom"
    assert classify_error(MemoryError()) == "oom"
    nccl = RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage\nLast error:\n"
                        "Error : no algorithm/protocol available for function AllGather")
    assert classify_error(nccl) == "error"
    assert error_event(nccl, rank=1) == {
        "event": "error", "kind": "error", "rank": 1,
        "message": "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage | Last error: | "
                   "Error : no algorithm/protocol available for function AllGather"}

    class OomModel(torch.nn.Module):        # the step function meets an OOM in forward
        def set_requires_gradient_sync(self, flag):
            pass

        def forward(self, **batch):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "labels": torch.ones(1, 4, dtype=torch.long)}
    with pytest.raises(torch.OutOfMemoryError) as caught:
        train_step(OomModel(), None, iter([batch]), grad_accum=1, device=torch.device("cpu"), packed=False,
                   sync=lambda: None)
    writer = ResultWriter(str(tmp_path / "r.jsonl"))
    writer.emit(error_event(caught.value, rank=0))
    assert read_lines(tmp_path / "r.jsonl") == [{"event": "error", "kind": "oom", "rank": 0,
                                                 "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"}]


# ------------------------------------------------------------- real runs, in process

@pytest.fixture()
def world_of_one():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.slow
def test_world_of_one_local_checkpoint_with_checkpointing_and_no_reshard(tmp_path, world_of_one):
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(tmp_path / "ckpt")
    raw = trial_config(tmp_path, padding="packed", activation_checkpointing=True, reshard_after_forward=False)
    raw["model"].update(preset=None, path=str(tmp_path / "ckpt"), seq_len=64)
    raw["data"]["vocab_size"] = 400
    writer = ResultWriter(str(tmp_path / "r.jsonl"))
    summary = run_trial(parse_config(raw), writer)
    lines = read_lines(tmp_path / "r.jsonl")
    assert [x["step"] for x in lines if x["event"] == "step"] == [1, 2, 3]
    assert all(x["tokens"] == x["padded_tokens"] == 2 * 2 * 64 for x in lines if x["event"] == "step")
    assert lines[-1] == summary and summary["n_params"] == 512 * 64 * 2 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64
    assert summary["knobs"]["activation_checkpointing"] is True and summary["mfu"] is None
    assert summary["padding_efficiency"] == 1.0 and summary["dtype"] == "float32"


@pytest.mark.parametrize("stop_below, steps, reason", [
    (1e12, [1, 2, 3, 4], "clearly_worse"),   # far below the best: stops at the floor of 4 steps
    (None, [1, 2, 3, 4, 5, 6], None),         # nothing to compare with, 2% not reached: all steps
])
def test_adaptive_measurement_stops_clearly_worse_trials_at_the_floor(tmp_path, world_of_one,
                                                                      stop_below, steps, reason):
    raw = trial_config(tmp_path)
    raw["trial"].update(measure_steps=6, adaptive=True, min_steps=4, target_rel_ci=1e-9)
    raw["stop_below_tokens_per_sec_per_gpu"] = stop_below
    summary = run_trial(parse_config(raw), ResultWriter(str(tmp_path / "r.jsonl")))
    assert [x["step"] for x in read_lines(tmp_path / "r.jsonl") if x["event"] == "step"] == steps
    assert summary["measured_steps"] == len(steps) and summary["stopped_early"] == reason


@pytest.mark.parametrize("checkpointing", [False, True])
def test_blocks_are_sharded_and_checkpointing_recomputes_them(tmp_path, world_of_one, checkpointing):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from objectives.fsdp_finetune import build_sharded_model

    config = parse_config(trial_config(tmp_path, activation_checkpointing=checkpointing))
    model, dtype = build_sharded_model(config, vocab_size=1000, device=torch.device("cpu"))
    blocks = list(model.model.layers)
    assert isinstance(model, FSDPModule) and all(isinstance(b, FSDPModule) for b in blocks)
    assert all(isinstance(p, DTensor) and not p.is_meta for p in model.parameters()) and dtype == torch.float32
    calls = []
    attention = blocks[0].self_attn         # inside the checkpointed region when it is on
    attention.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(0, 1000, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert len(calls) == (2 if checkpointing else 1)               # recomputed in backward


# ----------------------------------------------------------- real runs under torchrun

def why(proc) -> str:
    """A failed torchrun's cause for an assertion message: the lines that name an error, from
    anywhere in its stderr (a rank's C++ abort comes first, the launcher's report last), then the
    tail."""
    lines = proc.stderr.splitlines()
    causes = [line for line in lines if re.search(r"[Ee]rror|terminate|what\(\)|Fatal", line)]
    # a rank's C++ abort: faulthandler (objectives.fsdp_finetune) dumps every thread's Python stack after it
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    stacks = lines[fatal: fatal + 40] if fatal is not None else []
    return "\n".join(causes[:20] + ["..."] + stacks) + "\n...\n" + proc.stderr[-2000:]


def torchrun(tmp_path, raw, name, *, nproc=2, env=None):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps(raw))
    full_env = {**os.environ, "TUNER_TRIAL_CONFIG": str(run_dir / "trial.json"),
                "TUNER_RESULT_FILE": str(run_dir / "result.jsonl"), "PYTHONPATH": str(REPO), **(env or {})}
    result = run_dir / "result.jsonl"
    for attempt in (1, 2):
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                               str(nproc), "-m", "objectives.fsdp_finetune"], cwd=REPO, env=full_env,
                              capture_output=True, text=True, timeout=180)
        # torchruns started together by the suite's workers can race for a port: once more
        if proc.returncode == 0 or attempt == 2 or not PORT_RACE.search(proc.stderr):
            break
        result.unlink(missing_ok=True)
    return proc, (read_lines(result) if result.exists() else [])


@pytest.mark.slow
def test_torchrun_counts_exactly_the_batches_non_padding_tokens(tmp_path):
    # Tokenization in a worker process per rank; checkpointing on; FSDP2 as shard_grad_op
    # (packed and no-reshard in a world of one: above).
    raw = trial_config(tmp_path, num_workers=1, prefetch_factor=2, activation_checkpointing=True,
                       sharding="shard_grad_op")
    proc, lines = torchrun(tmp_path, raw, "t", env={"NCCL_ALGO": "Ring"})
    assert proc.returncode == 0, why(proc)
    steps = [x for x in lines if x["event"] == "step"]
    summary = lines[-1]
    assert [x["step"] for x in steps] == [1, 2, 3]                 # warm-up step 0 excluded
    assert summary["event"] == "summary" and summary["world_size"] == 2 and summary["measured_steps"] == 3
    assert summary["tokens_counted"] == "non_padding" and summary["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": None}
    assert 0 <= summary["data_wait_frac"] < 1 and summary["peak_mem_gib"] > 0 and summary["startup_seconds"] > 0
    assert summary["knobs"]["activation_checkpointing"] is True and summary["mfu"] is None   # no known peak on CPU
    assert summary["layout"] == {"sharding": "shard_grad_op", "reshard_after_forward": False, "mesh": [1, 2, 1],
                                 "mesh_dims": ["dp_replicate", "dp_shard", "tp"], "tp_degree": 1, "dp_size": 2,
                                 "shard_group_size": 2}
    assert summary["tokens_per_sec_per_gpu"] == pytest.approx(
        sum(x["tokens"] for x in steps) / sum(x["seconds"] for x in steps) / 2)

    # Ask the data module for the same batches each rank saw (the tokenizer is in the trial's cache).
    # Serially: map-style order does not depend on the worker count (test_objective_data), and
    # forking workers from this long-lived pytest process (gloo groups came and went in it) is
    # what a trial never does.
    config = parse_config({**raw, "params": {**raw["params"], "num_workers": 0}})
    per_rank = []
    for rank in range(2):
        _, loader = build_data(config, rank=rank, world_size=2)
        batches = iterate_batches(loader)
        per_rank.append([int(next(batches)["attention_mask"].sum()) for _ in range(4 * 2)])  # 4 steps x grad_accum 2
    for line in steps:
        micro = slice(line["step"] * 2, line["step"] * 2 + 2)
        assert line["tokens"] == sum(sum(counts[micro]) for counts in per_rank)
        assert line["tokens"] < line["padded_tokens"] <= 2 * 2 * 2 * 128


@pytest.mark.slow
def test_torchrun_unknown_knob_fails_fast_with_one_error_line(tmp_path):
    proc, lines = torchrun(tmp_path, trial_config(tmp_path, warp_drive=9), "u")
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0]["event"] == "error" and lines[0]["kind"] == "error"
    assert "unknown knob 'warp_drive'" in lines[0]["message"]


_FAIL_ON_RANK_1 = '''
import os, torch
import objectives.fsdp_finetune as trial
real_step = trial.train_step
def step(*args, **kwargs):  # rank 1 runs out of memory in its first step; rank 0 is mid-collective
    if os.environ["RANK"] == "1":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB (injected by the test)")
    return real_step(*args, **kwargs)
trial.train_step = step
raise SystemExit(trial.main())
'''


@pytest.mark.slow
def test_torchrun_one_rank_oom_stops_all_and_is_reported_as_the_cause(tmp_path):
    script = tmp_path / "fail_on_rank_1.py"
    script.write_text(_FAIL_ON_RANK_1)
    run_dir = tmp_path / "f"
    run_dir.mkdir()
    (run_dir / "trial.json").write_text(json.dumps(trial_config(tmp_path)))
    env = {**os.environ, "TUNER_TRIAL_CONFIG": str(run_dir / "trial.json"),
           "TUNER_RESULT_FILE": str(run_dir / "result.jsonl"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0                                       # and no hang: rank 0 was stopped
    lines = read_lines(run_dir / "result.jsonl")
    assert [(x["event"], x["kind"], x["rank"]) for x in lines] == [("error", "oom", 1)]   # rank 0's echo is not the cause


def test_count_tokens_is_the_non_padding_count():
    batch = {"attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}
    assert count_tokens(batch) == 3
