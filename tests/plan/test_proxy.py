"""tuner/plan/_proxy.py: the plan's layout on the proxy, in the workload's knobs, checked by
tuner/spec/_cluster.py; HSDP/TP proxy trials compared with helper.layouts."""

import pytest

from helper import plan_training
from tuner.errors import TunerError
from tuner.plan import layout_rows, proxy_layout_knobs, proxy_spec
from tuner.spec import layout_problem, parse_spec
from tuner.study import RunOptions, load_existing_study, run_study


@pytest.fixture(scope="module")
def plan13():
    return plan_training("13b", 32, tokens=100e9)


def chosen(plan, name):
    return {**plan, "chosen": next(r for r in plan["layouts"] if r["layout"] == name)}


def test_every_plan_layout_maps_onto_the_workloads_knobs_on_its_own_cluster(plan13):
    for r in plan13["layouts"]:
        knobs = {k: v for k, v in r["workload_knobs"].items() if k != "pp_degree"}
        assert layout_problem(knobs, world_size=32, gpus_per_node=8, n_heads=40, n_kv_heads=40) is None, r["layout"]
    assert chosen(plan13, "hsdp")["chosen"]["workload_knobs"] == {"sharding": "hybrid_shard", "shard_group_size": 8}


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_the_proxy_spec_keeps_the_layout_and_passes_layout_rules(plan13, target):
    expect = {"fsdp": ({"sharding": ["full_shard"]}, ""),
              "hsdp": ({"sharding": ["hybrid_shard"], "shard_group_size": [2]}, "HSDP shard groups of 8"),
              "fsdp+tp2": ({"sharding": ["full_shard"], "tp_degree": [2]}, ""),
              "fsdp+tp8": ({"sharding": ["full_shard"], "tp_degree": [2 if target == "cpu" else 4]}, "tp_degree 8 measured"),
              "pp2+fsdp": ({"sharding": ["full_shard"]}, "no pp_degree knob")}
    for name, (space, note) in expect.items():
        raw, notes = proxy_spec(chosen(plan13, name), name="p", target=target)
        spec = parse_spec(raw, origin="plan-proxy")  # runs tuner.spec.check_spec
        got = {k: list(v) for k, v in raw["space"].items() if k in ("sharding", "tp_degree", "shard_group_size")}
        assert got == space, name
        assert (note in " ".join(notes)) if note else not notes, (name, notes)
        assert spec.cluster.world_size == (4 if target == "gpu" or name == "hsdp" else 2)
        assert spec.trial.estimate_gpu_seconds == 30 * spec.cluster.world_size  # 4 ranks: a cap twice as large


def test_hsdp_with_tp_keeps_two_replicas_and_a_bad_mapping_is_one_line():
    knobs, notes = proxy_layout_knobs({"sharding": "hybrid_shard", "shard_group_size": 4, "tp_degree": 2},
                                      world_size=4, gpus_per_node=4, n_heads=4, n_kv_heads=4)
    assert knobs == {"sharding": "hybrid_shard", "tp_degree": 2, "shard_group_size": 1} and notes
    with pytest.raises(TunerError, match="cannot run the plan's layout"):
        proxy_layout_knobs({"sharding": "hybrid_shard"}, world_size=5, gpus_per_node=5, n_heads=4, n_kv_heads=4)


def test_layout_rows_compare_hsdp_tp_trials_with_helper_layouts(plan13, tmp_path):
    """The proxy study through the sim launcher (which models HSDP/TP with helper.layouts): the
    rows exist, one per micro-batch, and agree with helper within the sim's noise."""
    raw, _ = proxy_spec(chosen(plan13, "fsdp+tp2"), name="proxy-sim", launcher="sim")
    url = f"sqlite:///{tmp_path}/p.db"
    run_study(parse_spec(raw, base_dir=tmp_path, origin="plan-proxy"),
              RunOptions(storage_url=url, study_name="proxy-sim", runs_dir=tmp_path / "runs",
                         max_trials=len(raw["space"]["micro_batch"]) - 1, ablation=False))
    rows = layout_rows(load_existing_study(url, "proxy-sim"), raw, {"before": None, "after": None})
    assert len(rows) == 3 and all("fsdp+tp2" in r["config"] for r in rows)
    assert all(abs(r["error_pct"]) < 15 for r in rows), [r["error_pct"] for r in rows]


def test_validate_a_tp_plan_through_the_sim_compares_without_touching_the_plan(plan13, tmp_path):
    from tuner.plan import format_validation, validate_plan
    plan = chosen(plan13, "fsdp+tp8")
    bands = [r["band_pct"] for r in plan["layouts"]]
    new = validate_plan(plan, {"model_size": "13b", "gpu_count": 32, "tokens": 100e9}, out_dir=tmp_path,
                        launcher="sim")
    v = new["validation"]
    assert len(v["rows"]) == 3 and all("fsdp+tp2" in r["config"] for r in v["rows"])
    assert any("tp_degree 8 measured as tp_degree 2" in n for n in v["fallbacks"])
    assert [r["band_pct"] for r in plan["layouts"]] == bands   # the caller's plan is left as it was
    assert "fsdp+tp2 (mesh 1x1x2)" in format_validation(v)
