"""What `tuner run` prints at the end and `tuner status` prints: one study's standing.

The recommendation (the study attr tuner analyze / report write, tuner.report.mark_recommendation)
comes first when there is one; Optuna's best trial, the highest single run, is labelled as such.
"""

from __future__ import annotations

from typing import Any

__all__ = ["format_run_summary"]


def _params(params: dict[str, Any]) -> list[str]:
    width = max((len(k) for k in params), default=0)
    return [f"    {k:<{width}}  {v}" for k, v in params.items()]


def _ci(d: dict[str, Any] | None, fmt: str = ",.1f") -> str:
    if not d:
        return "n/a"
    lo, hi = d["ci95"]
    return f"{d['mean']:{fmt}} (95% CI {lo:{fmt}} to {hi:{fmt}})"


def format_run_summary(summary, *, status: bool = False) -> str:
    """Lines for a tuner.study.RunSummary; ``status`` for `tuner status` (no "run here" count)."""
    sim = " [SIMULATED: trials come from the performance model, not real jobs]" if summary.simulated else ""
    head = "status" if status else f"{summary.launched} trials run here; stopped: {summary.stopped or '-'}"
    lines = [f"study {summary.study_name}{sim}: {head}",
             "  trials by status: " + (", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())) or "none"),
             f"  budget: {summary.used_gpu_seconds / 3600:.4f} / {summary.limit_gpu_seconds / 3600:.4f} GPU-h used"
             f" ({max(0.0, summary.limit_gpu_seconds - summary.used_gpu_seconds) / 3600:.4f} left)"]
    rec = getattr(summary, "recommendation", None)
    b = summary.best
    if rec:
        speed = rec.get("speedup_vs_baseline")
        lines.append(f"  recommended: trial {rec['trial']}: {_ci(rec.get('tokens_per_sec_per_gpu'))} tokens/s/GPU"
                     + (f", {_ci(speed, '.2f')}x the baseline" if speed else "")
                     + f" [{rec.get('chosen_on') or 'tuner analyze'}; analysis of {rec.get('n_trials', '?')} trials"
                     + (f", {rec['written_at']}" if rec.get("written_at") else "") + "]")
        lines += _params(rec.get("params") or {})
    if b:
        role = f" ({b['role']})" if b.get("role") else ""
        if rec and b["trial"] != rec["trial"]:
            lines.append(f"  highest single run (Optuna's best trial; not the recommendation, one noisy run reads "
                         f"high): trial {b['trial']}{role}: {b['tokens_per_sec_per_gpu']:,.1f} tokens/s/GPU")
        elif not rec:
            lines.append(f"  best: trial {b['trial']}{role}: {b['tokens_per_sec_per_gpu']:,.1f} tokens/s/GPU"
                         " (highest single run; `tuner analyze` recommends on re-measurements)")
            lines += _params(b["params"])
    elif not rec:
        lines.append("  best: none yet")
    return "\n".join(lines)
