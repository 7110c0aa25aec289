"""Analysis computed once: `tuner report` reuses DIR/analysis.json while the study is unchanged.

The key is what changes when the study does: its trial count, the last completion time, its
spec fingerprint and budget limit; plus the bootstrap count asked for and a hash of
tuner.stats' own source (a new version of the statistics never serves an old analysis).
The key and the analysis read the same trials (one read of the study), so a trial that
finishes meanwhile makes the next report compute again rather than reuse an analysis that
missed it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["analysis_key", "load_or_analyze", "write_analysis", "CACHE_KEY"]

CACHE_KEY = "cache_key"


def _stats_source_hash() -> str:
    # found, not imported: a report that reuses its analysis never loads the statistics (SciPy)
    from importlib.util import find_spec

    digest = hashlib.sha256()
    for path in sorted(Path(find_spec("tuner.stats").submodule_search_locations[0]).glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def analysis_key(study, *, n_boot: int | None, trials=None) -> dict[str, Any]:
    """What must be equal for an analysis.json to describe ``study`` as it is now (``trials``:
    its frozen trials, where the caller has read them; ``n_boot`` None: the statistics' default,
    whose changes change their source hash)."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    done = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    attrs = study.user_attrs
    return {"n_trials": len(trials), "n_finished": len(done),
            "last_complete": max(done).isoformat() if done else None,
            "spec_fingerprint": attrs.get("spec_fingerprint"),
            "budget_limit_gpu_seconds": attrs.get("budget_limit_gpu_seconds"),
            "n_boot": n_boot, "stats_source": _stats_source_hash()}


def write_analysis(analysis: dict[str, Any], out_dir: str | Path) -> Path:
    """Write DIR/analysis.json all or nothing (INTERFACES.md's schema, extended)."""
    from tuner.report._output import output_dir, write_atomic
    return write_atomic(output_dir(out_dir) / "analysis.json", json.dumps(analysis, indent=2))


def _cached(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    try:
        analysis = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(analysis, dict) or analysis.get(CACHE_KEY) != key:
        return None
    return analysis


def load_or_analyze(study, out_dir: str | Path, *, n_boot: int | None = None,
                    reuse: bool = True) -> tuple[dict[str, Any], bool]:
    """(analysis, reused): DIR/analysis.json when its key matches the study now, else a fresh
    analysis written there (with its key). ``reuse=False`` always computes."""
    from tuner.report._output import output_dir

    if not reuse and n_boot is not None:   # computing anyway: the default given by its number keys as the default
        from tuner.stats import N_BOOT
        if n_boot == N_BOOT:
            n_boot = None
    trials = study.get_trials(deepcopy=False)   # one read: the key and the analysis see the same trials
    key = analysis_key(study, n_boot=n_boot, trials=trials)
    path = output_dir(out_dir) / "analysis.json"
    if reuse and (analysis := _cached(path, key)) is not None:
        return analysis, True
    from tuner.stats import analyze_study

    boot = {} if n_boot is None else {"n_boot": n_boot}
    analysis = analyze_study(study, trials=trials, **boot)
    analysis[CACHE_KEY] = key
    write_analysis(analysis, path.parent)
    return analysis, False
