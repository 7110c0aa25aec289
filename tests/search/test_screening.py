"""tuner.search: configs the model knows cannot run are not launched, and a wrong prune recovers."""

import dataclasses

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from tuner.search import distribution, memory_ratio_low, nccl_problem, predicted_memory_gb, screen
from tuner.sim import SimLauncher
from tuner.spec import complete_params, load_spec
from tuner.stats import study_record
from tuner.study import end_unrun

SPEC_13B = "studies/sim-llama13b-h100x8.toml"
SPEC_1B = "studies/sim-llama1b-a100x16.toml"
OK = {"nccl_algo": "default", "nccl_proto": "default", "num_workers": 2, "prefetch_factor": 2,
      "grad_accum": 1, "micro_batch": 1, "padding": "packed", "activation_checkpointing": True}


def _spec(path=SPEC_13B, physics="matched"):
    spec = load_spec(path)
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, sim_physics=physics))


def _study():
    return optuna.create_study(direction="maximize")


def _add(study, spec, params, status, value=None, **attrs):
    full = complete_params(params, spec)
    dists = {k: distribution(spec.knob(k)) for k in full if k in {x.name for x in spec.space}}
    study.add_trial(create_trial(params={k: full[k] for k in dists}, distributions=dists, value=value,
                                 state=TrialState.COMPLETE, user_attrs={"status": status, **attrs}))


def test_certain_nccl_rule_prunes_nvls_on_a100():
    spec = _spec(SPEC_1B)
    v = screen(_study(), spec, complete_params({**OK, "nccl_algo": "NVLS"}, spec))
    assert v is not None and v.rule == "nccl"
    assert nccl_problem(spec, "NVLS", "default")[1] is True


def test_version_dependent_rule_asks_the_preflight_once_and_stores_it():
    spec = _spec(SPEC_13B, "perturbed:0")
    calls = []

    class Launcher:
        def preflight_nccl(self, spec, algo, proto):
            calls.append((algo, proto))
            return "NCCL WARN no algorithm"

    study = _study()
    params = complete_params({**OK, "nccl_algo": "Tree"}, spec)
    assert nccl_problem(spec, "Tree", "default")[1] is False
    assert screen(study, spec, params, launcher=Launcher()).rule == "nccl"
    assert screen(study, spec, params, launcher=Launcher()).rule == "nccl"
    assert calls == [("Tree", "default")]
    assert study.user_attrs["nccl_preflight"] == {"Tree|default": "NCCL WARN no algorithm"}


def test_version_dependent_rule_without_a_preflight_is_launched():
    spec = _spec(SPEC_13B)
    assert screen(_study(), spec, complete_params({**OK, "nccl_algo": "Tree"}, spec)) is None


def test_sim_preflight_follows_the_clusters_nccl_version():
    from tuner.sim import physics_for

    seeds = {s: physics_for(f"perturbed:{s}", "H100-80GB").tree_falls_back for s in range(12)}
    falls, fails = next(s for s, f in seeds.items() if f), next(s for s, f in seeds.items() if not f)
    for seed, expect_error in ((falls, False), (fails, True)):
        spec = _spec(SPEC_13B, f"perturbed:{seed}")
        assert bool(SimLauncher(spec).preflight_nccl(spec, "Tree", "default")) is expect_error


def test_ok_trial_overrules_an_nccl_prune():
    spec = _spec(SPEC_13B)
    study = _study()
    params = complete_params({**OK, "nccl_algo": "NVLS", "nccl_proto": "LL"}, spec)
    assert screen(study, spec, params) is not None
    _add(study, spec, {**OK, "nccl_algo": "NVLS", "nccl_proto": "LL", "micro_batch": 2}, "ok", 5000.0)
    assert screen(study, spec, params) is None


def test_a_setting_the_clusters_nccl_refused_twice_is_screened_out_in_every_config():
    # helper has no rule against Ring/Simple on H100: only the cluster's NCCL says it does not run
    spec = _spec()
    ring = {**OK, "nccl_algo": "Ring", "nccl_proto": "Simple"}
    assert nccl_problem(spec, "Ring", "Simple") is None
    nccl = "NCCL WARN Error: no algorithm/protocol available for AllGather with NCCL_ALGO=Ring NCCL_PROTO=Simple"
    other = complete_params({**ring, "micro_batch": 2, "num_workers": 4}, spec)
    study = _study()
    _add(study, spec, ring, "error", value=0.0, message=nccl)
    assert screen(study, spec, other) is None                      # once may be a transient error
    _add(study, spec, {**ring, "num_workers": 0}, "error", value=0.0, message="CUDA error: an illegal memory access")
    assert screen(study, spec, other) is None                      # an error not naming NCCL says nothing of it
    _add(study, spec, {**ring, "micro_batch": 4}, "error", value=0.0, message=nccl)
    v = screen(study, spec, other)
    assert v is not None and v.rule == "nccl" and "refused this setting in trials 0, 2" in v.reason
    _add(study, spec, {**ring, "padding": "max_length"}, "ok", value=3000.0)
    assert screen(study, spec, other) is None                      # it ran once: NCCL can run it


def test_memory_prune_and_recovery_when_a_measured_peak_contradicts_the_model():
    spec = _spec(SPEC_13B)
    big = complete_params({**OK, "micro_batch": 8, "activation_checkpointing": False}, spec)
    pred = predicted_memory_gb(spec, big)
    assert pred > 88  # helper says far over 80 GB
    study = _study()
    assert screen(study, spec, big).rule == "memory"
    # an ok trial whose measured peak is half the prediction: the model overestimates three-fold here
    small = {**OK, "micro_batch": 4, "activation_checkpointing": False}
    peak_gib = 0.3 * predicted_memory_gb(spec, complete_params(small, spec)) * 1e9 / 2**30
    _add(study, spec, small, "ok", 4000.0, peak_mem_gib=peak_gib)
    assert memory_ratio_low(study.get_trials(), spec) < 0.3
    assert screen(study, spec, big) is None


def test_oom_prunes_configs_needing_no_less_memory():
    spec = _spec(SPEC_13B)
    study = _study()
    oomed = {**OK, "micro_batch": 2, "activation_checkpointing": False}
    _add(study, spec, oomed, "oom", 0.0)
    assert screen(study, spec, complete_params({**oomed, "micro_batch": 4}, spec)).rule == "memory"
    assert screen(study, spec, complete_params({**oomed, "micro_batch": 1}, spec)) is None


def test_pruned_trial_is_fail_with_zero_gpu_seconds_and_visible_in_the_record():
    spec = _spec(SPEC_13B)
    study = _study()
    trial = study.ask()
    end_unrun(study, trial, "pruned", "pruned: NCCL cannot run this")
    t = study.get_trials()[0]
    assert t.state == TrialState.PRUNED and t.user_attrs["gpu_seconds"] == 0.0
    rec = study_record(study).trials[0]
    assert rec.status == "pruned" and "NCCL" in rec.message
    assert spec.cluster.launcher == "sim"


def test_the_baseline_is_measured_even_when_the_model_calls_it_out_of_memory(tmp_path):
    from tuner.study import RunOptions, run_study

    spec = _spec(SPEC_13B)
    base = {**spec.baseline, "micro_batch": 8, "activation_checkpointing": False}
    spec = dataclasses.replace(spec, baseline=base)
    assert screen(_study(), spec, complete_params(base, spec)) is not None  # the model alone would prune it
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study(spec, RunOptions(storage_url=storage, runs_dir=tmp_path / "runs", max_trials=1, ablation=False))
    trials = optuna.load_study(study_name=spec.study.name, storage=storage).get_trials()
    baseline = next(t for t in trials if t.user_attrs.get("role") == "baseline")
    assert baseline.user_attrs["status"] != "pruned" and baseline.user_attrs["gpu_seconds"] > 0


def test_the_memory_boundary_comes_from_the_specs_stack():
    """7B on 32 H100, micro-batch 5 with accumulation: FSDP2's fp32 no-sync buffer does not fit, llm-foundry's
    every-micro-batch reduce-scatter in bf16 does; screening prunes the one and launches the other."""
    spec = load_spec("studies/llama7b-h100x32.toml")
    params = {**OK, "micro_batch": 5, "grad_accum": 4, "activation_checkpointing": False}
    foundry = dataclasses.replace(spec, model=dataclasses.replace(spec.model, stack="llm-foundry"))
    own, theirs = predicted_memory_gb(spec, complete_params(params, spec)), \
        predicted_memory_gb(foundry, complete_params(params, foundry))
    capacity = 81559 * 2**20 / 1e9
    assert own > capacity * 1.1 > capacity > theirs
    # under FSDP2's buffer the config is over the line: once its region's probe (the cheapest config
    # over it, micro-batch 4) is queued, it is pruned; under llm-foundry's it fits and runs
    study = _study()
    _ran_as_predicted(study, spec)
    assert screen(study, spec, complete_params({**params, "micro_batch": 8}, spec)).rule == "memory"  # queues the probe
    assert screen(study, spec, complete_params(params, spec)).rule == "memory"
    study = _study()
    _ran_as_predicted(study, foundry)
    assert screen(study, foundry, complete_params(params, foundry)) is None


# ------------------------------------------------------------------ probes (issue 28)
SPEC_7B = "studies/llama7b-h100x32.toml"
ACCUM = {**OK, "micro_batch": 4, "grad_accum": 8, "activation_checkpointing": False}
"""issue 28's optimum: helper predicts 93 GB (an unsharded fp32 accumulation buffer)."""
BIG = {**ACCUM, "micro_batch": 8}
"""Further over the line (152 GB predicted)."""


def _ran_as_predicted(study, spec):
    """An ok trial whose measured peak is helper's prediction: the line is then at 0.95 x
    capacity (80 GiB = 85.9 GB), and 93 GB is over it."""
    small = {**OK, "micro_batch": 2}
    _add(study, spec, small, "ok", 5000.0, peak_mem_gib=predicted_memory_gb(spec, complete_params(small, spec)) / 1.0737)


def test_a_memory_prune_queues_the_cheapest_probe_of_its_region_once():
    from tuner.search import PROBES_ATTR, memory_region

    spec = _spec(SPEC_7B)
    study = _study()
    _ran_as_predicted(study, spec)
    v = screen(study, spec, complete_params(BIG, spec))
    assert v.rule == "memory" and "probe" in v.reason
    queued = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert len(queued) == 1 and queued[0].user_attrs["probe"] == "memory"
    probe = complete_params(queued[0].system_attrs["fixed_params"], spec)
    assert memory_region(probe) == memory_region(complete_params(ACCUM, spec))
    # the cheapest config of the region over the line, the best run's other knobs
    assert (probe["micro_batch"], probe["grad_accum"] > 1, probe["activation_checkpointing"]) == (4, True, False)
    assert predicted_memory_gb(spec, probe) > 80 >= predicted_memory_gb(spec, {**probe, "micro_batch": 2})
    assert probe["num_workers"] == OK["num_workers"]
    # while it is pending, another proposal of the region queues nothing more
    assert screen(study, spec, complete_params({**ACCUM, "grad_accum": 4}, spec)).rule == "memory"
    assert len([t for t in study.get_trials() if t.state == TrialState.WAITING]) == 1
    assert len(study.user_attrs[PROBES_ATTR]) == 1


def test_a_probe_that_runs_moves_the_line_for_the_whole_study_and_counts_as_a_contradiction():
    from tuner.search import PROBES_ATTR, screening_summary

    spec = _spec(SPEC_7B)
    study = _study()
    _ran_as_predicted(study, spec)
    assert screen(study, spec, complete_params(BIG, spec)).rule == "memory"
    probe = next(t for t in study.get_trials() if t.state == TrialState.WAITING).system_attrs["fixed_params"]
    _add(study, spec, probe, "ok", 6000.0, peak_mem_gib=60.0)  # it fits: bf16 buffer on this cluster
    assert screen(study, spec, complete_params(ACCUM, spec)) is None  # beyond the old line, now inside
    got = screening_summary(study.get_trials(), spec, study.user_attrs[PROBES_ATTR])
    assert got["probes"] == 1 and got["contradicted"] == 1 and got["screened"] == 0


def test_a_probe_that_runs_out_of_memory_closes_its_region():
    spec = _spec(SPEC_7B)
    study = _study()
    _ran_as_predicted(study, spec)
    screen(study, spec, complete_params(BIG, spec))
    probe = next(t for t in study.get_trials() if t.state == TrialState.WAITING).system_attrs["fixed_params"]
    _add(study, spec, probe, "oom", 0.0)
    n = len(study.get_trials())
    v = screen(study, spec, complete_params(ACCUM, spec))
    assert v.rule == "memory" and "probe" not in v.reason and len(study.get_trials()) == n


def test_a_proposal_as_cheap_as_its_regions_probe_is_the_probe_and_runs():
    from tuner.search import PROBES_ATTR

    spec = _spec(SPEC_7B)
    study = _study()
    _ran_as_predicted(study, spec)
    assert screen(study, spec, complete_params(ACCUM, spec)) is None
    assert [p["params"]["grad_accum"] for p in study.user_attrs[PROBES_ATTR]] == [8]
    assert not [t for t in study.get_trials() if t.state == TrialState.WAITING]


def test_memory_ratio_low_predicts_each_trial_once_per_spec(monkeypatch):
    import tuner.search._screening as screening

    spec, other = _spec(SPEC_13B), _spec(SPEC_1B)
    study = _study()
    for mb in (1, 2):
        params = {**OK, "micro_batch": mb}
        _add(study, spec, params, "ok", 4000.0,
             peak_mem_gib=0.5 * predicted_memory_gb(spec, complete_params(params, spec)) * 1e9 / 2**30)
    calls = []
    real = screening.predicted_memory_gb
    monkeypatch.setattr(screening, "predicted_memory_gb", lambda s, p: calls.append(s) or real(s, p))
    first = memory_ratio_low(study.get_trials(), spec)
    assert first == memory_ratio_low(study.get_trials(), spec) == pytest.approx(0.95 * 0.5, rel=1e-3)
    assert len(calls) == 2                                   # each trial once, not once a screen
    memory_ratio_low(study.get_trials(), other)              # another spec predicts for itself
    assert calls[2:] == [other, other]
