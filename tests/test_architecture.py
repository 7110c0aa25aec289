"""The package structure docs/architecture.md describes, checked from the code's own imports.

Every import statement (top-level or inside a function) of tuner/, helper/, objectives/ and
bench/ is read with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("tuner", "helper", "objectives", "bench")
TRAINING_RANK_CONTRACT = {"tuner", "tuner.knobs", "tuner.protocol", "tuner.errors", "tuner.measurement"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for tree in TREES for p in (ROOT / tree).rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports: ``from a.b import c`` is a.b.c when that is a module;
    a bench script's bare ``import x`` is bench.x when bench/x.py exists (bench scripts put
    their own folder on sys.path)."""
    in_bench = path.parent == ROOT / "bench"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        if in_bench:
            names = [f"bench.{n}" if f"bench.{n}" in known else n for n in names]
        out |= {n for n in names if n in known}
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, set(mods)) - {m} for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_tuner_helper_objectives_and_bench():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_tuner_top_level_is_the_contract_and_the_cli():
    top = sorted(p.name for p in (ROOT / "tuner").glob("*.py"))
    assert len(top) <= 10, top


def test_few_tuner_modules_import_helper():
    graph = _graph()
    users = sorted(m for m, deps in graph.items() if m.startswith("tuner") and any(
        d == "helper" or d.startswith("helper.") for d in deps))
    assert len(users) <= 6, users


def test_no_module_over_400_lines():
    big = {m: n for m, p in _modules().items() if not m.startswith("bench")
           and (n := len(p.read_text().splitlines())) > 400}
    assert big == {}


def test_nothing_outside_a_package_imports_its_private_modules():
    found = []
    for module, deps in _graph().items():
        for dep in deps:
            parts = dep.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
            owner = ".".join(parts[:private])
            if private is not None and module != owner and not module.startswith(owner + "."):
                found.append(f"{module} -> {dep}")
    assert found == []


def test_the_training_rank_imports_only_tuners_contract():
    graph = _graph()
    reached = defaultdict(set)
    for module, deps in graph.items():
        if module.startswith("objectives"):
            reached[module] = {d for d in deps if d.startswith("tuner")}
    assert {m: sorted(d - TRAINING_RANK_CONTRACT) for m, d in reached.items() if d - TRAINING_RANK_CONTRACT} == {}


def test_the_library_entry_points_stay_importable():
    """INTERFACES.md's names, wherever the code lives."""
    import tuner
    from tuner import RunOptions, analyze_study, load_spec, parse_spec, run_study  # noqa: F401
    from tuner.launch import Launcher, TrialRequest, TrialResult  # noqa: F401
    from tuner.measurement import batch_means_ci, stop_reason  # noqa: F401

    assert all(getattr(tuner, name) is not None for name in tuner.__all__)


def _test_file_for(path: Path) -> Path:
    """helper/X.py -> tests/helper/test_X.py; objectives likewise; tuner/X.py -> tests/test_X.py;
    tuner/PKG/X.py or tuner/PKG/_X.py -> tests/PKG/test_X.py (a private module's underscore dropped)."""
    parts = path.relative_to(ROOT).parts
    name = f"test_{path.stem.lstrip('_')}.py"
    if parts[0] in ("helper", "objectives"):
        return ROOT / "tests" / parts[0] / name
    return ROOT / "tests" / Path(*parts[1:-1]) / name


def test_every_module_has_a_same_named_test_file():
    """A newcomer finds a module's tests at the first try."""
    modules = [p for tree in ("helper", "objectives", "tuner") for p in sorted((ROOT / tree).rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py")]
    assert len(modules) > 100
    missing = [f"{p.relative_to(ROOT)} -> {_test_file_for(p).relative_to(ROOT)}"
               for p in modules if not _test_file_for(p).exists()]
    assert missing == []
    assert _test_file_for(ROOT / "tuner" / "study" / "_admission.py") == ROOT / "tests" / "study" / "test_admission.py"
    assert _test_file_for(ROOT / "tuner" / "cli.py") == ROOT / "tests" / "test_cli.py"
