"""The surface bench: random surfaces, the first-principles cluster, their launcher, a smoke run."""

import dataclasses
import math
from pathlib import Path

import pytest

from bench.first_principles_cluster import FirstPrinciplesCluster  # noqa: E402
from bench.surface_launcher import SurfaceLauncher  # noqa: E402
from bench.surfaces import P_BIG_BATCH, P_MATTERS, ClusterKind, draw_surface, grid  # noqa: E402
from tuner.launch import TrialRequest  # noqa: E402
from tuner.spec import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {"nccl_algo": ("default", "Ring", "Tree", "NVLS"), "nccl_proto": ("default", "Simple", "LL128", "LL"),
          "num_workers": (0, 2, 4, 8), "prefetch_factor": (2, 4, 8), "grad_accum": (1, 2, 4, 8),
          "micro_batch": (1, 2, 4, 8), "padding": ("max_length", "packed"), "activation_checkpointing": (False, True)}
KIND = ClusterKind(name="7b-h100x32", model="llama-2-7b", gpu="H100-80GB", world_size=32, gpus_per_node=8,
                   seq_len=2048, levels=LEVELS)
BASE = {"nccl_algo": "default", "nccl_proto": "default", "num_workers": 2, "prefetch_factor": 2, "grad_accum": 4,
        "micro_batch": 2, "padding": "max_length", "activation_checkpointing": True}
N = 60


@pytest.fixture(scope="module")
def surfaces():
    return [draw_surface(KIND, seed) for seed in range(N)]


def _within(k: int, n: int, p: float) -> bool:
    """k of n is a plausible draw at rate p (4 binomial sd)."""
    return abs(k - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1


# ---- the generator ------------------------------------------------------------------------
def test_a_seed_is_one_surface_and_seeds_differ():
    a, b = draw_surface(KIND, 7), draw_surface(KIND, 7)
    assert a == b
    assert [a.evaluate(p) for p in list(grid(LEVELS))[:200]] == [b.evaluate(p) for p in list(grid(LEVELS))[:200]]
    assert draw_surface(KIND, 8).main != a.main
    other = dataclasses.replace(KIND, name="1b-a100x16", model="llama-1b", gpu="A100-40GB", world_size=16)
    assert draw_surface(other, 7).main != a.main  # another kind: another surface


def test_surfaces_hold_the_structures_at_their_stated_rates(surfaces):
    assert _within(sum(s.scenario == "big_batch" for s in surfaces), N, P_BIG_BATCH)
    generic = [s for s in surfaces if s.scenario == "generic"]
    matters = sum(len(s.main) for s in generic)
    assert _within(matters, len(generic) * len(LEVELS), P_MATTERS)
    # prefetch_factor has no steady-state effect in helper (tuner.search.MODEL_KNOBS): it matters here
    assert _within(sum("prefetch_factor" in s.main for s in surfaces), N, P_MATTERS)
    # helper: a bigger micro-batch is faster; here it is slower on a good share of surfaces
    slower = sum(s.main.get("micro_batch", {}).get(8, 0) < s.main.get("micro_batch", {}).get(1, 0) - 0.01
                 for s in surfaces)
    assert slower >= 0.15 * N
    assert all(s.pairs for s in surfaces)
    assert sum(bool(s.corners) for s in surfaces) >= 0.15 * N
    assert sum(bool(s.nccl_failures) for s in surfaces) >= 0.8 * N
    cells = list(grid({k: LEVELS[k] for k in ("grad_accum", "micro_batch", "padding", "activation_checkpointing")}))
    for s in surfaces:  # every surface has a memory boundary inside its grid, and configs that fit
        statuses = {s.status_tps({**BASE, **p, "nccl_algo": "default", "nccl_proto": "default"})[0] for p in cells}
        assert statuses == {"ok", "oom"}, s.seed


def test_big_batch_surfaces_put_the_optimum_beyond_helpers_memory_line(surfaces):
    from tuner.search import predicted_memory_gb
    from tuner.spec import complete_params

    spec = load_spec(ROOT / "studies/llama7b-h100x32.toml")
    beyond = {s.seed: predicted_memory_gb(spec, complete_params(s.optimum()[0], spec)) > 80.0 for s in surfaces[:30]}
    big = [s.seed for s in surfaces[:30] if s.scenario == "big_batch"]
    assert sum(beyond[k] for k in big) >= 0.4 * len(big)
    assert sum(beyond.values()) >= 0.15 * len(beyond)


def test_the_surface_serves_its_failures_and_step_times():
    s = draw_surface(KIND, 3)
    broken = next(iter(s.nccl_failures))
    o = s.evaluate({**BASE, "nccl_algo": broken[0], "nccl_proto": broken[1]})
    assert o.status == "error" and "NCCL" in o.message and s.preflight_nccl(*broken) == o.message
    assert s.preflight_nccl("default", "default") is None
    ok = s.evaluate(BASE)
    assert ok.status in ("ok", "oom")
    assert ok.step_time_s * math.exp(s.log_tokens_per_sec(BASE)) * 32 == pytest.approx(ok.tokens_per_step)


# ---- the first-principles cluster ---------------------------------------------------------
def _fp(**kw):
    return FirstPrinciplesCluster("llama-2-7b", gpu="H100-80GB", world_size=32, gpus_per_node=8, seq_len=2048,
                                  seed=kw.pop("seed", None), **kw)


def test_first_principles_memory_and_time_move_the_way_physics_says():
    c = _fp()
    mem = [c.memory_gib({**BASE, "micro_batch": mb, "activation_checkpointing": False})["total"] for mb in (1, 2, 4, 8)]
    assert mem == sorted(mem)
    assert c.memory_gib(BASE)["total"] < c.memory_gib({**BASE, "activation_checkpointing": False})["total"]
    fast = c.evaluate({**BASE, "activation_checkpointing": False, "padding": "packed"})
    assert fast.tokens_per_sec_per_gpu > c.evaluate({**BASE, "padding": "packed"}).tokens_per_sec_per_gpu
    # issue 28's case: micro-batch 4 x grad_accum 8, unsharded bf16 accumulation, fits at ~60 GB
    o = c.evaluate({**BASE, "micro_batch": 4, "grad_accum": 8, "activation_checkpointing": False, "padding": "packed"})
    assert o.status == "ok" and 50 < o.peak_mem_gib < 70
    assert c.evaluate({**BASE, "micro_batch": 8, "activation_checkpointing": False}).status == "oom"
    assert c.evaluate({**BASE, "nccl_algo": "NVLS", "nccl_proto": "LL"}).status == "error"
    assert c.evaluate({**BASE, "nccl_algo": "Ring", "nccl_proto": "LL"}).tokens_per_sec_per_gpu < \
        c.evaluate({**BASE, "nccl_algo": "Ring", "nccl_proto": "Simple"}).tokens_per_sec_per_gpu
    a100 = FirstPrinciplesCluster("llama-2-7b", gpu="A100-80GB", world_size=16, gpus_per_node=8, seq_len=2048,
                                  seed=None)
    assert a100.preflight_nccl("NVLS", "default") is not None and c.preflight_nccl("NVLS", "default") is None
    assert _fp(seed=1).constants != _fp(seed=2).constants == _fp(seed=2).constants


# ---- the launcher -------------------------------------------------------------------------
def _spec(resident: bool, **trial):
    spec = load_spec(ROOT / "studies/llama7b-h100x32.toml").with_launcher("sim")
    return dataclasses.replace(spec, trial=dataclasses.replace(spec.trial, resident=resident, **trial))


def _request(spec, number, params, **kw):
    return TrialRequest(study_name="t", number=number, params=params, spec=spec, run_dir=Path("/nonexistent"), **kw)


def _ok_surface():
    """A surface where BASE runs, and a config of it that runs out of memory."""
    for seed in range(50):
        s = draw_surface(KIND, seed)
        if s.evaluate(BASE).status == "ok":
            oom = next(p for p in grid(LEVELS) if p["nccl_algo"] == "default" and p["nccl_proto"] == "default"
                       and s.evaluate(p).status == "oom")
            return s, oom
    raise AssertionError("no surface runs the baseline")


def test_cold_trials_pay_start_up_every_time():
    s, _ = _ok_surface()
    spec = _spec(False)
    launcher = SurfaceLauncher(spec, s)
    for n in range(3):
        r = launcher.launch(_request(spec, n, BASE))
        assert r.status == "ok" and not launcher.warm()
        assert r.startup_seconds == s.setup_s["process"]
        assert r.gpu_seconds == pytest.approx(32 * r.wall_seconds)
        assert r.extra["setup_gpu_seconds"] == pytest.approx(32 * s.setup_s["process"])
        assert "warm" not in r.extra
    again = SurfaceLauncher(spec, s).launch(_request(spec, 2, BASE))
    assert again.step_values == r.step_values  # deterministic for (seed, trial number)
    assert abs(r.tokens_per_sec_per_gpu / r.extra["noiseless_tokens_per_sec_per_gpu"] - 1) < 0.1


def test_warm_trials_pay_only_their_reconfiguration():
    s, oom = _ok_surface()
    spec = _spec(True)
    launcher = SurfaceLauncher(spec, s)
    first = launcher.launch(_request(spec, 0, BASE))
    assert first.extra["warm"] is False and first.extra["reconfigured"] == "process"
    assert first.extra["worker_startup_gpu_seconds"] == pytest.approx(32 * s.setup_s["process"])
    second = launcher.launch(_request(spec, 1, {**BASE, "num_workers": 4}))
    assert second.extra["warm"] is True and second.extra["reconfigured"] == "data_loader"
    assert second.startup_seconds == s.setup_s["data_loader"] and "worker_startup_gpu_seconds" not in second.extra
    assert second.gpu_seconds < first.gpu_seconds
    third = launcher.launch(_request(spec, 2, {**BASE, "num_workers": 4, "activation_checkpointing": False}))
    assert third.extra["reconfigured"] == "model"
    failed = launcher.launch(_request(spec, 3, oom))
    assert failed.status == "oom" and launcher.warm()  # recovered in place
    assert launcher.level(BASE) == "communicators"  # after a failure: new communicators at least


def test_the_cap_stops_a_trial_and_a_timeout_ends_the_worker():
    s, _ = _ok_surface()
    spec = _spec(True, adaptive=False)
    launcher = SurfaceLauncher(spec, s)
    tiny = 32 * s.setup_s["process"] * 0.5
    r = launcher.launch(_request(spec, 0, BASE, max_gpu_seconds=tiny))
    assert r.status == "timeout" and r.gpu_seconds == pytest.approx(tiny) and not launcher.warm()
    full = SurfaceLauncher(spec, s).launch(_request(spec, 1, BASE))
    cap = full.gpu_seconds - 32 * sum(full.step_seconds[-3:]) * 1.01  # three steps short of the end
    capped = SurfaceLauncher(spec, s).launch(_request(spec, 1, BASE, max_gpu_seconds=cap))
    assert capped.status == "ok" and capped.extra["stopped_early"] == "budget_cap"
    assert capped.gpu_seconds == pytest.approx(cap) and len(capped.step_values) < len(full.step_values)


# ---- the whole pipeline, one surface ------------------------------------------------------
@pytest.mark.slow  # ~12 CPU-s, 14-35 s of wall on the shared VM: helper's view of the grid, then two studies
def test_one_surface_end_to_end(capsys, tmp_path):
    from bench import search_surfaces

    log = tmp_path / "log.jsonl"
    search_surfaces.main(["--quick", "--launchers", "cold", "--budget-gpuh", "3", "--strategies", "random,model-only",
                          "--log", str(log)])
    table = capsys.readouterr().out
    assert "| 7b-h100x32 | cold | random | 1 |" in table and "model-only" in table
    import json

    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert 0 < record["runs"]["random"]["share"] <= 1.0 + 1e-9 and record["runs"]["random"]["counts"]["trials"] >= 3
    assert search_surfaces.summarize([record]).count("| 7b-h100x32 |") >= 2


def test_a_task_runs_its_strategies_with_blas_on_one_thread(monkeypatch):
    """--cpu-limit-s counts every thread's CPU time: BLAS threads spinning beside another run
    would time studies out, so a task holds BLAS to one thread while its strategies run."""
    from threadpoolctl import threadpool_info

    from bench import search_surfaces

    seen = []

    def fake_run(*args, **kwargs):
        seen.append(max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=1))
        return {"final": 1.0}

    monkeypatch.setattr(search_surfaces, "run_strategy", fake_run)
    task = {"truth": "7b-h100x32", "seed": 0, "launcher": "cold", "strategies": ["random", "model"],
            "budget_gpuh": 8.0, "cpu_limit_s": None}
    search_surfaces.run_task(task)
    assert seen == [1, 1]
