"""`tuner report` reuses analysis.json while the study is unchanged (issue 32, item 2)."""

import json

import optuna
import pytest

import tuner.stats
from tests.stats.test_analysis import synthetic_study
from tuner.report import analysis_key, load_or_analyze
from tuner.storage import study_storage


@pytest.fixture()
def counted(monkeypatch):
    calls = []

    def fake(study, *, n_boot=200, seed=0, trials=None):
        calls.append(n_boot)
        return {"study": study.study_name, "n_trials": len(study.trials)}

    monkeypatch.setattr(tuner.stats, "analyze_study", fake)
    return calls


def test_reused_while_unchanged_and_recomputed_after_a_new_trial(tmp_path, counted):
    url = f"sqlite:///{tmp_path}/t.db"
    optuna.copy_study(from_study_name="synthetic", from_storage=study_storage(synthetic_study(n=6)), to_storage=url)
    study = optuna.load_study(study_name="synthetic", storage=url)
    first, reused = load_or_analyze(study, tmp_path / "out")
    assert not reused and counted == [200] and first["cache_key"]["n_trials"] == 6
    assert json.loads((tmp_path / "out" / "analysis.json").read_text()) == first

    again, reused = load_or_analyze(optuna.load_study(study_name="synthetic", storage=url), tmp_path / "out")
    assert reused and again == first and len(counted) == 1

    trial = study.ask()
    study.tell(trial, 1.0)        # a new trial finishes: the old analysis no longer describes the study
    fresh, reused = load_or_analyze(study, tmp_path / "out")
    assert not reused and len(counted) == 2 and fresh["n_trials"] == 7

    _, reused = load_or_analyze(study, tmp_path / "out", n_boot=200, reuse=False)   # `tuner analyze --n-boot 200`
    assert not reused and len(counted) == 3
    _, reused = load_or_analyze(study, tmp_path / "out")     # the default's analysis, however it was asked for
    assert reused and len(counted) == 3
    _, reused = load_or_analyze(study, tmp_path / "out", n_boot=0)     # another bootstrap count: another key
    assert not reused and counted[-1] == 0


def test_the_key_follows_trials_spec_and_completion():
    study = synthetic_study(n=6)
    key = analysis_key(study, n_boot=200)
    assert key == analysis_key(study, n_boot=200)
    study.set_user_attr("spec_fingerprint", "another spec")
    assert analysis_key(study, n_boot=200) != key
    trial = study.ask()
    running = analysis_key(study, n_boot=200)
    study.tell(trial, 1.0)
    assert analysis_key(study, n_boot=200) not in (key, running)


def test_a_report_that_reuses_its_analysis_loads_no_statistics(tmp_path):
    """`tuner report` after `tuner analyze` reads analysis.json and draws: neither SciPy's
    statistics nor scikit-learn (optuna-dashboard's web app) is imported, which was half of
    its time (issue 32)."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/t.db"
    optuna.copy_study(from_study_name="synthetic", from_storage=study_storage(synthetic_study(n=12)), to_storage=url)
    args = ["--storage", url, "--study-name", "synthetic", "--out", str(tmp_path / "out")]
    code = ("import sys\nfrom tuner.cli import main\nassert main(sys.argv[1:]) == 0\n"
            "print(sorted(m for m in ('scipy.stats', 'sklearn', 'optuna_dashboard') if m in sys.modules))")
    first = subprocess.run([sys.executable, "-c", code, "analyze", *args],
                           capture_output=True, text=True, check=True)
    assert "'scipy.stats'" in first.stdout.splitlines()[-1]      # analyze computes
    again = subprocess.run([sys.executable, "-c", code, "report", *args], capture_output=True, text=True, check=True)
    assert "reused" in again.stdout, again.stdout
    assert again.stdout.splitlines()[-1] == "[]", again.stdout
