"""The local launcher runs real torchrun jobs (2 processes) of the fast stand-in workload."""

import subprocess
import time
from pathlib import Path

import pytest

from tests.spine_helpers import fast_spec
from tuner.launch import TrialRequest, get_launcher
from tuner.protocol import read_results
from tuner.spec import complete_params

pytestmark = pytest.mark.slow  # torchrun jobs


def request(spec, tmp_path, params, number=0):
    return TrialRequest(study_name=spec.study.name, number=number,
                        params=complete_params(params, spec), spec=spec,
                        run_dir=tmp_path / f"trial-{number}")


def test_ok_trial_records_steps_env_and_gpu_seconds(tmp_path):
    spec = fast_spec(tmp_path)
    result = get_launcher(spec).launch(request(spec, tmp_path, {"micro_batch": 2, "padding": "packed", "nccl_algo": "Ring"}))
    assert result.status == "ok", result.message
    assert [s for s, _ in result.step_values] == [1, 2, 3, 4]          # warm-up step 0 excluded
    assert result.tokens_per_sec_per_gpu == pytest.approx(2050.0)
    assert result.world_size == 2
    assert result.gpu_seconds == pytest.approx(2 * result.wall_seconds)
    assert result.extra["nccl_env"] == {"NCCL_ALGO": "Ring"}           # passed through, proto unset
    assert Path(result.log_path).exists()


def test_timeout_kills_the_whole_group_and_counts_gpu_time(tmp_path, monkeypatch):
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "hang")
    spec = fast_spec(tmp_path, timeout_s=6)
    t0 = time.monotonic()
    result = get_launcher(spec).launch(request(spec, tmp_path, {"micro_batch": 1}))
    assert result.status == "timeout"
    assert 6 <= result.wall_seconds < 6 + 60    # killed at the limit (the bound only allows a loaded machine)
    assert result.gpu_seconds == pytest.approx(2 * result.wall_seconds)
    assert time.monotonic() - t0 < 90
    # nothing of the trial is left running
    leftover = subprocess.run(["pgrep", "-f", "fast_objective.py"], capture_output=True, text=True).stdout.split()
    assert not [p for p in leftover if _env_has(p, str(tmp_path))]


def _env_has(pid: str, text: str) -> bool:
    try:
        return text.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def test_oom_error_line_is_classified(tmp_path, monkeypatch):
    monkeypatch.setenv("FAST_OBJECTIVE_MODE", "oom")
    spec = fast_spec(tmp_path)
    result = get_launcher(spec).launch(request(spec, tmp_path, {"micro_batch": 1}))
    assert result.status == "oom" and "out of memory" in result.message


def test_nccl_failure_without_protocol_line_is_an_error_with_nccls_reason(tmp_path):
    spec = fast_spec(tmp_path)
    result = get_launcher(spec).launch(request(spec, tmp_path, {"micro_batch": 1, "nccl_algo": "Tree"}))
    assert result.status == "error"
    assert "no algorithm/protocol available" in result.message


def test_result_file_survives_a_cut_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"event": "step", "step": 3, "tokens": 100, "seconds": 0.5}\n{"event": "step", "st')
    record = read_results(path)
    assert len(record.steps) == 1 and record.summary is None
    assert record.step_values(world_size=2) == ((3, 100.0),)
