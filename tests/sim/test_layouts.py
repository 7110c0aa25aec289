"""The sim launcher's layouts and checkpoints (tuner/model/_layouts.py): HSDP and TP trials
OOM and rank as helper.layouts predicts; checkpoints cost wall time, not tokens/s."""

from pathlib import Path

import optuna
import pytest

from helper.calibration import resolve_constants
from helper.layouts import Layout, layout_memory, layout_step_time
from objectives.parallel import plan_layout
from tuner.launch import TrialRequest, get_launcher
from tuner.model import checkpoint_cost
from tuner.spec import complete_params, load_spec, parse_spec
from tuner.stats import trial_status
from tuner.study import RunOptions, run_study

ROOT = Path(__file__).resolve().parents[2]
BASE = load_spec(ROOT / "studies/llama7b-h100x32.toml").with_launcher("sim")  # 7B, 4 x 8 H100
MB = 8  # micro-batch 8 of 2048 tokens without activation checkpointing: FSDP and HSDP do not fit in 80 GB
SPACE = {"sharding": ["full_shard", "hybrid_shard"], "tp_degree": [1, 2, 4, 8], "micro_batch": [MB],
         "activation_checkpointing": [False]}


def layout_spec(name="layouts-sim", **trial):
    raw = BASE.to_dict()
    raw["study"] = {**raw["study"], "name": name, "sampler": "grid"}
    raw.pop("budget")
    raw["space"] = SPACE
    raw["baseline"] = {"sharding": "full_shard", "tp_degree": 2, "micro_batch": MB, "activation_checkpointing": False}
    raw["trial"] = {**raw["trial"], **trial}
    return parse_spec(raw, base_dir=ROOT)


def launch(spec, params, number=0):
    request = TrialRequest(study_name="s", number=number, params=complete_params(params, spec), spec=spec,
                           run_dir=Path("/nonexistent"))
    return get_launcher(spec).launch(request)


@pytest.mark.parametrize("knobs", [
    {"sharding": "full_shard", "tp_degree": 1}, {"sharding": "hybrid_shard", "tp_degree": 1},
    {"sharding": "hybrid_shard", "tp_degree": 2, "shard_group_size": 2}, {"sharding": "full_shard", "tp_degree": 4},
    {"sharding": "shard_grad_op", "tp_degree": 8},
])
def test_the_sim_mesh_is_the_workloads_mesh(knobs):
    theirs = plan_layout(knobs, world_size=32, gpus_per_node=8)
    ours = Layout.from_knobs(knobs, world_size=32, gpus_per_node=8)
    assert (ours.dp_replicate, ours.dp_shard, ours.tp) == theirs.mesh_shape


def test_layout_trials_oom_and_rank_as_helper_predicts():
    spec = layout_spec()
    consts, _ = resolve_constants(None, "H100-80GB")
    predicted, results = {}, {}
    for sharding in SPACE["sharding"]:
        for tp in SPACE["tp_degree"]:
            knobs = {"sharding": sharding, "tp_degree": tp}
            lay = Layout.from_knobs(knobs, world_size=32, gpus_per_node=8)
            common = dict(gpu="H100-80GB", micro_batch=MB, seq_len=2048, activation_checkpointing=False)
            mem = layout_memory("llama-2-7b", lay, **common)["total"]
            tps = layout_step_time("llama-2-7b", lay, constants=consts, gpus_per_node=8, **common)["tokens_per_sec_per_gpu"]
            predicted[(sharding, tp)] = (mem, tps)
            results[(sharding, tp)] = launch(spec, {**knobs, "micro_batch": MB, "activation_checkpointing": False})
    for key, r in results.items():
        assert (r.status == "oom") == (predicted[key][0] > 80), (key, r.status, predicted[key][0])
        if r.status == "ok":
            assert r.extra["layout"]["mesh"][2] == key[1]
    assert {k for k, r in results.items() if r.status == "oom"} == {("full_shard", 1), ("hybrid_shard", 1)}
    ok = [k for k, r in results.items() if r.status == "ok"]
    by_sim = sorted(ok, key=lambda k: -results[k].extra["noiseless_tokens_per_sec_per_gpu"])
    by_helper = sorted(ok, key=lambda k: -predicted[k][1])
    assert [k[1] for k in by_sim] == [k[1] for k in by_helper]  # the TP degrees in helper's order
    assert by_sim[0][1] == 2 and by_sim[-1][1] == 8


def test_a_sim_study_over_sharding_and_tp_degree_runs_and_ranks(tmp_path):
    spec = layout_spec()
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study(spec, RunOptions(storage_url=storage, budget_gpu_seconds=8 * 3600.0, runs_dir=tmp_path / "runs"))
    study = optuna.load_study(study_name="layouts-sim", storage=storage)
    done = [t for t in study.trials if t.state.is_finished() and trial_status(t) != "skipped"]  # not ablation stubs
    seen = {(t.params["sharding"], t.params["tp_degree"]) for t in done}
    assert seen == {(s, t) for s in SPACE["sharding"] for t in SPACE["tp_degree"]}
    # over capacity: run out of memory, or screened out before launch once the model and the
    # study's own OOMs say so (tuner.search: `pruned`, 0 GPU-s)
    over = {(t.params["sharding"], t.params["tp_degree"]): trial_status(t) for t in done
            if trial_status(t) in ("oom", "pruned")}
    assert set(over) == {("full_shard", 1), ("hybrid_shard", 1)}
    best = max((t for t in done if trial_status(t) == "ok"), key=lambda t: t.value)
    assert best.params["tp_degree"] == 2


def test_checkpoints_cost_wall_time_not_tokens_per_second(tmp_path):
    knobs = {"sharding": "full_shard", "tp_degree": 2, "micro_batch": MB, "activation_checkpointing": False}
    plain = launch(layout_spec(), knobs)
    for mode in ("sync", "async"):
        spec = layout_spec(checkpoint_every=5, checkpoint_mode=mode, checkpoint_dir=str(tmp_path))
        saved = launch(spec, knobs)
        assert saved.step_values == plain.step_values  # saves sit outside the timed step
        ckpt = saved.extra["checkpoint"]
        steps = spec.trial.warmup_steps + len(plain.step_values)
        assert ckpt["saves"] == len(range(5, steps, 5)) > 0
        assert saved.wall_seconds == pytest.approx(plain.wall_seconds + ckpt["saves"] * ckpt["blocking_s"])
        assert ckpt["size_gb"] == pytest.approx(12 * 6.74e9 / 1e9, rel=0.02)  # fp32 weights + Adam m, v
    sync = checkpoint_cost(7e9, mode="sync", every=5, steps=30, world_size=32, nodes=4, step_time_s=1.0)
    async_ = checkpoint_cost(7e9, mode="async", every=5, steps=30, world_size=32, nodes=4, step_time_s=1.0)
    assert async_["blocking_s"] < sync["blocking_s"] == async_["background_s"]


def test_fsdp_over_every_gpu_is_the_plain_sim():
    spec = layout_spec()
    r = launch(spec, {"sharding": "full_shard", "tp_degree": 1, "micro_batch": 1, "activation_checkpointing": False})
    assert r.status == "ok" and r.extra["layout"] is None and r.extra["checkpoint"] is None
    assert Layout.from_knobs({"sharding": "shard_grad_op"}, world_size=32, gpus_per_node=8) == Layout(dp_shard=32)
