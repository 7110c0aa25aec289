"""tuner.launch._protocol: the trial config a launcher writes, and what a log or a result file becomes."""

from tests.launch.test_local import request
from tests.spine_helpers import fast_spec
from tuner.launch import classify_log


def test_trial_config_carries_the_adaptive_settings_and_the_bar_to_beat(tmp_path):
    import dataclasses
    import json

    from tuner.launch import write_trial_config
    spec = fast_spec(tmp_path)
    req = dataclasses.replace(request(spec, tmp_path, {"micro_batch": 2}), stop_below_tokens_per_sec_per_gpu=1234.5)
    config = json.loads(write_trial_config(req, tmp_path / "config.json").read_text())
    assert config["stop_below_tokens_per_sec_per_gpu"] == 1234.5
    assert {"adaptive", "min_steps", "target_rel_ci"} <= set(config["trial"])


def test_classify_log():
    assert classify_log("x\ntorch.OutOfMemoryError: CUDA out of memory. Tried\n")[0] == "oom"
    status, reason = classify_log("a\nNCCL WARN Error : no algorithm/protocol available for function AllGather\nb")
    assert status == "error" and reason.startswith("NCCL WARN")
    assert classify_log("") == ("error", "the job exited without a result")


def _finished(tmp_path, lines, *, returncode=0, log="", **kw):
    import json

    from tuner.launch import trial_result

    result, log_path = tmp_path / "result.jsonl", tmp_path / "log"
    result.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log_path.write_text(log)
    return trial_result(launcher="local", world_size=2, wall_seconds=5.0, returncode=returncode,
                        result_path=result, log_path=log_path, **kw)


STEPS = [{"event": "step", "step": s, "tokens": 1000, "seconds": 0.5} for s in (1, 2)]
SUMMARY = {"event": "summary", "tokens_per_sec_per_gpu": 1000.0, "peak_mem_gib": 3.5, "mfu": 0.4}


def test_a_clean_finish_is_ok_with_its_summary_split_into_fields_and_extra(tmp_path):
    result = _finished(tmp_path, [*STEPS, SUMMARY])
    assert result.status == "ok" and result.gpu_seconds == 10.0 and len(result.step_values) == 2
    assert result.peak_mem_gib == 3.5 and result.extra == {"tokens_per_sec_per_gpu": 1000.0, "mfu": 0.4}


def test_the_launchers_timeout_comes_first_and_keeps_the_steps_it_measured(tmp_path):
    result = _finished(tmp_path, [*STEPS, {"event": "error", "kind": "oom", "message": "x"}], returncode=-9,
                       timed_out=True, timeout_message="killed at 60 s")
    assert (result.status, result.message) == ("timeout", "killed at 60 s") and len(result.step_values) == 2


def test_the_objectives_own_error_line_gives_the_status_and_the_message(tmp_path):
    oom = _finished(tmp_path, [STEPS[0], {"event": "error", "kind": "oom", "message": "CUDA out of memory"}],
                    returncode=1)
    assert (oom.status, oom.message) == ("oom", "CUDA out of memory")


def test_without_a_result_the_log_says_why_and_exit_0_without_a_summary_says_so(tmp_path):
    died = _finished(tmp_path, [], returncode=1, log="loading\ntorch.OutOfMemoryError: CUDA out of memory\n")
    assert died.status == "oom" and died.message == "exit 1: torch.OutOfMemoryError: CUDA out of memory"
    silent = _finished(tmp_path, STEPS, returncode=0)
    assert silent.status == "error" and "without a summary line" in silent.message
