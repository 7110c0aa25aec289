"""The command line: one clear error line for bad input; a real run read by Optuna's own CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import fast_spec

ROOT = Path(__file__).resolve().parents[1]


def _env(extra=None):
    """This checkout's tuner first, whatever the working directory (an editable install may
    point at another checkout)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def tuner(*args, cwd, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=_env(env))


def test_help_explains_every_command(tmp_path):
    out = tuner("--help", cwd=tmp_path)
    assert out.returncode == 0
    for cmd in ("run", "status", "analyze", "report", "distill", "suggest"):
        assert cmd in out.stdout
    run_help = tuner("run", "--help", cwd=tmp_path).stdout
    assert "40gpuh" in run_help and "TUNER_STORAGE" in run_help


def test_a_tuner_error_is_one_line_and_any_other_exception_keeps_its_traceback(monkeypatch, capsys):
    from tuner import cli
    from tuner.errors import StudyConflictError

    def user_error(args):
        raise StudyConflictError("no study named 'x' in sqlite:///t.db (it holds no study)")

    def bug(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "status", user_error)
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err == "tuner status: error: no study named 'x' in sqlite:///t.db (it holds no study)\n"
    monkeypatch.setitem(cli.COMMANDS, "status", bug)
    with pytest.raises(ZeroDivisionError):
        cli.main(["status"])


@pytest.mark.slow  # a `tuner` process each
@pytest.mark.parametrize("args, needle", [
    (["run", "--study", "missing.toml"], "missing.toml: cannot read spec"),
    (["run", "--study", str(ROOT / "studies/quickstart.toml"), "--budget", "40h"], "--budget: bad budget '40h'"),
    (["run", "--study", str(ROOT / "studies/quickstart.toml"), "--storage", "sqlite:////no/such/dir/t.db"],
     "folder /no/such/dir does not exist"),
    (["status", "--storage", "sqlite:///absent.db"], "no such database file"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    out = tuner(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert not list(tmp_path.glob("*.db")), "nothing half-written"


@pytest.mark.slow
def test_storage_precedence_flag_env_default(tmp_path):
    spec = fast_spec(tmp_path)
    env = {"TUNER_STORAGE": f"sqlite:///{tmp_path}/env.db", "FAST_OBJECTIVE_MODE": "ok"}
    out = tuner("run", "--study", spec.source_path, "--budget", "60gpus", "--max-trials", "1", "--quiet",
                cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "env.db").exists() and not (tmp_path / "tuner.db").exists()
    status = tuner("status", cwd=tmp_path, env=env)
    assert "ok 1" in status.stdout and "best: trial 0 (baseline)" in status.stdout


@pytest.mark.slow
def test_a_misspelt_study_name_lists_the_studies_there(tmp_path):
    import optuna
    optuna.create_study(study_name="fast", storage=f"sqlite:///{tmp_path}/tuner.db")
    for cmd in ("analyze", "status"):
        extra = ["--out", str(tmp_path / "out")] if cmd == "analyze" else []
        out = tuner(cmd, "--study-name", "fsat", *extra, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == (f"tuner {cmd}: error: no study named 'fsat' in sqlite:///tuner.db "
                                      "(studies there: fast)"), out.stderr


@pytest.mark.slow
def test_run_then_status_then_optuna_best_trial(tmp_path):
    spec = fast_spec(tmp_path)
    out = tuner("run", "--study", spec.source_path, "--budget", "40gpus", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "stopped: budget" in out.stdout and "best: trial" in out.stdout
    best = subprocess.run(["optuna", "best-trial", "--study-name", "fast", "--storage",
                           "sqlite:///tuner.db", "-f", "json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert best.returncode == 0, best.stderr
    record = json.loads(best.stdout)
    assert record["user_attrs"]["status"] == "ok" and record["value"] > 0


@pytest.mark.parametrize("args, flag", [
    (["run", "--study", "s.toml", "--max-trials", "-1"], "--max-trials: -1 is below 1"),
    (["run", "--study", "s.toml", "--grace-period", "-5"], "--grace-period: -5 is below 1"),
    (["analyze", "--study-name", "s", "--out", "o", "--n-boot", "-1"], "--n-boot: -1 is below 0"),
    (["report", "--study-name", "s", "--out", "o", "--planned-tokens", "-5"], "--planned-tokens: -5 is not a finite"),
    (["suggest", "--model-size", "7b", "--gpus", "0", "--dataset-size", "52k"], "--gpus: 0 is below 1"),
    (["run", "--study", "s.toml", "--max-same-errors", "-2"], "--max-same-errors: -2 is below 0"),
    (["run", "--study", "s.toml", "--launcher", "kubernetes"], "--launcher: invalid choice: 'kubernetes'"),
    (["run"], "the following arguments are required: --study"),
    (["plan", "--model-size", "13b", "--gpus", "8", "--tokens", "-1e9"], "--tokens: -1e9 is not a finite number > 0"),
])
def test_bad_numbers_are_refused_up_front_naming_the_flag(args, flag, capsys):
    """One line naming the flag, not argparse's usage block (issue 33: six to twelve lines)."""
    from tuner import cli

    with pytest.raises(SystemExit) as info:
        cli.main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and flag in err and len(err.strip().splitlines()) == 1, err


def test_a_negative_budget_is_one_line_about_the_budget(tmp_path, monkeypatch, capsys):
    """`--budget -5gpuh` used to read as an unknown flag ("expected one argument") plus usage."""
    from tuner import cli

    monkeypatch.chdir(tmp_path)
    spec = fast_spec(tmp_path)
    assert cli.main(["run", "--study", spec.source_path, "--budget", "-5gpuh"]) == 2
    err = capsys.readouterr().err
    assert err == ("tuner run: error: --budget: bad budget '-5gpuh': write a positive number and a unit, "
                   "e.g. 40gpuh, 90gpum, 600gpus\n")
    assert not (tmp_path / "tuner.db").exists() and not (tmp_path / "runs").exists()


def test_a_failed_preflight_leaves_no_database_lock_or_runs_folder(tmp_path, monkeypatch, capsys):
    """Preflight fails after the runs folder and the storage were opened: both go again."""
    import tuner.study._coordinator as coordinator
    from tuner import cli
    from tuner.errors import PreflightError

    def fail(spec, **_):
        raise PreflightError("preflight: data.source bad.json: no examples (an empty file or `[]`)")

    monkeypatch.setattr(coordinator, "needs_preflight", lambda spec, simulated: True)
    monkeypatch.setattr(coordinator, "preflight", fail)
    monkeypatch.chdir(tmp_path)
    spec = fast_spec(tmp_path)
    (tmp_path / "kept").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["run", "--study", spec.source_path, "--budget", "1gpuh", "--quiet"]) == 2
    assert capsys.readouterr().err == "tuner run: error: preflight: data.source bad.json: no examples (an empty file or `[]`)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before          # no tuner.db, tuner.lock, runs/


def test_an_unreachable_storage_leaves_no_runs_folder(tmp_path, monkeypatch, capsys):
    from tuner import cli

    monkeypatch.chdir(tmp_path)
    spec = fast_spec(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    url = "postgresql+psycopg2://nobody@127.0.0.1:1/none"          # port 1: refused at once
    assert cli.main(["run", "--study", spec.source_path, "--budget", "1gpuh", "--storage", url, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tuner run: error: cannot open storage") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_help_and_readme_give_the_same_quickstart_budget(capsys):
    from tuner import cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    budget = capsys.readouterr().out.split("--budget ")[-1].split(";")[0]
    assert f"--budget {budget}" in (ROOT / "README.md").read_text()


def test_a_failed_preflight_keeps_a_database_that_holds_trials(tmp_path, monkeypatch):
    import optuna

    import tuner.study._coordinator as coordinator
    from tuner import cli
    from tuner.errors import PreflightError

    monkeypatch.setattr(coordinator, "needs_preflight", lambda spec, simulated: True)
    monkeypatch.setattr(coordinator, "preflight", lambda spec, **_: (_ for _ in ()).throw(PreflightError("preflight: x")))
    monkeypatch.chdir(tmp_path)
    spec = fast_spec(tmp_path)
    other = optuna.create_study(study_name="other", storage="sqlite:///tuner.db")
    other.add_trial(optuna.trial.create_trial(value=1.0))
    assert cli.main(["run", "--study", spec.source_path, "--budget", "1gpuh", "--quiet"]) == 2
    assert (tmp_path / "tuner.db").exists()


@pytest.mark.slow  # a `tuner` process that loads `datasets` (~10-25 s on a loaded 2-core VM)
def test_a_broken_data_file_is_one_line_without_datasets_noise(tmp_path):
    (tmp_path / "bad.json").write_text('{"broken": ')
    text = (ROOT / "studies/quickstart.toml").read_text()
    spec = tmp_path / "q.toml"
    spec.write_text(text.replace('source = "synthetic"', f'source = "{tmp_path}/bad.json"'))
    out = tuner("run", "--study", str(spec), "--budget", "0.01gpuh", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("tuner run: error: preflight: data.source") and out.stderr.count("\n") == 1, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "q.toml"]


@pytest.mark.slow  # a `tuner` process
def test_a_closed_pipe_exits_quietly(tmp_path):
    import optuna
    optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/t.db")
    out = subprocess.run(f"{sys.executable} -m tuner.cli status --storage sqlite:///{tmp_path}/t.db | true",
                         shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
    assert out.stderr == "", out.stderr                          # no BrokenPipeError traceback


def test_a_closed_pipe_in_process_returns_141_and_prints_nothing(monkeypatch, capsys, tmp_path):
    import os

    from tuner import cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setitem(cli.COMMANDS, "status", broken)
    saved = os.dup(1)
    try:
        with capsys.disabled():
            assert cli.main(["status"]) == 141
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("extra, needle", [
    (["--budget", "1e999gpuh"], "--budget: bad budget '1e999gpuh': not a finite number"),
    (["--budget", "1gpuh", "--study-name", "../../x"], "--study-name: '../../x' would put trial folders outside"),
    (["--budget", "1gpuh", "--study-name", ""], "--study-name: must not be empty"),     # an unset $NAME
    (["--budget", "0.001gpuh"], "budget 0.001 GPU-h is less than one trial"),
    (["--budget", "1gpuh", "--storage", "sqlite:///"], "names no database file"),
])
def test_bad_budget_or_study_name_leaves_nothing_behind(tmp_path, monkeypatch, capsys, extra, needle):
    from tuner import cli

    monkeypatch.chdir(tmp_path)
    spec = fast_spec(tmp_path)
    storage = [] if "--storage" in extra else ["--storage", f"sqlite:///{tmp_path}/t.db"]
    assert cli.main(["run", "--study", spec.source_path, *storage, *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "runs").exists()


def test_every_command_has_a_description_and_defaults_show(capsys):
    from tuner import cli

    for name in cli.COMMANDS:
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        paragraphs = capsys.readouterr().out.split("\n\n")
        assert not paragraphs[1].startswith("options:"), f"`tuner {name} --help` has no description"
        if name == "report":
            assert "default 1e+09" in " ".join(paragraphs[-1].split())


def test_a_misspelt_option_is_named_by_its_commands_parser(capsys):
    from tuner import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--study", "s.toml", "--budgett", "4gpuh"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err == ("tuner run: error: unrecognized arguments: --budgett 4gpuh "
                                            "(see `tuner run --help`)")


def test_a_run_the_storage_left_for_good_says_how_to_resume(monkeypatch, capsys):
    from tuner import cli
    from tuner.errors import StorageUnreachableError

    def gone(args):   # what tuner.storage's retries raise once an outage outlasts the wait
        raise StorageUnreachableError("reading the study: storage unreachable after 31 tries in 300 s: Connection refused")

    monkeypatch.setitem(cli.COMMANDS, "run", gone)
    assert cli.main(["run", "--study", "s.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tuner run: error: reading the study: storage unreachable after 31 tries in 300 s")
    assert err.rstrip().endswith("run the same command again to resume") and len(err.strip().splitlines()) == 1
