"""tuner.sim: simulated clusters whose physics differ from helper's."""

import dataclasses
from pathlib import Path

import pytest

from tuner.errors import SpecError
from tuner.launch import TrialRequest
from tuner.model import model_inputs
from tuner.sim import PERTURB_RANGE, SimLauncher, physics_for, truth
from tuner.spec import complete_params, load_spec, sim_physics_problem

SPEC = "studies/sim-llama13b-h100x8.toml"
BASE = {"nccl_algo": "default", "nccl_proto": "default", "num_workers": 2, "prefetch_factor": 2,
        "grad_accum": 1, "micro_batch": 1, "padding": "packed", "activation_checkpointing": True}


def _spec(physics):
    spec = load_spec(SPEC)
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, sim_physics=physics))


def test_every_constant_is_perturbed_by_30_to_50_percent():
    from helper import resolve_constants

    base, _ = resolve_constants(None, "H100-80GB")
    p = physics_for("perturbed:3", "H100-80GB")
    for name, value in base.items():
        if name in ("compute_efficiency", "comm_overlap_fraction") and p.constants[name] in (0.05, 0.97):
            continue  # a fraction clipped into (0, 1)
        rel = abs(p.constants[name] / value - 1)
        assert PERTURB_RANGE[0] - 1e-9 <= rel <= PERTURB_RANGE[1] + 1e-9, name
    assert abs(p.mean_tokens_factor - 1) >= PERTURB_RANGE[0]
    assert p.slow_node_factor > 1 and p.gemm_penalty > 0 and p.attention_beta > 0


def test_physics_is_deterministic_in_its_seed_and_differs_across_seeds():
    assert physics_for("perturbed:1", "A100-40GB") == physics_for("perturbed:1", "A100-40GB")
    assert physics_for("perturbed:1", "A100-40GB") != physics_for("perturbed:2", "A100-40GB")
    assert physics_for("matched", "A100-40GB").matched


def test_mismatched_truth_differs_from_helper():
    from helper import predict_throughput

    spec = _spec("perturbed:0")
    physics = physics_for("perturbed:0", "H100-80GB")
    t = truth(physics, model_inputs(BASE, model="llama-2-13b", world_size=8, gpu="H100-80GB", gpus_per_node=8,
                                    seq_len=2048, mean_tokens=physics.mean_tokens()))
    helper_tps = predict_throughput("llama-2-13b", 8, gpu="H100-80GB", micro_batch=1, activation_checkpointing=True,
                                    num_workers=2, examples_per_sequence=8.0)
    assert t.status == "ok" and abs(t.tokens_per_sec_per_gpu / helper_tps - 1) > 0.02
    assert spec.cluster.sim_physics == "perturbed:0"


def test_sim_launcher_runs_mismatched_physics_and_reports_it():
    spec = _spec("perturbed:5")
    r = SimLauncher(spec).launch(TrialRequest(study_name="t", number=0, params=complete_params(BASE, spec),
                                              spec=spec, run_dir=Path("/nonexistent")))
    assert r.status == "ok" and r.extra["sim_physics"] == "perturbed:5"
    assert r.tokens_per_sec_per_gpu > 0


@pytest.mark.parametrize("value", ["perturbed", "perturbed:-1", "wrong", "perturbed:x"])
def test_bad_sim_physics_is_one_line(value, tmp_path):
    text = open(SPEC).read().replace('launcher = "sim"', f'launcher = "sim"\nsim_physics = "{value}"')
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match="cluster.sim_physics"):
        load_spec(path)
    assert sim_physics_problem(value)


def test_tree_fallback_is_version_dependent_across_seeds():
    fallbacks = {physics_for(f"perturbed:{s}", "H100-80GB").tree_falls_back for s in range(12)}
    assert fallbacks == {True, False}


def test_a_perturbed_cluster_waits_on_its_own_host_at_small_micro_batches():
    """The perturbed truth keeps helper's host-dispatch floor (helper.dispatch) at this cluster's
    host speed: llama-1b on one H100 at micro-batch 1 waits on a slow host; at micro-batch 4 a
    fast host does not show."""
    physics = physics_for("perturbed:3", "H100-80GB")

    def tps(scale: float, mb: int) -> float:
        p = dataclasses.replace(physics, constants={**physics.constants, "host_dispatch_scale": scale})
        inputs = model_inputs({**BASE, "micro_batch": mb, "activation_checkpointing": False}, model="llama-1b",
                              world_size=1, gpu="H100-80GB", gpus_per_node=1, seq_len=2048,
                              mean_tokens=p.mean_tokens())
        t = truth(p, inputs)
        assert t.status == "ok"
        return t.tokens_per_sec_per_gpu

    assert tps(2.0, 1) < 0.8 * tps(1.0, 1)            # a host twice as slow: the step follows it
    assert tps(0.25, 4) == pytest.approx(tps(0.5, 4))  # device-bound: the host does not show
