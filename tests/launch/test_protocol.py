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
