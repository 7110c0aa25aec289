"""tuner.plan._runbook_pages: page one in plain words, the go/no-go checks, the validation banner and the health rows."""

import pytest

from helper import plan_training
from tuner.plan import render_runbook
from tuner.plan._runbook_pages import GLOSSARY, amount, duration, glossary, health_rows, validation_banner


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, gpu="H100-80GB", tokens=100e9, cost_per_gpu_hour=2.5)


def test_page_one_is_plain_words_with_a_glossary(plan13):
    # issue 31 item 12: FSDP, HSDP, MFU, NCCL and grad_accum were never defined
    md = render_runbook(plan13, today="2026-01-01")
    page_one = md[md.index("## 1."):md.index("## 2.")]
    c, ck = plan13["chosen"], plan13["checkpoint"]
    for needle in ("**What.**", "**How long.**", "**What it costs.**", "**What can go wrong", "13 billion-parameter",
                   "100 billion tokens", f"{c['gpu_hours']:,.0f} GPU-hours", f"{ck['worst_case_lost_s'] / 60:.0f} min"):
        assert needle in page_one, needle
    for term in ("FSDP", "HSDP", "MFU", "NCCL", "grad_accum", "micro-batch", "checkpoint", "requeue", "GiB"):
        assert f"| {term}" in page_one or f", {term}" in page_one or f"/ {term}" in page_one, term
    for jargon in ("dp_shard", "reduce-scatter", "SBATCH", "torchrun"):
        assert jargon not in page_one, jargon


def test_go_no_go_checks_are_commands_with_the_plans_thresholds(plan13):
    # issue 31 item 12: nccl-tests floor, first steps against the band, a save-and-restore drill, peak memory
    md = render_runbook(plan13, today="2026-01-01")
    section = md[md.index("## 2."):md.index("## 3.")]
    g = plan13["go_no_go"]
    assert "all_reduce_perf -b 1G -e 4G" in section and f"**{g['nccl_busbw_floor_gbs']} GB/s**" in section
    assert f"**{g['tokens_per_sec_per_gpu_floor']:,}**" in section and g["tokens_per_sec_per_gpu_floor"] == int(
        plan13["chosen"]["band"][0])
    assert "max_memory_reserved()" in section and f"**{g['memory_reserved_ceiling_gib']:.1f} GiB**" in section
    assert "scancel --signal=KILL" in section and f"**{g['drill_restart_ceiling_s']} s**" in section
    assert "dcgmi diag -r 2" in section and "ecc.errors.uncorrected.volatile.total" in section
    monitor = md[md.index("## 8."):md.index("## 9.")]
    for field in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION"):
        assert field in monitor, field


def test_the_banner_clears_only_for_a_proxy_on_the_plans_gpu(plan13):
    # issue 31 item 9: a CPU-only --validate removed the "not validated" banner
    base = {"note": "n", "rows": [], "band_pct_before": 7.0, "band_pct_after": 9.0, "fallbacks": []}
    cpu = render_runbook({**plan13, "validation": {**base, "same_gpu": False}}, today="2026-01-01")
    gpu = render_runbook({**plan13, "validation": {**base, "same_gpu": True}}, today="2026-01-01")
    assert "CPU proxy only" in cpu and "Not validated" not in gpu and "CPU proxy only" not in gpu


def test_durations_read_as_minutes_hours_or_days():
    assert duration(None) == "-"
    assert duration(0.5) == "30 min"
    assert duration(12.25) == "12.2 h" and duration(47.9) == "47.9 h"
    assert duration(72) == "3.0 days"


def test_amounts_read_in_words():
    assert (amount(100e9), amount(1.5e12), amount(26e9), amount(2.5e6)) == ("100 billion", "1.5 trillion",
                                                                             "26 billion", "2.5 million")
    assert amount(52000) == "52,000"


def test_the_banner_says_what_is_missing_and_names_the_gpu():
    inputs = {"inputs": {"gpu": "H100-80GB"}}
    assert validation_banner(inputs).startswith("Not validated: run `tuner plan ... --validate --proxy gpu` on H100-80GBs")
    assert "CPU proxy only" in validation_banner({**inputs, "validation": {"same_gpu": False}})
    assert validation_banner({**inputs, "validation": {"same_gpu": True}}) is None


def test_the_glossary_is_a_table_of_every_term_and_the_health_rows_name_dcgm_fields():
    table = glossary()
    assert table[:2] == ["| term | meaning |", "|---|---|"] and len(table) == 2 + len(GLOSSARY)
    rows = health_rows()
    assert all(r.startswith("| ") and r.endswith(" |") and r.count(" | ") == 2 for r in rows)
    assert "DCGM_FI_DEV_XID_ERRORS" in rows[0] and "drain the node" in rows[0]


def test_runbook_pages_doctests_run():
    import doctest

    import tuner.plan._runbook_pages
    result = doctest.testmod(tuner.plan._runbook_pages)
    assert result.failed == 0 and result.attempted > 0


def test_the_launch_checks_run_as_typed_in_a_shell_and_never_touch_the_real_runs_checkpoints(tmp_path):
    from tuner.cli import main

    assert main(["plan", "--model-size", "13b", "--gpus", "32", "--tokens", "100e9", "--runbook", str(tmp_path)]) == 0
    text = (tmp_path / "RUNBOOK.md").read_text()
    checks = text.split("4. **Save-and-restore drill**")[1].split("```bash")[1].split("```")[0]
    assert "$SLURM_JOB_ID" not in checks and "$SLURM_JOB_NAME" not in checks        # unset in the user's shell
    assert 'JOB=$(sbatch --parsable train.sbatch)' in checks and 'touch "$CKPT_DIR/STOP.$JOB.0"' in checks
    assert "-check-drill" in checks and "-check-speed" in text
    assert "export CKPT_DIR=${CKPT_DIR:-/shared/checkpoints/$SLURM_JOB_NAME}" in text   # the script: the checks' folder wins
