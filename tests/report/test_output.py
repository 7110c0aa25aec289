"""Outputs are written all or nothing, and a bad --out is one line (issue 18, item 8)."""

import errno
import os

import pytest

import tuner.report._output as output
from tuner.errors import OutputError
from tuner.report import output_dir, write_atomic


def test_a_file_in_the_way_of_out_is_one_line(tmp_path):
    target = tmp_path / "report"
    target.write_text("not a folder")
    with pytest.raises(OutputError, match=r"^--out .*report: is a file, not a folder"):
        output_dir(target)


def test_a_full_disk_leaves_the_old_file_whole_and_no_tmp(tmp_path, monkeypatch):
    """Before: a truncated report.html and an empty analysis.json.tmp."""
    path = tmp_path / "report.html"
    path.write_text("<html>the previous, whole report</html>")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output.os, "fsync", full)
    with pytest.raises(OutputError, match=r"^cannot write .*report.html: No space left on device; nothing was changed"):
        write_atomic(path, "<html>" + "x" * 100_000)
    assert path.read_text() == "<html>the previous, whole report</html>"
    assert os.listdir(tmp_path) == ["report.html"]


def test_a_read_only_folder_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(output.tempfile, "mkstemp", read_only)
    with pytest.raises(OutputError, match="Read-only file system"):
        write_atomic(tmp_path / "analysis.json", "{}")
    assert not os.listdir(tmp_path)


def test_cli_analyze_and_report_into_a_file_exit_2_with_one_line(tmp_path, capsys):
    from tests.spine_helpers import fast_spec
    from tests.study.test_coordinator import FakeLauncher
    from tuner.cli import main
    from tuner.study import RunOptions, run_study

    spec = fast_spec(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    run_study(spec, RunOptions(storage_url=db, runs_dir=tmp_path / "runs", budget_gpu_seconds=60.0),
              launcher=FakeLauncher(spec))
    blocker = tmp_path / "out"
    blocker.write_text("")
    for command in ("analyze", "report"):
        code = main([command, "--storage", db, "--study-name", "fast", "--out", str(blocker), "--no-note"][
            : 7 if command == "analyze" else 8])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "is a file, not a folder" in err[0]
    assert blocker.read_text() == ""


def test_outputs_are_readable_by_the_team(tmp_path):
    """mkstemp's 0600 made report.html unreadable to teammates on a shared file system."""
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "report.html", "<html></html>")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
