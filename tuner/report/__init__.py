"""What a person reads: report.html, RECIPE.md, analysis.json and the terminal's progress
and summaries. Renders what tuner.stats computed; never recomputes a statistic.
"""

from tuner.report._output import (
    output_dir,
    write_atomic,
)
from tuner.report._progress import (
    Progress,
    ProgressState,
    format_duration,
)
from tuner.report._report import (
    DEFAULT_PLANNED_TOKENS,
    render_recipe,
    save_recipe_note,
    write_report,
)

__all__ = [
    "DEFAULT_PLANNED_TOKENS",
    "Progress",
    "ProgressState",
    "format_duration",
    "output_dir",
    "render_recipe",
    "save_recipe_note",
    "write_atomic",
    "write_report",
]
