"""`tuner`: a thin command line over the library. Each subcommand parses and calls one function.

Every mistake a user can make (a bad flag or number, a bad spec, bad budget, unreachable
storage, unknown study: argparse's errors and every tuner.errors.TunerError) exits 2 with one
line on stderr that names the problem; a `tuner run` that fails that way before its first
trial leaves no database, lock or runs folder of its own behind. A closed pipe (`tuner status
| head`) ends quietly. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from tuner._cli_support import Parser, glue_dash_values, new_paths
from tuner._cli_support import number as _number

__all__ = ["main", "build_parser", "COMMANDS"]


_STORAGE_HELP = ("Optuna storage URL (SQLAlchemy). Precedence: this flag, then $TUNER_STORAGE, "
                 "then sqlite:///tuner.db in the working directory.")


def build_parser() -> argparse.ArgumentParser:
    from tuner.report import DEFAULT_PLANNED_TOKENS  # light: plotly loads only when a report is drawn

    parser = Parser(
        prog="tuner",
        description="Throughput autotuner for distributed LLM fine-tuning: an Optuna study over "
                    "launch knobs (NCCL_ALGO/PROTO, DataLoader workers, micro-batch, ...), "
                    "measured in tokens/s/GPU under a GPU-hour budget.",
        epilog="Quick start: tuner run --study studies/quickstart.toml --budget 0.08gpuh; tuner status")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run, join or resume a study until its budget is spent",
                         description="Run (or join, or resume) a study until the GPU budget is spent. "
                                     "Several `tuner run` processes on one shared storage join the same "
                                     "study and share its budget. Ctrl-C stops cleanly; run again to resume.")
    run.add_argument("--study", required=True, type=Path, help="study spec (TOML), e.g. studies/quickstart.toml")
    run.add_argument("--budget", help="GPU budget: 40gpuh, 90gpum or 600gpus (default: the spec's [budget] limit)")
    run.add_argument("--storage", help=_STORAGE_HELP)
    run.add_argument("--study-name", help="Optuna study name (default: the spec's [study] name; "
                                          "`<name>-sim` with --launcher sim on a non-sim spec)")
    run.add_argument("--launcher", choices=["local", "slurm", "sim"], help="override the spec's [cluster] launcher")
    run.add_argument("--runs-dir", type=Path, default=Path("runs"),
                     help="per-trial folders: config, result file, log (default: runs/)")
    run.add_argument("--max-trials", type=_number(int, 1), help="stop after this many trials from this process")
    run.add_argument("--no-ablation", action="store_true", help="skip the post-search ablation re-runs")
    run.add_argument("--grace-period", type=_number(int, 1), metavar="SECONDS",
                     help="heartbeat age after which a running trial of a dead coordinator is failed, "
                          "charged and retried (default 60)")
    run.add_argument("--max-same-errors", type=_number(int, 0), default=3, metavar="K",
                     help="stop the study after K trials in a row fail with the same error, printing it once "
                          "(exit 2); 0 never stops (default 3)")
    run.add_argument("--no-preflight", action="store_true",
                     help="skip loading the data, tokenizer and model config before the first trial")
    run.add_argument("--quiet", action="store_true", help="no progress display")

    status = sub.add_parser("status", help="trials by state, budget used/left, best so far",
                            description="Where each study stands: trials by status, GPU-hours used and left, "
                                        "the recommended config once `tuner analyze` has run (else the best single "
                                        "run so far) and its knobs. Reads only; safe while studies run.")
    status.add_argument("--storage", help=_STORAGE_HELP)
    status.add_argument("--study-name", help="one study (default: every study in the storage)")

    analyze = sub.add_parser("analyze", help="per-trial CIs, speedup vs baseline, knob importance -> analysis.json",
                             description="The statistics of a study (docs/statistics.md): each trial's tokens over "
                                         "time with a CI from a noise model pooled over the study's trials, the "
                                         "recommended config (chosen on re-measurements, not failure-prone) and its "
                                         "speedup over the baseline, failure rates with exact binomial CIs, knob "
                                         "importance (total-order indices against a random placebo, BCa bootstrap CIs) "
                                         "and the Holm-corrected ablation. Writes DIR/analysis.json.")
    analyze.add_argument("--storage", help=_STORAGE_HELP)
    analyze.add_argument("--study-name", required=True, help="the study to analyse (`tuner status` lists them)")
    analyze.add_argument("--out", required=True, type=Path, help="output folder")
    analyze.add_argument("--n-boot", type=_number(int, 0), default=None,
                         help="bootstrap resamples of the importance CIs; 0 for none, which also makes \"matters\" "
                              "a point-estimate call (default: the statistics' own, 200; `tuner report` reuses "
                              "an analysis made with the default)")

    report = sub.add_parser("report", help="report.html (plots) and RECIPE.md; saves the recipe as the study's dashboard note",
                            description="A one-page RECIPE.md for the team (the settings to apply, what they buy, "
                                        "what matters) and report.html with the plots; the recipe is also saved as "
                                        "the study's note in optuna-dashboard.")
    report.add_argument("--storage", help=_STORAGE_HELP)
    report.add_argument("--study-name", required=True, help="the study to report (`tuner status` lists them)")
    report.add_argument("--out", required=True, type=Path, help="output folder")
    report.add_argument("--planned-tokens", type=_number(float, 0, above=True), default=DEFAULT_PLANNED_TOKENS,
                        help="tokens of the planned training run, for the GPU-hours the speedup saves "
                             f"(default {DEFAULT_PLANNED_TOKENS:.0e})")
    report.add_argument("--no-note", action="store_true", help="do not save the recipe as an optuna-dashboard note")
    report.add_argument("--reanalyze", action="store_true",
                        help="compute the analysis again even when DIR/analysis.json matches the study (by default "
                             "it is reused while the study's trials, spec and tuner's statistics are unchanged)")

    distill = sub.add_parser("distill", help="fit the helper's performance-model calibration from finished studies",
                             description="Fit the constants of helper's performance model to the ok trials of "
                                         "finished studies and write a calibration JSON that `tuner suggest "
                                         "--calibration` and helper.load_calibration read.")
    distill.add_argument("--storage", help=_STORAGE_HELP)
    distill.add_argument("--study-name", required=True, action="append", help="a finished study (repeatable)")
    distill.add_argument("--out", required=True, type=Path, help="calibration JSON to write")

    suggest = sub.add_parser("suggest", help="print suggest_config(...) as JSON",
                             description="Launch settings for a model, GPU count and dataset from helper's "
                                         "calibrated performance model, with the expected tokens/s/GPU and the "
                                         "reasons; as JSON.")
    suggest.add_argument("--model-size", required=True, help="7b, 13B, 7e9, 1.3b or a preset name")
    suggest.add_argument("--gpus", required=True, type=_number(int, 1), help="GPU count")
    suggest.add_argument("--dataset-size", required=True, help="examples: 52000 or 52k")
    suggest.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (default 2048)")
    suggest.add_argument("--gpu", default="H100-80GB",
                         help="A100-40GB, A100-80GB, H100-80GB, H200-141GB (default H100-80GB)")
    suggest.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node, NVLink inside (default 8)")
    suggest.add_argument("--global-batch", type=int, help="sequences per optimizer step")
    suggest.add_argument("--calibration", type=Path, help="calibration JSON from `tuner distill`")
    suggest.add_argument("--stack", help="training stack (helper.stacks): hf-sdpa (default), hf-eager, torchtitan, "
                                         "llm-foundry, fms-fsdp, megatron-fused")
    suggest.add_argument("--explain", action="store_true", help="also print the memory and time breakdown")
    _add_plan_parser(sub)
    return parser


def _add_plan_parser(sub) -> None:
    from tuner.plan import LLAMA3_FAILURES_PER_GPU_HOUR
    plan = sub.add_parser("plan", help="training plan: layout, memory, batch, throughput, checkpoints; runbook",
                          description="Compare FSDP, HSDP, FSDP+TP and pipelines for a model on a cluster: memory "
                                      "per GPU, batch, tokens/s/GPU with a band, wall time, GPU-hours, cost, a "
                                      "checkpoint cadence that bounds lost work; --validate runs a small proxy for "
                                      "real, --runbook writes RUNBOOK.md and runbook.html.")
    plan.add_argument("--model-size", required=True, help="13b, 7e9, 1.3b or a preset name")
    plan.add_argument("--gpus", required=True, type=_number(int, 1), help="GPU count")
    plan.add_argument("--gpu", default="H100-80GB", help="A100-40GB, A100-80GB, H100-80GB, H200-141GB")
    plan.add_argument("--tokens", required=True, type=_number(float, 0, above=True), help="tokens to train, e.g. 100e9")
    plan.add_argument("--gpus-per-node", type=_number(int, 1), default=8, help="GPUs per node, NVLink inside (default 8)")
    plan.add_argument("--interconnect-gbps", type=_number(float, 0, above=True),
                      help="network per GPU between nodes, Gb/s (default: the GPU's reference node, 400 for H100)")
    plan.add_argument("--seq-len", type=_number(int, 8), default=2048, help="tokens per sequence (default 2048)")
    plan.add_argument("--global-batch-tokens", type=_number(float, 0, above=True),
                      help="your global batch target in tokens (default: the compute-optimal batch)")
    plan.add_argument("--storage-write-gbs", type=_number(float, 0, above=True), default=2.0,
                      help="shared-storage write bandwidth per node, GB/s (gigabytes; default 2)")
    plan.add_argument("--failure-rate", type=_number(float, 0), default=LLAMA3_FAILURES_PER_GPU_HOUR,
                      help="failures per GPU-hour (default: Llama 3's 419 in 54 days on 16,384 H100s = "
                           f"{LLAMA3_FAILURES_PER_GPU_HOUR:.3g})")
    plan.add_argument("--max-lost-minutes", type=_number(float, 0, above=True), default=30.0,
                      help="worst-case lost work a failure may cost (default 30)")
    plan.add_argument("--spare-nodes", type=_number(int, 0),
                      help="idle nodes the job holds for a relaunch after a node failure (default: 1 from 8 nodes up)")
    plan.add_argument("--slurmd-timeout-s", type=_number(float, 0, above=True), default=300.0,
                      help="your cluster's SlurmdTimeout: how long a dead node goes unnoticed (default 300, Slurm's)")
    plan.add_argument("--requeue-wait-minutes", type=_number(float, 0), default=10.0,
                      help="wait for a free node after a requeue, without a spare (default 10, an allowance)")
    plan.add_argument("--time-limit-hours", type=_number(float, 0, above=True), default=48.0,
                      help="your partition's time limit per allocation, for the batch script (default 48)")
    plan.add_argument("--cost-per-gpu-hour", type=_number(float, 0, above=True), help="price, for the cost line")
    plan.add_argument("--calibration", type=Path, help="calibration JSON from `tuner distill`")
    plan.add_argument("--stack", help="training stack (helper.stacks): hf-sdpa (default), hf-eager, torchtitan, "
                                      "llm-foundry, fms-fsdp, megatron-fused")
    plan.add_argument("--validate", action="store_true",
                      help="run the plan's proxy for real (here: the tiny model on 2 CPU processes) and refit")
    plan.add_argument("--proxy", choices=["cpu", "gpu"], default="cpu",
                      help="--validate's proxy: cpu = the tiny model on 2 CPU processes (default); gpu = a ~1.1B "
                           "model on 4 of the plan's GPUs")
    plan.add_argument("--launcher", choices=["local", "slurm"], default="local", help="how --validate launches trials")
    plan.add_argument("--runbook", type=Path, metavar="DIR", help="write RUNBOOK.md and runbook.html into DIR")
    plan.add_argument("--tuning-study", help="a finished tuning study whose NCCL/loader settings the runbook uses")
    plan.add_argument("--storage", help=_STORAGE_HELP + " (for --tuning-study)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(glue_dash_values(parser, list(sys.argv[1:] if argv is None else argv)))
    if extra:  # named by the command's own parser, whose --help lists what it takes
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    from tuner.errors import TunerError

    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except TunerError as exc:
        from tuner.errors import StorageUnreachableError
        resume = ("; what was recorded is kept (a result that finished meanwhile waits in the runs folder's spool): "
                  "run the same command again to resume"
                  if args.command == "run" and isinstance(exc, StorageUnreachableError) else "")
        print(f"tuner {args.command}: error: {exc}{resume}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = (": run the same command again to resume (a trial it stopped runs again)" if args.command == "run"
                  else "")
        print(f"tuner {args.command}: interrupted{resume}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`tuner status | head`): nothing is wrong; say nothing (Python's
        # own advice: point stdout at devnull so the exit's flush does not raise again)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141   # 128 + SIGPIPE, what a shell tool reports


def _storage(args: argparse.Namespace) -> str:
    from tuner.storage import resolve_storage_url
    return resolve_storage_url(args.storage)


# ------------------------------------------------------------------------------ run

def _cmd_run(args: argparse.Namespace) -> int:
    from tuner.budget import parse_budget
    from tuner.errors import BudgetError, TunerError
    from tuner.report import format_run_summary
    from tuner.spec import load_spec
    from tuner.study import RunOptions, run_study

    spec = load_spec(args.study)
    budget = None
    if args.budget is not None:
        try:
            budget = parse_budget(args.budget)
        except BudgetError as exc:
            raise BudgetError(f"--budget: {exc}") from None
    study_name = args.study_name
    if args.launcher and args.launcher != spec.cluster.launcher:
        if args.launcher == "sim" and study_name is None:
            study_name = f"{spec.study.name}-sim"  # never mix simulated and measured trials
        spec = spec.with_launcher(args.launcher)
    options = RunOptions(storage_url=_storage(args), study_name=study_name,
                         budget_gpu_seconds=budget, runs_dir=args.runs_dir,
                         max_trials=args.max_trials, ablation=not args.no_ablation,
                         grace_period_s=args.grace_period, max_same_errors=args.max_same_errors,
                         preflight=not args.no_preflight)
    from tuner.report import Progress

    progress = Progress(enabled=not args.quiet)
    # A scheduler's SIGTERM / a closed terminal's SIGHUP stop like Ctrl-C: the running trial's
    # job is killed (or scancel'ed) and recorded before the process exits.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_keyboard_interrupt)
    # Preflight loads the data with `datasets` in this process: its progress bars and its own
    # error lines would come before tuner's one line naming the problem. (Trials inherit these;
    # a data error there still raises.)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("DATASETS_VERBOSITY", "critical")
    leftovers = new_paths(options.storage_url, args.runs_dir)
    try:
        summary = run_study(spec, options, on_event=progress)
    except TunerError:
        leftovers()  # a run refused before its first trial leaves nothing of its own behind
        raise
    finally:
        progress.close()
    print(format_run_summary(summary))
    return 0


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _cmd_status(args: argparse.Namespace) -> int:
    from tuner.report import format_run_summary
    from tuner.study import study_status
    summaries = study_status(_storage(args), args.study_name)
    if not summaries:
        print("no studies in this storage")
    for s in summaries:
        print(format_run_summary(s, status=True))
    return 0


# ------------------------------------------------------------------- analysis & report

def _load(args: argparse.Namespace):
    from tuner.storage import load_existing_study
    return load_existing_study(_storage(args), args.study_name)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from tuner.report import load_or_analyze, mark_recommendation
    from tuner.stats import format_summary
    study = _load(args)
    analysis, _ = load_or_analyze(study, args.out, n_boot=args.n_boot, reuse=False)
    mark_recommendation(study, analysis)
    print(format_summary(analysis))
    print(f"wrote {Path(args.out) / 'analysis.json'}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from tuner.report import load_or_analyze, mark_recommendation, save_recipe_note, write_report
    study = _load(args)
    analysis, reused = load_or_analyze(study, args.out, reuse=not args.reanalyze)
    if reused:
        print(f"reused {Path(args.out) / 'analysis.json'} (the study has not changed since it was written)")
    else:
        mark_recommendation(study, analysis)
        print(f"wrote {Path(args.out) / 'analysis.json'}")
    paths = write_report(study, analysis, args.out, planned_tokens=args.planned_tokens)
    if not args.no_note:
        save_recipe_note(study, Path(paths["recipe"]).read_text())
    for p in paths.values():
        print(f"wrote {p}")
    return 0


def _cmd_distill(args: argparse.Namespace) -> int:
    from tuner.plan import distill
    result = distill(_storage(args), args.study_name, args.out)
    if (warning := result.get("provenance", {}).get("warning")):
        simulated = ", ".join(result["provenance"].get("simulated_studies", []))
        print(f"tuner distill: warning: {warning} ({simulated})", file=sys.stderr)
    quality = result.get("quality", {})
    print(json.dumps(quality, indent=2))
    print(f"wrote {args.out}")
    return 0


def _cmd_suggest(args: argparse.Namespace) -> int:
    from tuner.plan import suggest

    cfg, explanation = suggest(model_size=args.model_size, gpu_count=args.gpus, dataset_size=args.dataset_size,
                               seq_len=args.seq_len, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                               global_batch=args.global_batch, calibration=args.calibration, stack=args.stack)
    print(json.dumps(cfg, indent=2, default=str))
    if args.explain:
        print(explanation, file=sys.stderr)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from tuner.plan import run_plan
    text, paths = run_plan(
        model_size=args.model_size, gpu_count=args.gpus, gpu=args.gpu, tokens=args.tokens,
        gpus_per_node=args.gpus_per_node, inter_node_gbps=args.interconnect_gbps, seq_len=args.seq_len,
        global_batch_tokens=args.global_batch_tokens, storage_write_gbs_per_node=args.storage_write_gbs,
        failures_per_gpu_hour=args.failure_rate, max_lost_work_minutes=args.max_lost_minutes,
        spare_nodes=args.spare_nodes, slurmd_timeout_s=args.slurmd_timeout_s,
        requeue_wait_s=args.requeue_wait_minutes * 60, time_limit_hours=args.time_limit_hours,
        cost_per_gpu_hour=args.cost_per_gpu_hour, stack=args.stack,
        calibration=str(args.calibration) if args.calibration else None, validate=args.validate,
        proxy=args.proxy, launcher=args.launcher,
        runbook_dir=args.runbook, tuning_study=args.tuning_study,
        storage_url=_storage(args) if args.tuning_study else None)
    print(text)
    for p in paths:
        print(f"wrote {p}")
    return 0


# subcommand -> the function that runs it (one library call each)
COMMANDS = {"run": _cmd_run, "status": _cmd_status, "analyze": _cmd_analyze,
             "report": _cmd_report, "distill": _cmd_distill, "suggest": _cmd_suggest, "plan": _cmd_plan}


if __name__ == "__main__":
    raise SystemExit(main())
