"""The trial protocol, written once: what a workload writes and a launcher reads."""

import json

import pytest

from tuner.launch import trial_result
from tuner.protocol import ResultWriter, error_event, parse_results, read_results, step_event, summary_event


def test_writer_and_reader_share_the_schema(tmp_path):
    writer = ResultWriter(str(tmp_path / "r.jsonl"))
    writer.emit(step_event(step=2, tokens=1000, seconds=0.5, loss=1.2))
    writer.emit(summary_event(peak_mem_gib=1.5, data_wait_frac=0.01))
    record = read_results(tmp_path / "r.jsonl")
    assert record.problems == [] and record.step_values(world_size=2) == ((2, 1000.0),)
    assert record.summary["peak_mem_gib"] == 1.5 and not writer.has_error()
    writer.emit(error_event(kind="oom", message="CUDA out of memory", rank=1))
    assert writer.has_error() and read_results(tmp_path / "r.jsonl").error["rank"] == 1
    with pytest.raises(ValueError, match="error kind"):
        error_event(kind="segfault", message="?")


@pytest.mark.parametrize("line, problem", [
    ('{"event": "step", "step": 1, "tokens": 100, "seconds": "fast"}', 'seconds is "fast", not a number'),
    ('{"event": "step", "step": "x", "tokens": 100, "seconds": 1}', 'step is "x", not an integer'),
    ('{"event": "step", "step": 1, "tokens": 1e400, "seconds": 1}', "tokens is inf, not a finite number"),
    ('{"event": "step", "step": 1, "tokens": -5000, "seconds": 1}', "tokens is -5000, must be >= 0"),
    ('{"event": "step", "step": 1, "tokens": 5, "seconds": 0}', "seconds is 0, must be > 0"),
    ('{"event": "step", "step": 1, "seconds": 1}', "step has no tokens"),
    ('{"event": "summary", "peak_mem_gib": "big"}', "summary field peak_mem_gib"),
    ('[1, 2]', "not a JSON object"),
    ('not json', "not a JSON object"),
])
def test_malformed_lines_are_problems_that_name_the_line(line, problem):
    text = '{"event": "step", "step": 0, "tokens": 10, "seconds": 1}\n' + line + "\n"
    record = parse_results(text)
    assert record.problems and record.problems[0].startswith("line 2: ") and problem in record.problems[0]


def test_a_line_cut_off_by_a_kill_is_not_a_problem():
    record = parse_results('{"event": "step", "step": 3, "tokens": 100, "seconds": 0.5}\n{"event": "st')
    assert record.problems == [] and len(record.steps) == 1


def test_a_trial_that_breaks_the_protocol_is_an_error_naming_file_and_line(tmp_path):
    result_path, log = tmp_path / "trial-0007" / "result.jsonl", tmp_path / "log"
    result_path.parent.mkdir()
    result_path.write_text(json.dumps({"event": "step", "step": 1, "tokens": 100, "seconds": 0.5}) + "\n"
                           + json.dumps({"event": "step", "step": 2, "tokens": 1e400, "seconds": 0.5}) + "\n"
                           + json.dumps({"event": "summary"}) + "\n")
    result = trial_result(launcher="local", world_size=2, wall_seconds=3.0, returncode=0,
                          result_path=result_path, log_path=log)
    assert result.status == "error" and result.step_values == () and result.tokens_per_sec_per_gpu is None
    assert str(result_path) in result.message and "line 2" in result.message and "trial-0007" in result.message
    assert result.gpu_seconds == 6.0   # the time it used is still charged


# ------------------------------------------------------------------ resident mode

def test_job_files_and_job_end_lines_of_the_resident_mode(tmp_path):
    from tuner.protocol import announce_worker, has_job_end, job_end_event, job_path, read_job, worker_announced, write_job

    assert read_job(job_path(tmp_path, 1)) is None                      # not handed over yet
    write_job(tmp_path, 1, config_path="/c.json", result_path="/r.jsonl")
    assert read_job(job_path(tmp_path, 1)) == {"job": 1, "config": "/c.json", "result": "/r.jsonl", "stop": False}
    assert read_job(write_job(tmp_path, 2, stop=True))["stop"] is True
    assert not list(tmp_path.glob("*.tmp"))                              # written by rename
    text = json.dumps({"event": "summary", "tokens_per_sec_per_gpu": 1.0}) + "\n" + json.dumps(job_end_event(job=3)) + "\n"
    assert has_job_end(text, 3) and not has_job_end(text, 2) and not has_job_end('{"event": "job_end", "job"', 3)
    assert parse_results(text).problems == []                           # other readers skip the line
    assert not worker_announced(tmp_path)
    announce_worker(tmp_path, pid=7)
    assert worker_announced(tmp_path)
