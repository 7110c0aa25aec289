"""The ask -> admit -> launch -> tell loop, with an in-process launcher (no processes).

The coordinator's contract suite: every test that takes ``storage_url`` runs on SQLite and
on PostgreSQL (tests/conftest.py), as Optuna's StorageTestCase runs over its backends.
"""

import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.spine_helpers import fast_spec
from tuner.launch import Launcher, TrialResult
from tuner.search import suggest_params
from tuner.spec import complete_params
from tuner.stats import analyze_record, study_record
from tuner.storage import open_storage, trial_id
from tuner.study import MAX_MOVES, RunOptions, adaptive_bar, enqueue_lost_retries, open_study, run_study


class FakeLauncher(Launcher):
    """10 GPU-seconds a trial; throughput 1000 x micro_batch (+50 packed); Tree fails; mb 4 OOMs."""

    name = "fake"

    def __init__(self, spec, interrupt_at=None):
        super().__init__(spec)
        self.calls, self.interrupt_at = [], interrupt_at

    def launch(self, request):
        self.calls.append(request)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        p = request.params
        common = dict(launcher="fake", world_size=2, gpu_seconds=10.0, wall_seconds=5.0)
        if p["nccl_algo"] == "Tree":
            return TrialResult(status="error", message="no algorithm/protocol available", **common)
        if p["micro_batch"] == 4:
            return TrialResult(status="oom", message="out of memory", **common)
        tps = 1000.0 * p["micro_batch"] + (50.0 if p["padding"] == "packed" else 0.0)
        return TrialResult(status="ok", step_values=tuple((s, tps + (s % 2)) for s in range(1, 5)), **common)


def options(storage_url, tmp_path, **kw):
    return RunOptions(storage_url=storage_url, runs_dir=tmp_path / "runs", **kw)


def load(storage_url, name="fast"):
    return optuna.load_study(study_name=name, storage=storage_url)


def test_study_record_budget_and_baseline(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    summary = run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=95.0), launcher=FakeLauncher(spec))
    study = load(storage_url)
    # configs screened out before launch (tuner.search: here micro_batch 4 after its OOM) and a
    # sampler's exact repeats (tuner.search) are never launched: PRUNED `pruned` / `repeat` at 0 GPU-s
    trials = [t for t in study.get_trials() if t.user_attrs.get("status") not in ("pruned", "repeat")]
    assert trials[0].user_attrs["role"] == "baseline"
    assert trials[0].params == {"micro_batch": 1, "padding": "max_length", "nccl_algo": "default"}
    assert summary.stopped == "budget" and summary.launched == 9       # 9 x 10 <= 95 < 10 x 10
    assert summary.used_gpu_seconds <= 95.0
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len({repr(sorted(t.params.items())) for t in trials}) == len(trials)   # no config ran twice
    for t in trials:
        status = t.user_attrs["status"]
        assert t.user_attrs["gpu_seconds"] == 10.0 and t.user_attrs["reserved_gpu_seconds"] > 0
        if status == "ok":
            assert t.system_attrs["constraints:failed"] == 0.0
            assert sorted(t.intermediate_values) == [1, 2, 3, 4]
            assert t.value == pytest.approx(sum(t.intermediate_values.values()) / 4)
        else:
            assert t.value == 0.0 and t.system_attrs["constraints:failed"] == 1.0
    assert study.best_trial.user_attrs["status"] == "ok"
    attrs = study.user_attrs
    assert attrs["budget_limit_gpu_seconds"] == 95.0 and attrs["spec"]["model"]["preset"] == "tiny"
    assert attrs["simulated"] is False


def test_a_plain_admission_takes_the_lock_only_to_reserve(tmp_path, storage_url, monkeypatch):
    """Every coordinator of a study waits while one holds the admission lock: with no trial gone
    stale and no retry owed, an admission takes it once, to reserve its trial's cap."""
    import contextlib

    import tuner.study._admission as admission

    real, taken = admission.admission_lock, []

    @contextlib.contextmanager
    def counted(storage, name):
        with real(storage, name) as held:
            taken.append(name)
            yield held

    monkeypatch.setattr(admission, "admission_lock", counted)
    spec = fast_spec(tmp_path)
    summary = run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=95.0, ablation=False),
                        launcher=FakeLauncher(spec))
    assert summary.launched == 9 and len(taken) == 9


def test_ctrl_c_then_resume(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=60.0), launcher=FakeLauncher(spec, interrupt_at=2))
    study = load(storage_url)
    interrupted = [t for t in study.trials if t.state == TrialState.FAIL and t.user_attrs.get("status") != "pruned"]
    assert len(interrupted) == 1 and interrupted[0].user_attrs["gpu_seconds"] >= 0
    waiting = [t for t in study.trials if t.state == TrialState.WAITING]
    assert len(waiting) == 1 and waiting[0].user_attrs["retry_of"] == interrupted[0].number
    launcher = FakeLauncher(spec)
    run_study(spec, options(storage_url, tmp_path), launcher=launcher)                # the same command again
    assert launcher.calls[0].params["micro_batch"] == interrupted[0].params["micro_batch"]
    study = load(storage_url)
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_ctrl_c_while_a_trial_is_admitted_strands_nothing_and_says_how_to_resume(tmp_path, storage_url,
                                                                                  monkeypatch):
    import os
    import signal

    import tuner.study._coordinator as coordinator

    real, calls = coordinator.admit, []

    def admit_then_ctrl_c(*args, **kwargs):   # the user's Ctrl-C lands while the sampler works
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(coordinator, "admit", admit_then_ctrl_c)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a terminal (xdist ignores it)
    spec, events = fast_spec(tmp_path), []
    launcher = FakeLauncher(spec)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=60.0), on_event=events.append,
                      launcher=launcher)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler    # the handler is back
    finally:
        signal.signal(signal.SIGINT, handler)
    assert len(launcher.calls) == 1                                   # the second trial never launched
    study = load(storage_url)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    (cut,) = [t for t in study.trials if t.user_attrs.get("status") == "interrupted"]
    assert cut.user_attrs["gpu_seconds"] == 0.0 and "before its launch" in cut.user_attrs["message"]
    (again,) = [t for t in study.trials if t.state == TrialState.WAITING]
    assert again.user_attrs["retry_of"] == cut.number and again.system_attrs["fixed_params"] == cut.params
    assert events[-1].kind == "stop" and "run the same command again" in events[-1].message


def test_dead_coordinators_trial_goes_stale_counts_and_is_retried_once(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=storage_url, budget_gpu_seconds=100.0)
    dead = study.ask()                                    # the baseline, as a dead coordinator left it
    params = suggest_params(dead, spec)
    dead.set_user_attr("reserved_gpu_seconds", 30.0)
    storage = open_storage(storage_url)
    storage.record_heartbeat(trial_id(dead))
    time.sleep(2.5)
    launcher = FakeLauncher(spec)
    summary = run_study(spec, options(storage_url, tmp_path, grace_period_s=1), launcher=launcher)
    study = load(storage_url)
    assert study.trials[0].state == TrialState.FAIL
    assert launcher.calls[0].params == complete_params(params, spec)   # every knob, defaults filled
    assert launcher.calls[0].params["activation_checkpointing"] is False and launcher.calls[0].params["nccl_proto"] == "default"
    retry = study.trials[1]
    assert retry.user_attrs["retry_of"] == 0 and retry.user_attrs["role"] == "baseline"
    # the dead trial's reservation counts: 30 + 7 x 10 = 100
    assert summary.used_gpu_seconds == pytest.approx(100.0) and summary.launched == 7


def test_a_trial_running_elsewhere_is_waited_out_and_the_study_ends_with_none_in_flight(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=storage_url, budget_gpu_seconds=40.0)
    dead = study.ask()                           # a coordinator killed -9 a moment ago
    suggest_params(dead, spec)
    dead.set_user_attr("reserved_gpu_seconds", 35.0)  # 5 left: nothing fits until it ends
    open_storage(storage_url).record_heartbeat(trial_id(dead))
    events = []
    summary = run_study(spec, options(storage_url, tmp_path, grace_period_s=5), on_event=events.append,
                        launcher=FakeLauncher(spec))
    # it found the trial fresh and waited (the server's clock judges staleness: a client's
    # stopwatch under load is no measure of it, so none is asserted here)
    assert any("running elsewhere" in e.message for e in events if e.kind == "note")
    study = load(storage_url)
    lost = study.trials[0]                       # FAIL with a reason a reader of the dashboard can tell apart
    assert lost.state == TrialState.FAIL and lost.user_attrs["status"] == "lost"
    assert "its coordinator stopped beating for over 5 s" in lost.user_attrs["message"]
    retry = study.trials[1]                      # its retry: no budget left to run it
    assert retry.user_attrs["retry_of"] == 0 and retry.state == TrialState.PRUNED
    assert retry.user_attrs["status"] == "skipped" and retry.user_attrs["gpu_seconds"] == 0.0
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert summary.launched == 0 and summary.statuses == {"lost": 1, "skipped": 1}
    assert summary.used_gpu_seconds == pytest.approx(35.0)   # the dead trial's reservation


def test_ablation_runs_the_budget_cannot_pay_for_end_skipped_and_out_of_the_statistics(tmp_path, storage_url):
    spec = fast_spec(tmp_path, ablation_share=0.1)
    summary = run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=100.0), launcher=FakeLauncher(spec))
    study = load(storage_url)
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    ablation = [t for t in study.trials if t.user_attrs.get("role") == "ablation"]
    skipped = [t for t in ablation if t.state == TrialState.PRUNED]
    assert skipped and len(skipped) < len(ablation)       # 10 GPU-s paid for one run, not all
    for t in skipped:
        assert t.user_attrs["status"] == "skipped" and t.user_attrs["gpu_seconds"] == 0.0
        assert "budget was spent" in t.user_attrs["message"]
    assert summary.statuses["skipped"] == len(skipped)
    analysis = analyze_record(study_record(study), n_boot=0)
    assert analysis["n_skipped"] == len(skipped)
    repeats = [t for t in study.trials if t.user_attrs.get("status") == "repeat"]   # never launched
    assert analysis["n_trials"] == len(study.trials) - len(skipped) - len(repeats)
    assert not {t.number for t in skipped} & {t["trial"] for t in analysis["trials"]}


def test_ablation_after_search(tmp_path, storage_url):
    spec = fast_spec(tmp_path, ablation_share=0.3)
    run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=200.0), launcher=FakeLauncher(spec))
    study = load(storage_url)
    ablation = [t for t in study.trials if t.user_attrs.get("role") == "ablation"]
    search = [t for t in study.trials if t.user_attrs.get("role") != "ablation"]
    best = max((t for t in search if t.user_attrs["status"] == "ok"), key=lambda t: t.value)
    assert ablation[0].params == best.params and "ablation_knob" not in ablation[0].user_attrs
    base = study.trials[0].params
    # the baseline is re-measured right after the best (run-to-run variation, tuner.study)
    assert ablation[1].params == base and ablation[1].user_attrs["remeasure"] == "baseline"
    reverts = [t for t in ablation if "ablation_knob" in t.user_attrs and not t.user_attrs.get("ablation_move")]
    for t in reverts:
        knob = t.user_attrs["ablation_knob"]
        assert t.params[knob] == base[knob]
        assert {k: v for k, v in t.params.items() if k != knob} == {k: v for k, v in best.params.items() if k != knob}
    assert {t.user_attrs["ablation_knob"] for t in reverts} == {k for k in base if base[k] != best.params[k]}
    # a knob the best keeps at the baseline's level is moved to another level (tuner.study.plan_moves)
    moves = [t for t in ablation if t.user_attrs.get("ablation_move")]
    assert len(moves) <= MAX_MOVES
    searched = [t.params for t in search]
    for t in moves:
        assert t.params not in searched   # a neighbour the search ran needs no move
        knob = t.user_attrs["ablation_knob"]
        assert best.params[knob] == base[knob] != t.params[knob]
        assert {k: v for k, v in t.params.items() if k != knob} == {k: v for k, v in best.params.items() if k != knob}


def test_reverts_stop_once_clearly_worse_and_references_measure_until_precise(tmp_path, storage_url):
    spec = fast_spec(tmp_path, ablation_share=0.3)
    launcher = FakeLauncher(spec)
    run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=200.0), launcher=launcher)
    attrs = {t.number: t.user_attrs for t in load(storage_url).trials}
    bars = {}
    for request in launcher.calls:
        a = attrs[request.number]
        kind = ("revert" if "ablation_knob" in a else a.get("remeasure")) if a.get("role") == "ablation" else a.get(
            "role", "search")
        bars.setdefault(kind, set()).add(request.stop_below_tokens_per_sec_per_gpu is not None)
    # the first search trial has no best to compare with; every later one has a bar
    assert bars["baseline"] == {False} and bars["best"] == {False} and bars["revert"] == {True}
    assert True in bars["search"]


def test_a_reverts_bar_is_the_rounds_best_re_measurement_not_the_searchs_luckiest_trial(tmp_path):
    spec = fast_spec(tmp_path)
    study = optuna.create_study(direction="maximize")

    def add(values, **attrs):
        study.add_trial(optuna.trial.create_trial(
            params={}, distributions={}, value=sum(values) / len(values),
            intermediate_values=dict(enumerate(values)), user_attrs={"status": "ok", **attrs}))
    add([2000.0, 2010.0, 1990.0, 2000.0])                                        # a lucky search run
    add([1000.0, 1010.0, 990.0, 1000.0], role="ablation", remeasure="best", ablation_round=1)
    search_bar = adaptive_bar(study, spec)
    revert_bar = adaptive_bar(study, spec, run={"role": "ablation", "ablation_knob": "micro_batch",
                                                "ablation_round": 1})
    assert 1900 < search_bar < 2000 and 900 < revert_bar < 1000
    # the next round's reverts wait for that round's re-measurement of the best
    assert adaptive_bar(study, spec, run={"role": "ablation", "ablation_knob": "micro_batch",
                                          "ablation_round": 2}) is None


class BaselineFailsLauncher(FakeLauncher):
    """FakeLauncher where the spec's baseline config (micro_batch 1, max_length, default) crashes."""

    def launch(self, request):
        p = request.params
        if p["micro_batch"] == 1 and p["padding"] == "max_length" and p["nccl_algo"] == "default":
            self.calls.append(request)
            return TrialResult(status="error", message="worker exited with code 1", launcher="fake", world_size=2,
                               gpu_seconds=10.0, wall_seconds=5.0)
        return super().launch(request)


def test_a_failed_baseline_still_gets_the_best_re_measured(tmp_path, storage_url):
    """No baseline to revert to: the ablation re-measures the best and the candidates (and its
    runoff some of them again: tuner.stats), nothing else, and the recommendation is chosen on
    those re-measurements."""
    spec = fast_spec(tmp_path, ablation_share=0.3)
    run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=200.0), launcher=BaselineFailsLauncher(spec))
    study = load(storage_url)
    assert study.trials[0].user_attrs["role"] == "baseline" and study.trials[0].user_attrs["status"] == "error"
    ablation = [t for t in study.trials if t.user_attrs.get("role") == "ablation"]
    assert ablation, "the ablation round was skipped"
    assert {t.user_attrs.get("remeasure") for t in ablation} <= {"best", "candidate", "runoff"}
    assert not any("ablation_knob" in t.user_attrs for t in ablation)
    search = [t for t in study.trials if t.user_attrs.get("role") != "ablation" and t.user_attrs["status"] == "ok"]
    assert ablation[0].params in [t.params for t in search] and ablation[0].user_attrs["remeasure"] == "best"
    best = analyze_record(study_record(study), n_boot=0)["best"]
    assert best["winners_curse_adjusted"] and best["chosen_on"] in ("re-measurements", "runoff re-measurements")


def test_a_sampler_that_proposes_only_screened_configs_ends_the_search_not_the_ablation(tmp_path, storage_url,
                                                                                        monkeypatch):
    """After its first few trials every proposal is screened out: the search is over, and the
    ablation round still re-measures what it found (it used to end the study there, the
    ablation's share unspent and nothing re-measured; seen on the 13B x 8 H100 sim)."""
    import tuner.study._admission as admission
    from tuner.search import Verdict

    spec = fast_spec(tmp_path, ablation_share=0.3)
    launcher = FakeLauncher(spec)
    monkeypatch.setattr(admission, "MAX_PRUNED_IN_A_ROW", 5)
    monkeypatch.setattr(admission, "screen", lambda study, spec, params, launcher=None, trials=None: (
        Verdict(rule="memory", reason="screened for the test") if len(launcher.calls) >= 4 else None))
    summary = run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=400.0), launcher=launcher)
    study = load(storage_url)
    assert study.user_attrs["search_exhausted"] and "screened out" in study.user_attrs["search_exhausted_reason"]
    ablation = [t for t in study.trials if t.user_attrs.get("role") == "ablation"]
    assert ablation and all(t.state == TrialState.COMPLETE for t in ablation), "the ablation round was skipped"
    assert len(launcher.calls) == 4 + len(ablation)
    assert summary.stopped == "search exhausted"


class FlakyInfraLauncher(FakeLauncher):
    """The first trial loses its node: not the config's fault."""

    def launch(self, request):
        result = super().launch(request)
        if len(self.calls) == 1:
            return TrialResult(status="error", message="slurm: NODE_FAIL", launcher="fake", world_size=2,
                               gpu_seconds=4.0, wall_seconds=2.0, extra={"slurm_failure": True})
        return result


def test_infrastructure_failure_is_fail_charged_and_retried_not_a_constraint(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    launcher = FlakyInfraLauncher(spec)
    run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=24.0), launcher=launcher)
    study = load(storage_url)
    first, retry = study.trials[0], study.trials[1]
    assert first.state == TrialState.FAIL and first.user_attrs["gpu_seconds"] == 4.0
    assert "constraints:failed" not in first.system_attrs
    assert retry.user_attrs["retry_of"] == 0 and retry.params == first.params
    assert retry.user_attrs["role"] == "baseline" and retry.user_attrs["status"] == "ok"


def test_a_retry_lost_between_the_fail_and_its_enqueue_is_queued_by_the_next_admission(tmp_path, storage_url):
    """Optuna runs the stale-trial callback after committing the FAIL: a storage error (or a
    death) between the two used to lose the retry for good."""
    spec = fast_spec(tmp_path)
    study, _ = open_study(spec, storage_url=storage_url, budget_gpu_seconds=40.0)
    cut = study.ask()                                     # the baseline, failed with no retry queued
    suggest_params(cut, spec)
    study.tell(cut, state=TrialState.FAIL)
    run_study(spec, options(storage_url, tmp_path), launcher=FakeLauncher(spec))
    trials = load(storage_url).trials
    retries = [t for t in trials if t.user_attrs.get("retry_of") == 0]
    assert len(retries) == 1 and retries[0].params == cut.params and retries[0].state == TrialState.COMPLETE
    assert retries[0].user_attrs["role"] == "baseline"
    assert enqueue_lost_retries(load(storage_url), trials) == []          # once


class BrokenLauncher(FakeLauncher):
    def launch(self, request):
        raise RuntimeError("sbatch refused: invalid account")


def test_a_broken_launcher_leaves_no_running_trial(tmp_path, storage_url):
    spec = fast_spec(tmp_path)
    with pytest.raises(RuntimeError, match="sbatch refused"):
        run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=50.0), launcher=BrokenLauncher(spec))
    study = load(storage_url)
    assert study.trials[0].state == TrialState.FAIL
    assert "sbatch refused" in study.trials[0].user_attrs["message"]
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]


class BlasThreadsLauncher(FakeLauncher):
    """Records how many BLAS threads the coordinator's process allows while a trial runs."""

    def launch(self, request):
        from threadpoolctl import threadpool_info

        self.blas = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        return super().launch(request)


def test_the_coordinator_runs_on_one_blas_thread_and_gives_the_rest_back(tmp_path):
    from threadpoolctl import threadpool_info, threadpool_limits

    spec = fast_spec(tmp_path)
    launcher = BlasThreadsLauncher(spec)
    with threadpool_limits(limits=2, user_api="blas"):  # as NumPy starts on a 2-core machine
        run_study(spec, options(f"sqlite:///{tmp_path}/t.db", tmp_path, budget_gpu_seconds=20.0), launcher=launcher)
        after = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    assert launcher.blas == {1} and after == {2}


def test_a_trial_another_coordinator_ends_before_its_reservation_is_passed_over(tmp_path, storage_url, monkeypatch):
    """Between this coordinator's ask and its reservation another one ends the trial (found it
    stale, or skipped a queued run it popped): the reservation's write refuses, and the
    coordinator asks again instead of dying."""
    import tuner.study._admission as admission

    screen, ended = admission.screen, []

    def screen_then_end_it_elsewhere(study, *args, **kw):
        if not ended:
            mine = max(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)), key=lambda t: t.number)
            other = optuna.load_study(study_name=study.study_name, storage=storage_url)   # another process's view
            other._storage.set_trial_user_attr(trial_id(mine), "status", "lost")
            other._storage.set_trial_state_values(trial_id(mine), TrialState.FAIL)
            ended.append(mine.number)
        return screen(study, *args, **kw)

    monkeypatch.setattr(admission, "screen", screen_then_end_it_elsewhere)
    spec = fast_spec(tmp_path)
    summary = run_study(spec, options(storage_url, tmp_path, budget_gpu_seconds=45.0), launcher=FakeLauncher(spec))
    trials = load(storage_url).get_trials()
    assert ended and trials[ended[0]].state == TrialState.FAIL and "reserved_gpu_seconds" not in trials[ended[0]].user_attrs
    assert summary.launched >= 3 and not [t for t in trials if t.state == TrialState.RUNNING]
