"""Builders shared by the spine's tests: specs that run the fast stand-in workload."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tuner.spec import StudySpec, load_spec

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAST_OBJECTIVE = FIXTURES / "fast_objective.py"


def fast_spec(tmp_path: Path, *, name: str = "fast", timeout_s: float = 60, extra_space: str = "",
              launcher: str = "local", ablation_share: float = 0.0, estimate: float = 10.0,
              baseline: bool = True, extra_baseline: str = "") -> StudySpec:
    text = f"""
    [study]
    name = "{name}"
    sampler = "random"
    ablation_share = {ablation_share}
    [model]
    preset = "tiny"
    seq_len = 64
    [cluster]
    launcher = "{launcher}"
    gpus_per_node = 2
    backend = "gloo"
    gpu = "cpu"
    [trial]
    warmup_steps = 1
    measure_steps = 4
    timeout_s = {timeout_s}
    estimate_gpu_seconds = {estimate}
    command = ["{FAST_OBJECTIVE}"]
    [space]
    micro_batch = [1, 2, 4]
    padding = ["max_length", "packed"]
    nccl_algo = ["default", "Ring", "Tree"]
    {extra_space}
    """
    if baseline:
        text += f"""
    [baseline]
    micro_batch = 1
    padding = "max_length"
    nccl_algo = "default"
    {extra_baseline}
    """
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return load_spec(path)
