"""A running trial's heartbeat: failures are counted and said; a trial whose heartbeat cannot be
recorded, or that a peer already failed as stale, is stopped by its own coordinator."""

import time

import optuna
import pytest
import sqlalchemy.exc
from optuna.trial import TrialState

from tests.spine_helpers import fast_spec
from tuner.launch import Launcher, TrialResult
from tuner.storage._optuna_internals import HeartbeatRDBStorage
from tuner.study import RunOptions, run_study
from tuner.study._heartbeat import Heartbeat, HeartbeatLost


class Storage:
    """Beats land until ``fail`` is set; then each raises it."""

    def __init__(self):
        self.beats, self.fail = 0, None

    def record_heartbeat(self, trial_id):
        if self.fail is not None:
            raise self.fail
        self.beats += 1

    def set_trial_user_attr(self, trial_id, key, value):
        if isinstance(self.fail, optuna.exceptions.UpdateFinishedTrialError):
            raise self.fail


def run_for(seconds, storage=None, then_fail=None):
    """Launch-like: poll for ``seconds``; the storage starts failing after the first beat."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if storage is not None and storage.beats >= 1 and then_fail is not None:
            storage.fail = then_fail
        time.sleep(0.02)
    return "finished"


def test_a_heartbeat_that_cannot_be_recorded_stops_its_trial_before_a_peer_would():
    storage, notes = Storage(), []
    beat = Heartbeat(storage, 7, 0.1, gpus=2, grace_period_s=1.0, note=notes.append)
    with pytest.raises(HeartbeatLost):
        with beat:  # the job would run 30 s; peers count it dead after 1 s without a beat
            run_for(30, storage, sqlalchemy.exc.OperationalError("SELECT", {}, Exception("connection refused")))
    assert beat.failures >= 1 and not beat.lost.failed_elsewhere
    assert "no heartbeat recorded for" in str(beat.lost)
    assert any("heartbeat of trial id 7 failed" in n and "connection refused" in n for n in notes)
    assert any(n.startswith("stopping trial id 7") for n in notes)


def test_a_trial_a_peer_failed_as_stale_is_stopped_at_the_next_beat():
    storage = Storage()
    beat = Heartbeat(storage, 3, 0.1, gpus=2, grace_period_s=60.0)
    with pytest.raises(HeartbeatLost):
        with beat:
            run_for(30, storage, optuna.exceptions.UpdateFinishedTrialError("finished"))
    assert beat.lost.failed_elsewhere


def test_a_trial_a_peer_failed_before_its_first_beat_never_launches():
    # an outage past the grace period between the admission and the launch: a peer failed the
    # trial as stale meanwhile, and the first beat finds it finished (it crashed the coordinator)
    storage = Storage()
    storage.fail = optuna.exceptions.UpdateFinishedTrialError("Trial#3 has already finished")
    beat = Heartbeat(storage, 3, 0.1, gpus=2, grace_period_s=60.0)
    launched = []
    with pytest.raises(HeartbeatLost, match="before it launched"):
        with beat:
            launched.append(1)
    assert launched == [] and beat.lost.failed_elsewhere and not beat.started


def test_a_healthy_heartbeat_never_interrupts():
    storage = Storage()
    with Heartbeat(storage, 1, 0.05, gpus=2, grace_period_s=0.5) as beat:
        assert run_for(0.6) == "finished"
    assert beat.failures == 0 and beat.lost is None and storage.beats >= 2


class LosesItsStorage(Launcher):
    """The first trial runs while its heartbeat cannot reach the storage (an outage past half
    the grace period); the others take no time."""

    name = "fake"

    def __init__(self, spec, monkeypatch):
        super().__init__(spec)
        self.calls, self.monkeypatch = 0, monkeypatch

    def launch(self, request):
        self.calls += 1
        if self.calls == 1:
            def down(self, trial_id, **_):
                raise sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("server closed the connection"))
            for write in ("record_heartbeat", "record"):   # a beat writes through either
                self.monkeypatch.setattr(HeartbeatRDBStorage, write, down)
            try:
                run_for(60)
            finally:
                self.monkeypatch.undo()
        return TrialResult(status="ok", launcher="fake", world_size=2, gpu_seconds=10.0, wall_seconds=5.0,
                           step_values=tuple((s, 100.0 + s) for s in range(4)))


def test_the_coordinator_fails_a_trial_it_could_not_beat_for_with_a_reason_and_retries_it(tmp_path, monkeypatch):
    spec = fast_spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    events = []
    run_study(spec, RunOptions(storage_url=url, runs_dir=tmp_path / "runs", budget_gpu_seconds=25.0,
                               grace_period_s=2, preflight=False),
              on_event=events.append, launcher=LosesItsStorage(spec, monkeypatch))
    trials = optuna.load_study(study_name="fast", storage=url).trials
    stopped = trials[0]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["status"] == "interrupted"
    assert stopped.user_attrs["message"].startswith("stopped by its coordinator: no heartbeat recorded for")
    assert stopped.user_attrs["heartbeat_failures"] >= 1 and stopped.user_attrs["gpu_seconds"] > 0
    assert trials[1].user_attrs["retry_of"] == 0 and trials[1].user_attrs["status"] == "ok"
    assert any("trial 0 stopped" in e.message for e in events if e.kind == "note")
