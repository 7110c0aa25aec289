"""tuner.search: helper's model, refitted online, guides an Optuna sampler."""

import dataclasses

import optuna
import pytest
from optuna.trial import TrialState

from tuner.errors import SpecError
from tuner.search import ModelGuidedSampler, make_sampler, model_knows, suggest_params, top_prediction
from tuner.spec import complete_params, load_spec

SPEC = "studies/sim-llama13b-h100x8.toml"


def _spec(path=SPEC, sampler="auto"):
    spec = load_spec(path)
    return dataclasses.replace(spec, study=dataclasses.replace(spec.study, sampler=sampler))


def test_auto_is_model_guided_when_helper_knows_the_cluster_and_tpe_otherwise():
    assert isinstance(make_sampler(_spec()), ModelGuidedSampler)
    cpu = _spec("studies/quickstart.toml")
    assert not model_knows(cpu)
    assert isinstance(make_sampler(cpu), optuna.samplers.TPESampler)
    with pytest.raises(SpecError, match="study.sampler"):
        make_sampler(dataclasses.replace(cpu, study=dataclasses.replace(cpu.study, sampler="model")))


def test_first_pick_is_the_models_top_prediction_and_records_what_it_expected():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    trial = study.ask()
    params = suggest_params(trial, spec)
    attrs = study.get_trials()[0].user_attrs
    assert attrs["model_pick"] == "startup" and params["padding"] == "packed"
    # the model's top prediction, enqueued, for its predicted value: the first pick is near it
    # (a little lower only where the top is risky on memory, which the pick weighs)
    _, top_attrs = ModelGuidedSampler(spec).propose([], fixed=top_prediction(spec))
    top_value = top_attrs["predicted_tokens_per_sec_per_gpu"]
    assert 0.85 * top_value <= attrs["predicted_tokens_per_sec_per_gpu"] <= top_value * 1.0001


def test_running_trials_and_finished_configs_are_never_proposed_again():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    first = study.ask()
    p1 = complete_params(suggest_params(first, spec), spec)
    second = study.ask()  # `first` is RUNNING: a parallel coordinator must get something else
    p2 = complete_params(suggest_params(second, spec), spec)
    assert p1 != p2
    for t, value in ((first, 5000.0), (second, 4000.0)):
        t.set_user_attr("status", "ok")
        study.tell(t, value)
    seen = [p1, p2]
    for _ in range(4):
        t = study.ask()
        p = complete_params(suggest_params(t, spec), spec)
        assert p not in seen
        seen.append(p)
        t.set_user_attr("status", "ok")
        study.tell(t, 4500.0)
    picks = [t.user_attrs.get("model_pick") for t in study.get_trials()]
    # diverse top predictions first, then knob levels never measured
    assert picks[:3] == ["startup"] * 3 and set(picks[3:]) == {"cover"}


def test_enqueued_baseline_keeps_its_params():
    spec = _spec()
    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    study.enqueue_trial(dict(spec.baseline), user_attrs={"role": "baseline"})
    params = suggest_params(study.ask(), spec)
    assert all(params[k] == v for k, v in spec.baseline.items() if k in params)


def test_a_setting_helper_rules_out_is_tried_once_and_screening_settles_it():
    """NVLS on A100 (no NVSwitch multicast), and the other settings helper says NCCL never runs.
    The sampler may
    still propose it (the rule may be wrong about a cluster; a twin's prediction stands in),
    at a quarter of the weight; screening, with no preflight to ask, prunes it at 0 GPU-s, and
    the pruned setting is never proposed again."""
    from tuner.search import nccl_problem, screen
    from tuner.storage import end_unrun

    spec = _spec("studies/sim-llama1b-a100x16.toml")
    sampler = ModelGuidedSampler(spec)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    pruned_pairs = []
    for _ in range(30):
        t = study.ask()
        p = complete_params(suggest_params(t, spec), spec)
        pair = (p["nccl_algo"], p["nccl_proto"])
        assert pair not in pruned_pairs, f"{pair} proposed again after screening pruned it"
        verdict = screen(study, spec, p)
        if verdict is not None:
            assert verdict.rule == "nccl" and nccl_problem(spec, *pair)[1]   # a rule for every NCCL version
            end_unrun(study, t, "pruned", verdict.reason)
            pruned_pairs.append(pair)
            continue
        assert nccl_problem(spec, *pair) is None or not nccl_problem(spec, *pair)[1]
        t.set_user_attr("status", "ok")
        study.tell(t, 10000.0)
    certain = {p for p in {(a, b) for a in spec.knob("nccl_algo").choices for b in spec.knob("nccl_proto").choices}
               if (nccl_problem(spec, *p) or (None, False))[1]}
    assert 1 <= sum(t.state == TrialState.PRUNED for t in study.get_trials()) == len(pruned_pairs) <= len(certain)


def test_a_setting_behind_a_version_dependent_rule_has_a_prediction_and_is_not_used_to_cover_a_level():
    """13B on 8 H100: helper says NVLS and Tree with Simple or default fail on its NCCL version
    (a version-dependent rule: older NCCL falls back). Such a config gets its twin's prediction,
    so expected improvement can pick it (at half the weight) and screening launches it: the
    cluster says. Before, helper had no prediction for it and the sampler never proposed it: in
    1,159 trials on a cluster where NVLS/Simple was the optimum's setting (issue 28). Covering a
    knob's levels does not use it: a level measured first through a setting that may not run
    on the cluster cost the cold benchmark 5 of 48 studies (docs/benchmarks.md)."""
    from tuner.search import nccl_problem

    spec = _spec()
    config = {**spec.baseline, "nccl_algo": "NVLS", "nccl_proto": "Simple"}
    problem = nccl_problem(spec, "NVLS", "Simple")
    assert problem is not None and problem[1] is False                   # version-dependent
    proposed = ModelGuidedSampler(spec).propose([], fixed=config)
    assert proposed is not None and proposed[1]["predicted_tokens_per_sec_per_gpu"] > 0

    study = optuna.create_study(direction="maximize", sampler=ModelGuidedSampler(spec))
    for _ in range(12):
        t = study.ask()
        p = complete_params(suggest_params(t, spec), spec)
        if t.user_attrs.get("model_pick") == "cover":
            problem = nccl_problem(spec, p["nccl_algo"], p["nccl_proto"])
            assert problem is None or problem[1], p                       # never an unsettled version rule
        t.set_user_attr("status", "ok")
        study.tell(t, 4000.0)


def test_a_cluster_whose_preflight_runs_what_helper_rules_out_gets_it_launched():
    """The same setting on a cluster whose NCCL preflight passes it: screening lets it through,
    as it would a version-dependent rule, and records the answer."""
    from tuner.search import screen

    class Cluster:
        def preflight_nccl(self, spec, nccl_algo, nccl_proto):
            return None   # it runs

    spec = _spec("studies/sim-llama1b-a100x16.toml")
    study = optuna.create_study(direction="maximize")
    params = complete_params({"nccl_algo": "NVLS", "nccl_proto": "Simple"}, spec)
    assert screen(study, spec, params) is not None                       # no preflight: helper's rule stands
    assert screen(study, spec, params, launcher=Cluster()) is None or \
        screen(study, spec, params, launcher=Cluster()).rule == "memory"
    assert study.user_attrs["nccl_preflight"]["NVLS|Simple"] == "ok"


# ------------------------------------------------------------------ reuse-aware picks (issue 15)

def _layout_spec(resident=True):
    """13B on one node of 8: hybrid_shard's shard group is the node, the same layout as
    full_shard to helper's model, so the two predict alike and tie on expected improvement."""
    from tuner.spec import parse_spec

    raw = _spec().to_dict()
    raw.pop("budget")
    raw["space"] = {"sharding": ["full_shard", "hybrid_shard"], "micro_batch": [1, 2]}
    raw["baseline"] = {"sharding": "full_shard", "micro_batch": 1}
    raw["trial"] = {**raw["trial"], "resident": resident}
    return parse_spec(raw)


def _measured(spec, params, value=3000.0):
    from optuna.distributions import CategoricalDistribution

    return optuna.trial.create_trial(
        params=params, distributions={k.name: CategoricalDistribution(list(k.choices)) for k in spec.space},
        value=value, user_attrs={"status": "ok"})


def test_with_equal_ei_the_pick_keeps_the_warm_workers_model_and_cold_trials_do_not_care():
    from tuner.budget import Worker

    picks = {}
    for resident in (True, False):
        spec = _layout_spec(resident)
        done = [_measured(spec, {"sharding": s, "micro_batch": 1}) for s in ("full_shard", "hybrid_shard")]
        for layout in ("full_shard", "hybrid_shard"):
            sampler = ModelGuidedSampler(spec, n_startup=0)
            sampler.worker = Worker(params={"sharding": layout, "micro_batch": 1})
            params, attrs = sampler.propose(done)
            picks[resident, layout] = params["sharding"], attrs["model_switch"]
            # micro_batch 2 is the level never measured: it is covered first, at the least set-up
            assert attrs["model_pick"] == "cover" and params["micro_batch"] == 2
    # warm: the worker's model stays (micro_batch needs nothing); a rebuild is the dearer pick
    assert picks[True, "full_shard"] == ("full_shard", "none")
    assert picks[True, "hybrid_shard"] == ("hybrid_shard", "none")
    # cold: every trial starts afresh, so which layout the last trial had does not matter
    assert picks[False, "full_shard"] == picks[False, "hybrid_shard"]
    assert picks[False, "full_shard"][1] == "process"


def test_the_sampler_follows_its_own_coordinators_worker():
    spec = _layout_spec()
    sampler = ModelGuidedSampler(spec)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    trial = study.ask({"sharding": optuna.distributions.CategoricalDistribution(["full_shard", "hybrid_shard"])})
    for key, value in {"status": "ok", "warm": False, "gpu_seconds": 500.0}.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 3000.0)
    assert sampler.worker is not None and sampler.worker.params["sharding"] == trial.params["sharding"]
    timed_out = study.ask()
    for key, value in {"status": "timeout", "warm": True, "gpu_seconds": 900.0}.items():
        timed_out.set_user_attr(key, value)
    study.tell(timed_out, 0.0)
    assert sampler.worker is None  # a timeout ends the worker: the next trial starts one


def test_a_candidate_that_would_outrun_its_budget_cap_is_weighted_out():
    """Admission stops a trial at budget.CAP_FACTOR x the estimate (tuner.budget): one the
    model expects to run past that measures nothing and, warm, ends the worker."""
    import numpy as np

    from tuner import knobs

    spec = _layout_spec(resident=False)
    done = [optuna.trial.create_trial(
        params={"sharding": "full_shard", "micro_batch": 1},
        distributions={k.name: optuna.distributions.CategoricalDistribution(list(k.choices)) for k in spec.space},
        value=3000.0, user_attrs={"status": "ok", "gpu_seconds": 100.0 * spec.cluster.world_size})]
    cap_s = 3.0 * 100.0  # CAP_FACTOR x the median cost, per GPU
    process = knobs.RECONFIGURE.index("process")
    sampler = ModelGuidedSampler(spec)
    p = sampler._prob_within_cap(done, np.array([cap_s / 2, cap_s * 3, cap_s * 1e3]), np.array([process] * 3),
                                 np.array([0.1, 0.1, 0.1]), sampler._setup_by_level(done))
    assert p[0] > 0.99 and p[1] < 0.01 and p[2] == 0.0
    # before any trial finished, the cap is the spec's (3 x its first estimate): nothing is ruled out
    assert sampler._prob_within_cap([], np.array([cap_s * 2]), np.array([process]), np.array([0.1]),
                                    sampler._setup_by_level([]))[0] > 0.99


# ------------------------------------------------------------------ evidence overrules the model (issue 28)

def _small_spec(space, baseline):
    from tuner.spec import parse_spec

    raw = _spec().to_dict()
    raw.pop("budget")
    raw["space"], raw["baseline"] = space, baseline
    raw["trial"] = {**raw["trial"], "resident": False}
    return parse_spec(raw)


def _ran(spec, params, value, peak_ratio=None):
    from tuner.search import distribution, predicted_memory_gb

    attrs = {"status": "ok"}
    if peak_ratio is not None:  # measured peak = ratio x helper's prediction (GB -> GiB)
        attrs["peak_mem_gib"] = peak_ratio * predicted_memory_gb(spec, complete_params(params, spec)) * 1e9 / 2**30
    return optuna.trial.create_trial(params=params, distributions={k: distribution(spec.knob(k)) for k in params},
                                     value=value, user_attrs=attrs)


def test_every_level_of_every_searched_knob_is_measured_early_even_those_the_model_calls_neutral():
    # helper: prefetch_factor has no steady-state effect, num_workers none beyond 2
    spec = _small_spec({"num_workers": [0, 2, 4, 8], "prefetch_factor": [2, 4, 8], "micro_batch": [1, 2]},
                       {"num_workers": 2, "prefetch_factor": 2, "micro_batch": 1})
    sampler, done = ModelGuidedSampler(spec, n_startup=1), []
    for _ in range(5):
        params, attrs = sampler.propose(done)
        done.append(_ran(spec, params, 3000.0))
    assert [t.user_attrs.get("model_pick") for t in done] == [None] * 5  # (attrs go to the study, not here)
    for knob in ("num_workers", "prefetch_factor", "micro_batch"):
        assert {t.params.get(knob) for t in done} >= set(spec.knob(knob).choices), knob


def test_the_model_weight_drops_when_measurements_contradict_it():
    spec = _small_spec({"micro_batch": [1, 2], "num_workers": [0, 2, 4, 8]},
                       {"micro_batch": 1, "num_workers": 2})
    sampler = ModelGuidedSampler(spec)
    # where helper predicts faster, it is slower here, by as much (and the other way round)
    agree, against = [], []
    for mb in (1, 2):
        for nw in (0, 2, 4, 8):
            p = {"micro_batch": mb, "num_workers": nw}
            _, attrs = sampler.propose([], fixed=p)
            agree.append(_ran(spec, p, attrs["predicted_tokens_per_sec_per_gpu"]))
            against.append(_ran(spec, p, 1e8 / attrs["predicted_tokens_per_sec_per_gpu"]))
    keep = agree[:-1]
    against = against[:-1]
    _, trusted = ModelGuidedSampler(spec).propose(keep)
    _, overruled = ModelGuidedSampler(spec).propose(against)
    assert trusted["model_weight"] > 0.7
    assert overruled["model_weight"] < 0.3


def test_a_region_the_model_writes_off_gets_one_probe_its_cheapest_config_beyond_the_line():
    # 13B x 8: helper predicts any grad_accum > 1 needs 86-88 GB (an unsharded fp32 buffer); this
    # study measured peaks 10% above helper's, so the line (0.95 x 1.1 x prediction) excludes them
    spec = _small_spec({"grad_accum": [1, 2, 4], "micro_batch": [1, 2], "activation_checkpointing": [True]},
                       {"grad_accum": 1, "micro_batch": 1, "activation_checkpointing": True})
    done = [_ran(spec, {"grad_accum": 1, "micro_batch": mb, "activation_checkpointing": True}, 3000.0 + mb,
                 peak_ratio=1.1) for mb in (1, 2)]
    params, attrs = ModelGuidedSampler(spec).propose(done, probes=[])
    assert attrs["model_pick"] == "probe"
    assert params["grad_accum"] > 1 and params["micro_batch"] == 1
    # once that probe is pending, the region waits for it (nothing left but the probe's siblings)
    probe = {"region": "x", "params": params}
    from tuner.search import memory_region

    probe["region"] = memory_region(complete_params(params, spec))
    assert ModelGuidedSampler(spec).propose(done, probes=[probe]) is None


def _refused(spec, params, message):
    from tuner.search import distribution

    return optuna.trial.create_trial(params=params, distributions={k: distribution(spec.knob(k)) for k in params},
                                     state=TrialState.FAIL, user_attrs={"status": "error", "message": message})


@pytest.mark.parametrize("refusals,ring_again", [(1, True), (2, False)])
def test_an_nccl_setting_the_cluster_refused_twice_is_proposed_in_no_config(refusals, ring_again):
    # helper has no rule against Ring on H100: only the cluster's NCCL says it does not run here
    # (a random surface's NCCL, bench/surfaces.py: 118 of 165 trials of one study were Ring
    # configs refused one by one before this rule)
    spec = _small_spec({"nccl_algo": ["default", "Ring"], "micro_batch": [1, 2, 4, 8], "grad_accum": [1, 2]},
                       {"nccl_algo": "default", "micro_batch": 1, "grad_accum": 1})
    nccl = "NCCL WARN Error: no algorithm/protocol available for AllGather with NCCL_ALGO=Ring NCCL_PROTO=default"
    done = [_ran(spec, {"nccl_algo": "default", "micro_batch": mb, "grad_accum": 1}, 3000.0 + mb) for mb in (1, 2)]
    done += [_refused(spec, {"nccl_algo": "Ring", "micro_batch": mb, "grad_accum": 1}, nccl) for mb in (1, 2)[:refusals]]
    sampler, proposed = ModelGuidedSampler(spec, n_startup=1), []
    while (got := sampler.propose(_numbered(done))) is not None:   # until every config left is tried
        params = got[0]
        proposed.append(params["nccl_algo"])
        done.append(_ran(spec, params, 3000.0) if params["nccl_algo"] == "default" else _refused(spec, params, nccl))
    assert ("Ring" in proposed) is ring_again and "default" in proposed
    # an error that does not name NCCL says nothing of the setting
    other = [*done[:2], *(_refused(spec, {"nccl_algo": "Ring", "micro_batch": mb, "grad_accum": 1},
                                   "CUDA error: an illegal memory access was encountered") for mb in (1, 2))]
    sampler, proposed = ModelGuidedSampler(spec, n_startup=1), []
    while (got := sampler.propose(_numbered(other))) is not None:
        proposed.append(got[0]["nccl_algo"])
        other.append(_ran(spec, got[0], 3000.0))
    assert "Ring" in proposed


def _numbered(trials):
    for n, t in enumerate(trials):  # as a study numbers them
        t.number = n
    return trials
