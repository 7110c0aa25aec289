"""The performance model against published FSDP runs (the tables of docs/validation.md).

    python bench/validate_model.py                  # print the tables (markdown)
    python bench/validate_model.py --write-default  # first refit helper/default_calibration.json
    python bench/validate_model.py --memory-trace   # also the FSDP2 memory tracker (slow: ~1 min a case)

Throughput is scored leave-one-source-out: a source is one published table (one cluster, one
date, one software version: each of llm-foundry's four benchmark tables, torchtitan's H100 and
A100 pages, fms-fsdp's README); each is predicted by a calibration fitted, from the built-in
priors, to every other source's rows, never its own. Memory: every published configuration
that ran, under its publisher's stack (helper.stacks), must be predicted to fit.
The shipped default calibration is fitted to the ``role="calibration"`` rows of
helper/published.py (MPT sizes other than 7B/13B).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helper import STACKS, estimate_memory, get_gpu, load_calibration, predict_throughput, suggest_config  # noqa: E402
from helper.calibration import DEFAULT_CALIBRATION_PATH, SCHEMA_VERSION  # noqa: E402
from helper.fitting import fit_calibration  # noqa: E402
from helper.gpus import gib  # noqa: E402
from helper.published import PUBLISHED  # noqa: E402

COMMAND = "python bench/validate_model.py"
_KNOBS = ("gpu", "seq_len", "micro_batch", "grad_accum", "activation_checkpointing", "gpus_per_node",
          "num_workers", "sharding", "reshard_after_forward", "reduce_scatter_every_micro_step", "stack")


TIED = {"A100-40GB": "A100", "A100-80GB": "A100"}
"""One fit for both A100s: the same GA100 chip (312 TFLOP/s bf16) on the same network (MosaicML's
tables label both clusters '1600 Gbps node-node interconnect (RoCE)'); only HBM size and bandwidth
differ, and helper.gpus carries those. Fitted apart, the two got different efficiencies for the
same silicon (compute 0.80 vs 0.88) and A100-80GB's network stayed at its prior."""


def build_default_calibration() -> dict:
    """Fit the shipped default calibration to the published calibration rows."""
    rows = [r for r in PUBLISHED if r["role"] == "calibration"]
    base = {"schema_version": SCHEMA_VERSION, "source": "built-in priors (helper/calibration.py)",
            "constants": {"default": {}}}
    source = (f"default: fitted to {len(rows)} published FSDP throughputs (MosaicML llm-foundry MPT "
              "125M-70B except 7B/13B, seq 1k-32k, 8-512 GPUs, on H100-80GB, A100-80GB, A100-40GB; "
              "helper/published.py), every 7B/13B figure held out")
    cal = fit_calibration(rows, base=base, source=source, cross_validate=True, tied=TIED)
    cal["constants"]["H200-141GB"] = dict(cal["constants"]["H100-80GB"])
    cal["informed"]["H200-141GB"] = []
    cal["provenance"]["notes"] = {
        "H200-141GB": "no H200 figure used: copies H100-80GB's fitted constants (same GH100 compute, "
                      "same 989 TFLOP/s dense bf16 peak; only memory differs)",
        "cpu": "built-in priors (guesses), no measurement: distill the quickstart study "
               "(tuner distill) to calibrate the CPU proxy",
        "not_informed": "communication, overlap, NCCL protocol/algorithm and data-loading constants "
                        "stay at their priors (NCCL tuning.cc numbers, guesses): every published "
                        "figure here is compute-bound with pre-tokenised data",
        "size_terms": "the old fixed 0.2 s per micro-step is gone: narrow GEMMs (gemm_hidden_half), "
                      "per-block overhead (layer_overhead_s) and flash attention at its own "
                      "seq-len-dependent efficiency (attention_efficiency, attention_seq_half pinned) "
                      "carry the size and sequence-length dependence",
        "tied": "A100-40GB and A100-80GB are fitted as one group (same GA100 chip, same 1600 Gbps "
                "RoCE network in the MosaicML tables) and share one set of constants",
        "pinned": "constants with fitted=False (attention_seq_half, memory_scale) and those the data "
                  "did not inform stay at their priors; the informed ones are refitted as one set",
        "command": f"{COMMAND} --write-default",
    }
    return cal


def fit_fold(rows: list[dict], *, n_starts: int = 5) -> dict:
    """A calibration fitted from the built-in priors to ``rows`` alone, as the default is built.

    GPU models tied to one group share its constants even when the fold holds rows of only one
    of them (same chip and network: :data:`TIED`); H200 takes H100's (same GH100 compute)."""
    base = {"schema_version": SCHEMA_VERSION, "source": "built-in priors (helper/calibration.py)",
            "constants": {"default": {}}}
    cal = fit_calibration(rows, base=base, source="leave-one-source-out fold", tied=TIED, n_starts=n_starts)
    blocks = cal["constants"]
    for gpu, group in TIED.items():
        twin = next((g for g, grp in TIED.items() if grp == group and g in blocks), None)
        if gpu not in blocks and twin:
            blocks[gpu] = dict(blocks[twin])
    if "H100-80GB" in blocks:
        blocks.setdefault("H200-141GB", dict(blocks["H100-80GB"]))
    return cal


def scored_rows() -> list[dict]:
    """Every published throughput row that is one configuration's measurement (not the
    end-to-end ``reference`` rows: whole pre-training runs with failures, evaluation and
    checkpoints, whose GPU count and micro-batch the source does not give)."""
    return [r for r in PUBLISHED if r["role"] != "reference"]


def leave_one_source_out(rows: list[dict] | None = None, *, n_starts: int = 5,
                         only: tuple[str, ...] | None = None) -> list[dict]:
    """Each source's rows predicted by a fit to every other source: ``[{"row", "predicted",
    "error_pct"}]`` (``only``: score just these sources)."""
    rows = scored_rows() if rows is None else rows
    out = []
    for source in sorted({r["source"] for r in rows}):
        if only and source not in only:
            continue
        cal = fit_fold([r for r in rows if r["source"] != source], n_starts=n_starts)
        for r in (r for r in rows if r["source"] == source):
            pred = predict(r, cal)
            out.append({"row": r, "predicted": pred, "error_pct": 100 * (pred / r["tokens_per_sec_per_gpu"] - 1)})
    return out


def _summary(errs: list[float]) -> str:
    a = sorted(abs(e) for e in errs)
    p90 = a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))]
    return (f"{len(a)} | {statistics.median(a):.1f} | {p90:.1f} | {a[-1]:.1f} | "
            f"{sum(x <= 10 for x in a)} of {len(a)}")


def loso_tables(results: list[dict]) -> list[str]:
    """Per source, per GPU kind and pooled: n, median / p90 / max |error| (%), rows within 10%."""
    head = ["| {} | rows | median abs. error % | p90 % | max % | within 10% |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines = [head[0].format("held-out source (stack)"), head[1]]
    for source in sorted({x["row"]["source"] for x in results}):
        errs = [x["error_pct"] for x in results if x["row"]["source"] == source]
        stack = next(x["row"].get("stack", "-") for x in results if x["row"]["source"] == source)
        lines.append(f"| {source} ({stack}) | {_summary(errs)} |")
    lines += ["", head[0].format("GPU"), head[1]]
    for gpu in sorted({_gpu_label(x["row"]) for x in results}):
        lines.append(f"| {gpu} | {_summary([x['error_pct'] for x in results if _gpu_label(x['row']) == gpu])} |")
    lines.append(f"| **all** | {_summary([x['error_pct'] for x in results])} |")
    return lines


def tie_sensitivity(spreads: tuple[float, ...] = (0.3, 0.5, 0.7, 1.0)) -> list[str]:
    """The leave-one-source-out summary with the constants shared across GPUs (helper.ties) left
    untied, then tied at each spread: how much the fit's figures lean on the guessed spread."""
    import helper.ties as ties

    saved = ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD
    lines = [f"Shared across GPUs when tied: {', '.join(saved[0])}.", "",
             "| tied | spread | rows | median abs. error % | p90 % | max % | within 10% |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    try:
        for shared, sd in [((), None)] + [(saved[0], s) for s in spreads]:
            ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD = shared, sd if sd is not None else saved[1]
            errs = [x["error_pct"] for x in leave_one_source_out()]
            mark = " (shipped)" if sd == saved[1] else ""
            tied = "shared constants" if shared else "none (attention only)"
            lines.append(f"| {tied} | {sd if sd is not None else '-'}{mark} | {_summary(errs)} |")
    finally:
        ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD = saved
    return lines


def worst_rows(results: list[dict], over_pct: float = 10.0) -> list[str]:
    """The held-out rows predicted more than ``over_pct`` off, worst first, each with its citation."""
    lines = ["| held-out row | GPUs | config | published | predicted | error | figure |",
             "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    for x in sorted(results, key=lambda x: -abs(x["error_pct"])):
        if abs(x["error_pct"]) <= over_pct:
            break
        r = x["row"]
        lines.append(f"| {r['label']} | {r['gpu_count']} x {_gpu_label(r)} | {_cfg(r)} | "
                     f"{r['tokens_per_sec_per_gpu']:,.0f} | {x['predicted']:,.0f} | {x['error_pct']:+.1f}% | "
                     f"[{r['figure']}]({r['ref']}) |")
    return lines


def predict(row: dict, cal: dict, **override) -> float:
    kw = {k: row[k] for k in _KNOBS if k in row}
    kw.update(override)
    n = kw.pop("gpu_count", row["gpu_count"])
    return float(predict_throughput(row.get("model_size", row.get("preset")), n, calibration=cal, **kw))


def _err(pred: float, pub: float) -> str:
    return f"{100 * (pred / pub - 1):+.1f}%"


def _gpu_label(row: dict) -> str:
    """The row's GPU as a table shows it (a power-capped part carries its own label)."""
    return row.get("gpu_label") or get_gpu(row["gpu"]).name


def _cfg(row: dict) -> str:
    ac = {False: "no AC", True: "AC", "selective": "selective AC", "selective_op": "op-level selective AC"}.get(
        row.get("activation_checkpointing", False), "AC")
    return f"seq {row['seq_len']}, mb {row['micro_batch']}, ga {row.get('grad_accum', 1)}, {ac}"


def jobs_table(cal: dict) -> list[str]:
    """7B and 13B on 8 and 32 H100s next to the published figures."""
    val = [r for r in PUBLISHED if r["role"] == "validation" and get_gpu(r["gpu"]).name == "H100-80GB"]
    mpt7 = next(r for r in val if r["label"] == "MPT-7b" and r["gpu_count"] == 8 and r["seq_len"] == 2048)
    mpt13 = [r for r in val if r["label"] == "MPT-13b" and r["gpu_count"] in (8, 32) and r["seq_len"] == 2048]
    tt8 = next(r for r in val if r["gpu_count"] == 8 and "torchtitan" in r["label"])
    tt128 = next(r for r in val if r["gpu_count"] == 128 and "torchtitan" in r["label"])
    lines = ["| job | published figure (config) | source | published tok/s/GPU | predicted tok/s/GPU | error |",
             "| --- | --- | --- | ---: | ---: | ---: |"]

    def add(job: str, row: dict, n: int | None = None, pub: float | None = None, what: str = "") -> None:
        pred = predict(row, cal, **({"gpu_count": n} if n else {}))
        pub_s = f"{pub:,.0f}" if pub else "none published"
        err = _err(pred, pub) if pub else "n/a"
        lines.append(f"| {job} | {row['label']} ({_cfg(row)}){what} | [{row['ref'].split('/')[4]}]({row['ref']}) "
                     f"| {pub_s} | {pred:,.0f} | {err} |")

    add("7B on 8 H100", mpt7, pub=mpt7["tokens_per_sec_per_gpu"])
    add("7B on 8 H100", tt8, pub=tt8["tokens_per_sec_per_gpu"], what=" [96 GB HBM2e H100 at 500 W]")
    add("7B on 32 H100", mpt7, n=32, what=", same config on 32 GPUs")
    add("7B on 32 H100", tt128, n=32, pub=tt128["tokens_per_sec_per_gpu"],
        what=" [96 GB HBM2e H100 at 500 W; published at 128 GPUs, nearest to 32]")
    for r in mpt13:
        add(f"13B on {r['gpu_count']} H100", r, pub=r["tokens_per_sec_per_gpu"])
    return lines


def rows_table(cal: dict, role: str) -> tuple[list[str], list[float]]:
    lines = ["| model | GPUs | config | published tok/s/GPU | predicted | error | figure |",
             "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    errs = []
    for r in (r for r in PUBLISHED if r["role"] == role):
        pred, pub = predict(r, cal), r["tokens_per_sec_per_gpu"]
        errs.append(100 * (pred / pub - 1))
        lines.append(f"| {r['label']} | {r['gpu_count']} x {_gpu_label(r)} | {_cfg(r)} | {pub:,.0f} | {pred:,.0f} "
                     f"| {_err(pred, pub)} | [{r['figure']}]({r['ref']}) |")
    return lines, errs


def _mem_kwargs(row: dict) -> dict:
    return dict(micro_batch=row["micro_batch"], seq_len=row["seq_len"], gpu=row["gpu"],
                activation_checkpointing=row["activation_checkpointing"], grad_accum=row["grad_accum"],
                sharding=row.get("sharding", "zero3"), reshard_after_forward=row.get("reshard_after_forward", True),
                reduce_scatter_every_micro_step=row.get("reduce_scatter_every_micro_step"), stack=row.get("stack"))


def oom_table() -> tuple[list[str], int, int]:
    """Published configurations that ran, each under its publisher's stack, predicted out of
    memory (should be none), counted per stack preset; MPT rows also as a bare parameter count
    (a Llama-shaped model: what a user who types ``7b`` asks) under the same stack."""
    lines = ["| stack preset | configurations that ran | predicted out of memory | tightest: predicted / capacity GiB |",
             "| --- | ---: | ---: | --- |"]
    rows = scored_rows()
    bad_rows, total = [], 0
    for stack in STACKS:
        mine = [r for r in rows if r.get("stack") == stack]
        if not mine:
            lines.append(f"| {stack} | 0 (no published row) | - | - |")
            continue
        cases = [(r, r.get("model_size", r.get("preset"))) for r in mine]
        cases += [(r, r["model_size"].n_params) for r in mine if r["label"].startswith("MPT")]
        worst = None
        for r, model in cases:
            total += 1
            mem = estimate_memory(model, r["gpu_count"], **_mem_kwargs(r))["total"]
            cap = r.get("memory_capacity_gb", get_gpu(r["gpu"]).memory_gb)
            if worst is None or mem / cap > worst[0] / worst[1]:
                worst = (mem, cap, r)
            if mem > cap:
                bad_rows.append((r, model, mem, cap))
        mem, cap, r = worst
        lines.append(f"| {stack} | {len(cases)} | {sum(1 for b in bad_rows if b[0].get('stack') == stack)} | "
                     f"{gib(mem):.1f} / {gib(cap):.1f} ({r['label']}, {r['gpu_count']} GPUs, {_cfg(r)}) |")
    for r, model, mem, cap in bad_rows:
        lines.append(f"| out of memory: {r['label']} ({model if isinstance(model, float) else 'preset'}) | "
                     f"{_cfg(r)} | {gib(mem):.1f} GiB | {gib(cap):.1f} GiB |")
    return lines, len(bad_rows), total


def memory_published_table() -> list[str]:
    """Helper's peak against peaks a source publishes (GiB as published)."""
    lines = ["| job | config | published GiB | helper GiB | error | figure |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in (r for r in PUBLISHED if "peak_mem_gib" in r):
        mem = estimate_memory(r.get("model_size", r.get("preset")), r["gpu_count"], **_mem_kwargs(r))
        helper_gib = gib(mem["total"])
        lines.append(f"| {r['label']} on {r['gpu_count']} GPUs | {_cfg(r)} | {r['peak_mem_gib']:.1f} | "
                     f"{helper_gib:.1f} | {_err(helper_gib, r['peak_mem_gib'])} | [{r['memory_figure']}]({r['ref']}) |")
    return lines


TRACE_CASES = ([("llama-1b", 8, mb, seq, ac, rs) for mb, seq in ((1, 2048), (4, 2048), (2, 4096))
                for ac in (False, True) for rs in (True, False)]
               + [("llama-2-7b", 8, mb, seq, ac, True) for mb, seq in ((1, 2048), (2, 4096)) for ac in (False, True)])
"""Presets x the knobs tuner searches (micro_batch, activation_checkpointing, sharding =
reshard_after_forward, seq_len) on 8 GPUs, for ``--memory-trace``."""


def memory_trace_table(cases=TRACE_CASES) -> tuple[list[str], list[float]]:
    """Helper's analytic peak (tensors: no allowances) against PyTorch's FSDP2 tracker."""
    from helper.memory_trace import trace_memory

    lines = ["| model | GPUs | micro_batch | seq | AC | reshard | tracker GiB | helper GiB | error |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    errs = []
    for preset, n, mb, seq, ac, rs in cases:
        tracked = trace_memory(preset, n, micro_batch=mb, seq_len=seq, activation_checkpointing=ac,
                               reshard_after_forward=rs)["Total"] / 2**30
        m = estimate_memory(preset, n, micro_batch=mb, seq_len=seq, activation_checkpointing=ac,
                            reshard_after_forward=rs)
        tensors = gib(m["total"] - m["overhead"])
        errs.append(100 * (tensors / tracked - 1))
        lines.append(f"| {preset} | {n} | {mb} | {seq} | {ac} | {rs} | {tracked:.2f} | {tensors:.2f} | {errs[-1]:+.1f}% |")
        print(lines[-1], file=sys.stderr, flush=True)  # progress: each case takes a minute on a CPU
    return lines, errs


def suggest_table(cal: dict) -> list[str]:
    lines = ["| job | micro_batch | activation_checkpointing | memory GiB/GPU | predicted tok/s/GPU | MFU |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for size in ("7b", "13b"):
        for n in (8, 32):
            c = suggest_config(size, n, "52k", calibration=cal)
            lines.append(f"| {size.upper()} on {n} H100 (HF Llama shape, seq 2048) | {c['micro_batch']} | "
                         f"{c['activation_checkpointing']} | {gib(c['memory']['total']):.1f} | "
                         f"{c['expected_tokens_per_sec_per_gpu']:,.0f} | {c['expected_mfu']:.0%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-default", action="store_true",
                        help=f"refit and write {DEFAULT_CALIBRATION_PATH.name} before printing")
    parser.add_argument("--memory-trace", action="store_true",
                        help="also compare estimate_memory with PyTorch's FSDP2 memory tracker (needs torch; slow)")
    parser.add_argument("--rows", action="store_true", help="also every published row against the shipped calibration")
    parser.add_argument("--tie-sensitivity", action="store_true",
                        help="also the leave-one-source-out summary with helper.ties' shared constants untied "
                             "and at spreads 0.3-1.0 (five more fits of every fold: ~3 minutes)")
    args = parser.parse_args(argv)
    if args.write_default:
        cal = build_default_calibration()
        DEFAULT_CALIBRATION_PATH.write_text(json.dumps(cal, indent=2) + "\n")
        print(f"wrote {DEFAULT_CALIBRATION_PATH} ({cal['source']})\n")
    print(f"Command: {COMMAND}. Throughput in tokens/s/GPU, memory in GiB (2^30 bytes, as nvidia-smi and "
          "torch.cuda report it; an 80GB H100 holds 79.6 GiB).\n")
    results = leave_one_source_out()
    print("## Throughput, leave one source out\n")
    print("\n".join(loso_tables(results)))
    print("\nHeld-out rows more than 10% off:\n")
    print("\n".join(worst_rows(results)))
    if args.tie_sensitivity:
        print("\nThe constants shared across GPUs (helper.ties), untied and at other spreads:\n")
        print("\n".join(tie_sensitivity()))
    lines, bad, total = oom_table()
    print(f"\n## Memory: published configurations that ran, predicted out of memory: {bad} of {total}\n")
    print("\n".join(lines))
    print("\n## Memory: helper against published peaks\n")
    print("\n".join(memory_published_table()))
    if args.memory_trace:
        lines, errs = memory_trace_table()
        print("\n## Memory: helper against PyTorch's FSDP2 memory tracker (fake tensors, CPU)\n")
        print("\n".join(lines))
        print(f"\nmax |error| {max(abs(e) for e in errs):.1f}%, {sum(abs(e) <= 10 for e in errs)} of {len(errs)} within 10%")
    cal = load_calibration()
    print(f"\n## The shipped calibration\n\n{cal['source']}\n")
    for role in ("calibration", "validation", "reference"):
        lines, errs = rows_table(cal, role)
        print(f"- {role} rows: {len(errs)}, median |error| {statistics.median(abs(e) for e in errs):.1f}%, "
              f"max {max(abs(e) for e in errs):.1f}%")
        if args.rows:
            print("\n" + "\n".join(lines) + "\n")
    print("\n### 7B and 13B jobs on H100\n")
    print("\n".join(jobs_table(cal)))
    print("\n### What suggest_config picks (dataset 52k examples, stack hf-sdpa)\n")
    print("\n".join(suggest_table(cal)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
