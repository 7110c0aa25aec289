"""The resident worker with the real FSDP2 objective (tiny model, 2 gloo ranks under torchrun):
one worker through every reconfiguration level, including one after an OOM that every rank hit
(recovered in place), measures the same steps on the same batches as a cold trial of the same
config. Whether a warm trial's tokens/s match a cold one's is a wall-clock comparison, so it is a
benchmark's figure, not an assertion: `bench/gpu_check.py`'s warm-switch check puts each warm
switch's tokens/s beside a cold start of the same config (on a GPU, or `--dry-run` on CPU)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.objectives.test_fsdp_finetune import PORT_RACE, trial_config
from tuner import protocol

pytestmark = pytest.mark.slow  # torchrun jobs of the real objective

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]

# grad_accum 3 is an OOM on every rank at the first step (injected: a CPU run has no allocator limit)
_OOM_AT_GRAD_ACCUM_3 = '''
import torch
from objectives import fsdp_finetune as trial
real_step = trial.train_step
def step(*args, **kwargs):
    if kwargs["grad_accum"] == 3:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB (injected by the test)")
    return real_step(*args, **kwargs)
trial.train_step = step
raise SystemExit(trial.main())
'''

CONFIGS = [  # each change from the one before: (none|data_loader|model|communicators)
    {"micro_batch": 2, "grad_accum": 1, "padding": "max_length"},
    {"micro_batch": 4, "grad_accum": 1, "padding": "packed"},                      # data_loader
    {"micro_batch": 2, "grad_accum": 3, "padding": "packed"},                      # OOM on every rank
    {"micro_batch": 2, "grad_accum": 1, "padding": "max_length", "activation_checkpointing": True,
     "nccl_algo": "Ring"},                                                          # communicators, after the OOM
    {"micro_batch": 2, "grad_accum": 2, "padding": "max_length", "activation_checkpointing": True,
     "nccl_algo": "Ring"},                                                          # none
]
TWINS = [1, 3]  # the jobs that get a cold twin


def write_config(tmp_path, folder, i, params):
    raw = trial_config(tmp_path, **params)
    raw["trial_number"], raw["seed"] = i, i
    raw["trial"].update(warmup_steps=1, measure_steps=8, adaptive=False, warm_warmup_steps=1)
    path = folder / f"config-{i}.json"
    path.write_text(json.dumps(raw))
    return path


def env_for(config, result, **extra):
    return {**os.environ, "PYTHONPATH": str(REPO), protocol.CONFIG_ENV: str(config),
            protocol.RESULT_ENV: str(result), **extra}


def run_warm(tmp_path, script, between=lambda job: None):
    """Run CONFIGS in one worker; ``between(job)`` runs after each job, while the worker idles."""
    folder = tmp_path / "warm"
    folder.mkdir()
    configs = [write_config(tmp_path, folder, i, p) for i, p in enumerate(CONFIGS)]
    results = [folder / f"result-{i}.jsonl" for i in range(len(CONFIGS))]
    proc = subprocess.Popen([*TORCHRUN, str(script)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env_for(configs[0], results[0], **{protocol.WORKER_ENV: str(folder)}))
    try:
        for job, (config, result) in enumerate(zip(configs, results)):
            if job:
                protocol.write_job(folder, job, config_path=str(config), result_path=str(result))
            deadline = time.monotonic() + 300
            while not (result.exists() and protocol.has_job_end(result.read_text(), job)):
                assert proc.poll() is None, f"the worker exited ({proc.returncode}) in job {job}"
                assert time.monotonic() < deadline
                time.sleep(0.1)
            between(job)
        protocol.write_job(folder, len(CONFIGS), stop=True)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return [protocol.read_results(r) for r in results]


def run_cold(tmp_path, i, params, tag="cold"):
    folder = tmp_path / f"{tag}-{i}"
    folder.mkdir()
    config, result = write_config(tmp_path, folder, i, params), folder / "result.jsonl"
    for attempt in (1, 2):
        done = subprocess.run([*TORCHRUN, "-m", "objectives.fsdp_finetune"], cwd=REPO, env=env_for(config, result),
                              capture_output=True, text=True, timeout=300)
        # two torchruns started together can race for one rendezvous port (`--standalone`): once more
        if done.returncode == 0 or attempt == 2 or not PORT_RACE.search(done.stderr):
            break
        result.unlink(missing_ok=True)
    assert done.returncode == 0, f"the cold trial failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return protocol.read_results(result)


def test_warm_trials_measure_what_cold_trials_measure(tmp_path):
    script = tmp_path / "oom_at_grad_accum_3.py"
    script.write_text(_OOM_AT_GRAD_ACCUM_3)
    cold = {}

    def cold_twin(job):  # the data loader rebuilt in place, and the communicators rebuilt after the OOM
        if job in TWINS:
            cold[job] = run_cold(tmp_path, job, CONFIGS[job])

    warm = run_warm(tmp_path, script, between=cold_twin)

    assert warm[2].error["kind"] == "oom" and warm[2].summary is None        # that config failed, only it
    levels = [r.summary["resident"]["reconfigured"] for i, r in enumerate(warm) if i != 2]
    assert levels == ["process", "data_loader", "communicators", "none"]
    assert warm[3].summary["nccl_env"]["NCCL_ALGO"] == "Ring"                 # set before the new communicators
    assert warm[3].summary["resident"]["worker_trial"] == 4                   # same worker after the OOM

    assert sorted(cold) == TWINS
    for i, twin in cold.items():
        # the same measured steps, on the same batches (same seed), as a cold trial of the config
        assert [s["tokens"] for s in warm[i].steps] == [s["tokens"] for s in twin.steps]
        assert [s["padded_tokens"] for s in warm[i].steps] == [s["padded_tokens"] for s in twin.steps]
        assert [s["step"] for s in warm[i].steps] == [s["step"] for s in twin.steps] and len(twin.steps) == 8
        for r in (warm[i], twin):
            assert r.summary["tokens_per_sec_per_gpu"] > 0
