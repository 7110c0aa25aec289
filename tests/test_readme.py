"""README's two quick-start commands stay true: CI runs the same test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_two_commands_main_job_and_tests():
    commands = quickstart_commands()
    assert len(commands) == 2
    run, test = commands
    assert "tuner run --study studies/quickstart.toml --budget 0.08gpuh" in run
    assert "pytest" in test


def test_ci_runs_readmes_test_command_verbatim():
    test = quickstart_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci


def test_quickstart_spec_exists_and_is_valid():
    from tuner.spec import load_spec
    assert load_spec(ROOT / "studies/quickstart.toml").budget_gpu_seconds == 288.0
