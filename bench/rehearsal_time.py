"""The 7B rehearsal end to end, timed: `tuner run` on the sim launcher, `tuner analyze`, `tuner report`.

Each command runs as a user runs it (a fresh process, its own SQLite file), timed by
bench/analysis_scaling.py's ``timed`` (wall seconds, the child's CPU seconds). ``--compare DIR``
times another checkout of tuner the same way first, so the two rows are measured side by side
on the same machine state; each checkout's commands run from its own directory (``python -m``
puts the working directory ahead of PYTHONPATH). A markdown table, with the load average.

    python bench/rehearsal_time.py                                   # this checkout, 40 GPU-h
    python bench/rehearsal_time.py --compare /path/to/other/checkout
    python bench/rehearsal_time.py --budget 4gpuh                    # a quick one
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.analysis_scaling import timed  # noqa: E402  (a command in a fresh process, from its checkout)

STUDY = "studies/llama7b-h100x32.toml"
NAME = "llama7b-h100x32-sim"

__all__ = ["time_rehearsal", "main"]


def _timed(cmd: list[str], checkout: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one command run on ``checkout``'s code; raises if it fails."""
    wall, cpu, code = timed(cmd, str(checkout))
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[2:4])} failed (exit {code}) in {checkout} (its stderr above)")
    return wall, cpu


def time_rehearsal(checkout: Path, budget: str, folder: Path) -> dict[str, tuple[float, float]]:
    """{"run"|"analyze"|"report": (wall s, CPU s)} of the rehearsal on ``checkout``'s code."""
    db = f"sqlite:///{folder / 'study.db'}"
    out = folder / "out"
    tuner = [sys.executable, "-m", "tuner.cli"]
    return {
        "run": _timed([*tuner, "run", "--study", STUDY, "--launcher", "sim", "--budget", budget, "--storage", db,
                       "--runs-dir", str(folder / "runs")], checkout),
        "analyze": _timed([*tuner, "analyze", "--study-name", NAME, "--storage", db, "--out", str(out)], checkout),
        "report": _timed([*tuner, "report", "--study-name", NAME, "--storage", db, "--out", str(out)], checkout),
    }


def _row(label: str, t: dict[str, tuple[float, float]]) -> str:
    cells = " | ".join(f"{t[k][0]:.1f} / {t[k][1]:.1f}" for k in ("run", "analyze", "report"))
    return f"| {label} | {cells} | {sum(w for w, _ in t.values()):.1f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="40gpuh", help="the rehearsal's budget (default 40gpuh, README's)")
    parser.add_argument("--compare", metavar="DIR", type=Path, help="another checkout of tuner, timed first")
    args = parser.parse_args(argv)
    checkouts = ([(args.compare.resolve(), f"{args.compare.name} (--compare)")] if args.compare else [])
    checkouts.append((ROOT, "this checkout"))
    for path, _ in checkouts:
        if not (path / STUDY).exists():
            parser.error(f"{path} is not a checkout of tuner: no {STUDY}")
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, budget {args.budget}")
    print("| code | run wall / CPU s | analyze wall / CPU s | report wall / CPU s | total wall s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path, label in checkouts:
        with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
            print(_row(label, time_rehearsal(path, args.budget, Path(tmp))), flush=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
