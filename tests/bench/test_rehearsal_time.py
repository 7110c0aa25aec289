"""bench/rehearsal_time.py: the rehearsal's three commands timed, one row per checkout."""

import pytest

from bench import rehearsal_time


@pytest.mark.slow
def test_a_small_rehearsal_prints_one_timed_row(capsys):
    assert rehearsal_time.main(["--budget", "3gpuh"]) == 0     # one 7B trial is estimated at 2.67 GPU-h
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| this checkout |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    for cell in cells[:3]:   # wall / CPU seconds of run, analyze, report: each measured
        wall, cpu = (float(x) for x in cell.split(" / "))
        assert wall > 0 and cpu > 0
    assert float(cells[3]) == pytest.approx(sum(float(c.split(" / ")[0]) for c in cells[:3]), abs=0.2)


def test_a_compare_folder_that_is_no_checkout_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rehearsal_time.main(["--compare", str(tmp_path)])
    assert "is not a checkout of tuner" in capsys.readouterr().err
