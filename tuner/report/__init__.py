"""What a person reads: report.html, RECIPE.md, analysis.json and the terminal's progress
and summaries. Renders what tuner.stats computed; never recomputes a statistic.
"""

from tuner.report._cache import (
    analysis_key,
    load_or_analyze,
    write_analysis,
)
from tuner.report._html import (
    render_html,
)
from tuner.report._marks import (
    RECOMMENDATION_ATTR,
    mark_recommendation,
)
from tuner.report._output import (
    output_dir,
    write_atomic,
)
from tuner.report._progress import (
    Progress,
    ProgressState,
    format_duration,
)
from tuner.report._recipe import (
    DEFAULT_PLANNED_TOKENS,
    render_nccl_tuner_conf,
    render_recipe,
)
from tuner.report._report import (
    save_recipe_note,
    write_report,
)
from tuner.report._terminal import (
    format_run_summary,
)

__all__ = [
    "DEFAULT_PLANNED_TOKENS",
    "Progress",
    "ProgressState",
    "RECOMMENDATION_ATTR",
    "analysis_key",
    "format_duration",
    "format_run_summary",
    "load_or_analyze",
    "mark_recommendation",
    "output_dir",
    "render_html",
    "render_nccl_tuner_conf",
    "render_recipe",
    "save_recipe_note",
    "write_analysis",
    "write_atomic",
    "write_report",
]
