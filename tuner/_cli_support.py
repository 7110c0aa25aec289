"""The command line's plumbing: one-line argparse errors, values that start with ``-``, and
the files a refused `tuner run` must not leave behind. tuner.cli stays the thin part."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["Parser", "number", "glue_dash_values", "new_paths"]


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line (``tuner run: error: --budget: ...``), not the usage
    block: the line names the problem and where the help is."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def number(cast: type, low: float, *, above: bool = False):
    """argparse type: a finite ``cast`` number >= ``low`` (> ``low`` when ``above``), refused up
    front with argparse's one line that names the flag."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if cast is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number > {low:g}" if above
                                             else f"{value} is below {low}")
        return value
    return parse


def glue_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--budget -5gpuh`` -> ``--budget=-5gpuh``: argparse reads a value starting with ``-`` as
    another flag ("expected one argument"); glued, the value reaches its own check, which names
    the problem (a budget must be positive)."""
    parsers = [parser] + [p for a in parser._actions if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
                          for p in a.choices.values()]
    actions = [a for p in parsers for a in p._actions]  # noqa: SLF001
    flags = {o for a in actions for o in a.option_strings}
    takes_value = {o for a in actions for o in a.option_strings if a.nargs is None and a.const is None
                   and not isinstance(a, argparse._HelpAction)}  # noqa: SLF001
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok, nxt = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if tok in takes_value and nxt is not None and nxt.startswith("-") and nxt not in flags:
            out.append(f"{tok}={nxt}")
            i += 2
        else:
            out.append(tok)
            i += 1
    return out


def new_paths(storage_url: str, runs_dir: Path):
    """A function that removes what this run created, if the run ended before any trial: a new
    SQLite file holding no trial (and its lock, WAL and shm files), and empty new folders under
    a new ``--runs-dir``. Paths that existed before are never touched."""
    path = storage_url[len("sqlite:///"):] if storage_url.startswith("sqlite:///") else ""
    db = Path(path) if path.strip() else None  # no file named: the storage's own error says so
    files = [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")] + [db.with_suffix(".lock")] \
        if db and str(db) != ":memory:" else []
    new_files = [f for f in files if not f.exists()]
    runs_new = not runs_dir.exists()

    def remove() -> None:
        if db is not None and db in new_files and db.exists() and _holds_trials(db):
            return
        for f in new_files:
            f.unlink(missing_ok=True)
        if runs_new and runs_dir.is_dir():
            for folder in sorted((p for p in runs_dir.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir_if_empty(folder)
            _rmdir_if_empty(runs_dir)
    return remove


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty: something of value is there


def _holds_trials(db: Path) -> bool:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM trials").fetchone()[0] > 0
    except sqlite3.Error:  # no Optuna tables yet
        return False
