"""Preflight: a study whose data, tokenizer or model cannot serve a trial never starts one."""

import dataclasses
import os

import optuna
import pytest

from tests.spine_helpers import fast_spec
from tuner.cli import main as tuner_main
from tuner.errors import PreflightError
from tuner.spec import load_spec
from tuner.study import check_runs_dir, needs_preflight, preflight


def workload_spec(tmp_path, *, data=None, model='preset = "tiny"'):
    """The built-in workload on a local data file (quickstart-sized)."""
    source = f'source = "{data}"' if data else 'source = "synthetic"'
    path = tmp_path / "s.toml"
    path.write_text(f"""
[study]
name = "pf"
sampler = "random"
ablation_share = 0.0
[model]
{model}
seq_len = 64
[data]
{source}
tokenizer = "train"
vocab_size = 300
num_examples = 50
cache_dir = "{tmp_path / 'cache'}"
[cluster]
launcher = "local"
gpus_per_node = 2
backend = "gloo"
gpu = "cpu"
[trial]
warmup_steps = 1
measure_steps = 2
timeout_s = 60
estimate_gpu_seconds = 10
[space]
micro_batch = [1, 2]
""")
    return load_spec(path)


BROKEN = {"empty.json": "", "not-json.json": "this is { not json\n", "empty-list.json": "[]\n"}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_data_file_that_cannot_serve_a_trial_is_one_line_naming_it(tmp_path, name):
    data = tmp_path / name
    data.write_text(BROKEN[name])
    with pytest.raises(PreflightError) as err:
        preflight(workload_spec(tmp_path, data=data))
    message = str(err.value)
    assert message.startswith(f"preflight: data.source {data}") and "\n" not in message


def test_a_dataset_the_hub_cannot_serve_says_how_to_read_it_locally(tmp_path, monkeypatch):
    import objectives.data

    def unreachable(data):
        raise ConnectionError("Couldn't reach 'someone/alpaca' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(objectives.data, "load_examples", unreachable)
    with pytest.raises(PreflightError, match=r"the hub cannot be reached from this machine: give a local path"):
        preflight(workload_spec(tmp_path))


def test_a_model_path_without_dot_slash_goes_to_the_hub_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")      # no network here: fail at once, as an unreachable hub does
    (tmp_path / "models" / "llama-tiny").mkdir(parents=True)
    spec = workload_spec(tmp_path, model='path = "models/llama-tiny"')
    with pytest.raises(PreflightError, match=r"^preflight: model.path models/llama-tiny: no model config .*"
                                             r"looked up on the Hugging Face hub\)$"):
        preflight(spec)


def test_good_data_passes_and_says_what_it_found(tmp_path):
    line = preflight(workload_spec(tmp_path))
    assert line.startswith("preflight ok: data 50 examples") and "tiny" in line


def test_only_the_builtin_workload_on_real_jobs_is_checked(tmp_path):
    spec = workload_spec(tmp_path)
    assert needs_preflight(spec, simulated=False)
    assert not needs_preflight(spec, simulated=True)
    assert not needs_preflight(fast_spec(tmp_path), simulated=False)   # a custom command reads its own data


def test_tuner_run_with_a_broken_data_file_starts_no_trial(tmp_path, capsys):
    data = tmp_path / "empty.json"
    data.write_text("")
    spec = workload_spec(tmp_path, data=data)
    db = f"sqlite:///{tmp_path}/t.db"
    code = tuner_main(["run", "--study", spec.source_path, "--storage", db, "--quiet", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "data.source" in err[0]
    assert "no examples" in err[0] or "cannot be loaded" in err[0]
    if os.path.exists(f"{tmp_path}/t.db"):               # nothing ran, nothing was queued
        assert not optuna.get_all_study_summaries(db)


def test_an_unwritable_runs_dir_is_refused_before_any_trial(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(PreflightError, match=r"^--runs-dir: cannot write in .*a-file/pf"):
        check_runs_dir(blocker / "pf")
    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    code = tuner_main(["run", "--study", spec.source_path, "--storage", db, "--quiet", "--runs-dir", str(blocker)])
    assert code == 2 and "--runs-dir" in capsys.readouterr().err
    assert not os.path.exists(f"{tmp_path}/t.db") or not optuna.get_all_study_summaries(db)   # no FAIL, no retry


def test_nccl_on_a_machine_without_enough_gpus_stops_before_any_trial(tmp_path):
    """studies/llama1b-gpu1.toml on a CPU machine failed every trial alike ("nccl needs CUDA")
    until the budget's estimate stopped it: preflight now says so first, for the local launcher
    (which runs the trials here) only."""
    from tuner.study import local_device_problem

    spec = load_spec(os.path.join(os.path.dirname(__file__), "..", "..", "studies", "llama1b-gpu1.toml"))
    assert "no CUDA GPU" in local_device_problem(spec, cuda_devices=0)
    assert local_device_problem(spec, cuda_devices=1) is None      # one GPU per node: enough
    two = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, gpus_per_node=2))
    assert local_device_problem(two, cuda_devices=1).startswith("cluster.gpus_per_node 2: this machine has 1 CUDA GPU ")
    slurm = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, launcher="slurm"))
    assert local_device_problem(slurm, cuda_devices=0) is None     # trials run on the GPU nodes
    assert local_device_problem(spec, cuda_devices=0, launcher="slurm") is None   # a launcher passed in
    assert "no CUDA GPU" in local_device_problem(slurm, cuda_devices=0, launcher="local")
    assert local_device_problem(workload_spec(tmp_path), cuda_devices=0) is None   # gloo


def test_tuner_run_of_the_gpu_study_on_a_cpu_machine_starts_no_trial(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the study would run")
    study = os.path.join(os.path.dirname(__file__), "..", "..", "studies", "llama1b-gpu1.toml")
    storage = f"sqlite:///{tmp_path / 't.db'}"
    code = tuner_main(["run", "--study", study, "--storage", storage, "--runs-dir", str(tmp_path / "runs"),
                       "--budget", "0.01gpuh", "--quiet"])
    assert code == 2
    assert 'preflight: cluster.backend "nccl": this machine has no CUDA GPU' in capsys.readouterr().err
    assert not optuna.get_all_study_summaries(storage) or not optuna.load_study(
        study_name="llama1b-gpu1", storage=storage).trials
