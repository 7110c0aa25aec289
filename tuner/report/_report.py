"""The report's files: report.html, RECIPE.md and nccl_tuner.conf, from an analysis; the
recipe as the study's optuna-dashboard note. Never recomputes statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.report._html import render_html
from tuner.report._output import output_dir, write_atomic
from tuner.report._recipe import DEFAULT_PLANNED_TOKENS, render_nccl_tuner_conf, render_recipe

__all__ = ["write_report", "save_recipe_note"]


def write_report(study, analysis: dict[str, Any], out_dir: str | Path, *,
                 planned_tokens: float | None = None, today: str | None = None) -> dict[str, Path]:
    """Write DIR/RECIPE.md, DIR/report.html and, when the recommendation forces an NCCL
    algorithm or protocol, DIR/nccl_tuner.conf; each all or nothing, readable by the team."""
    out = output_dir(out_dir)
    planned = planned_tokens or DEFAULT_PLANNED_TOKENS
    recipe = render_recipe(analysis, planned_tokens=planned, today=today)
    paths = {"recipe": write_atomic(out / "RECIPE.md", recipe),
             "html": write_atomic(out / "report.html", render_html(analysis, recipe, planned_tokens=planned))}
    conf = render_nccl_tuner_conf(analysis)
    if conf:
        paths["nccl_tuner_conf"] = write_atomic(out / "nccl_tuner.conf", conf)
    return paths


def save_recipe_note(study, recipe_markdown: str) -> bool:
    """Save the recipe as the study's note in optuna-dashboard; False if it is not installed."""
    save_note = _dashboard_save_note()
    if save_note is None:
        return False
    save_note(study, recipe_markdown)
    return True


def _dashboard_save_note():
    """optuna-dashboard's own ``save_note``, or None where it is not installed.

    The package's ``__init__`` loads its web app and with it optuna.importance and
    scikit-learn: about 1 s, half of a report that reuses its analysis. The writer's module
    (``optuna_dashboard/_note.py``, which imports only Optuna) is loaded by itself; where a
    version lays it out otherwise, the package import stands in."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("optuna_dashboard")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        where = Path(list(spec.submodule_search_locations)[0]) / "_note.py"
        note_spec = importlib.util.spec_from_file_location("optuna_dashboard._note", where)
        module = importlib.util.module_from_spec(note_spec)
        note_spec.loader.exec_module(module)
        return module.save_note
    except (OSError, ImportError, AttributeError):
        try:
            from optuna_dashboard import save_note
        except ImportError:
            return None
        return save_note
