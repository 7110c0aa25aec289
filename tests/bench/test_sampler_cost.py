"""bench/sampler_cost.py: a sim study per checkout, its refits counted, one row each."""

from bench.sampler_cost import main


def test_one_small_study_prints_its_row_with_refits_counted(capsys):
    assert main(["--spec", "studies/sim-llama13b-h100x8.toml", "--budget-gpuh", "1", "--seeds", "3"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| /")]
    assert len(rows) == 1 and "failed" not in rows[0], rows
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    trials, refits = int(cells[2]), int(cells[3])
    assert trials >= 3 and 1 <= refits <= trials   # one refit per change of the fit's inputs, at most one a trial
