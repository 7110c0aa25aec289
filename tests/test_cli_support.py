"""tuner._cli_support: one-line argparse errors, values that start with '-', and what a refused run leaves behind."""

import argparse
import sqlite3

import pytest

from tuner._cli_support import Parser, glue_dash_values, new_paths, number


def test_a_parser_mistake_is_one_line_naming_the_help(capsys):
    parser = Parser(prog="tuner run")
    parser.add_argument("--budget", required=True)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == "tuner run: error: the following arguments are required: --budget (see `tuner run --help`)\n"


def test_a_number_is_finite_and_at_least_its_floor():
    workers = number(int, 1)
    assert workers("4") == 4
    for text, message in (("x", "'x' is not an integer"), ("0", "0 is below 1")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            workers(text)
    share = number(float, 0.0, above=True)
    assert share("0.5") == 0.5
    for text, message in (("0", "0 is not a finite number > 0"), ("inf", "inf is not a finite number"),
                          ("nan", "nan is not a finite number"), ("half", "'half' is not a number")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            share(text)


def test_a_value_starting_with_a_dash_is_glued_to_its_flag_but_a_flag_is_not():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run = sub.add_parser("run")
    run.add_argument("--budget")
    run.add_argument("--resume", action="store_true")
    assert glue_dash_values(parser, ["run", "--budget", "-5gpuh"]) == ["run", "--budget=-5gpuh"]
    assert glue_dash_values(parser, ["run", "--budget", "--resume"]) == ["run", "--budget", "--resume"]
    assert glue_dash_values(parser, ["run", "--resume", "-x"]) == ["run", "--resume", "-x"]


def test_a_refused_run_removes_the_new_empty_database_and_folders_but_nothing_that_was_there(tmp_path):
    db, runs = tmp_path / "study.db", tmp_path / "runs"
    remove = new_paths(f"sqlite:///{db}", runs)
    sqlite3.connect(db).close()
    (runs / "trial-0").mkdir(parents=True)
    remove()
    assert not db.exists() and not runs.exists()
    old = tmp_path / "old.db"
    old.write_bytes(b"")
    (runs / "kept").mkdir(parents=True)
    (runs / "kept" / "log").write_text("x")
    new_paths(f"sqlite:///{old}", runs)()
    assert old.exists() and (runs / "kept" / "log").exists()


def test_a_new_database_that_already_holds_a_trial_is_kept(tmp_path):
    db = tmp_path / "study.db"
    remove = new_paths(f"sqlite:///{db}", tmp_path / "runs")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE trials (trial_id INTEGER)")
        conn.execute("INSERT INTO trials VALUES (1)")
    conn.close()
    remove()
    assert db.exists()
