"""The chaos bench (bench/chaos.py): its invariant checks catch each breach, and a short seeded
run (3 coordinators, every kind of fault, a private PostgreSQL) ends with none."""

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from bench.chaos import FAULTS, check_invariants, main, schedule
from tests.pg import _bindir


def test_the_schedule_is_seeded_and_holds_every_fault():
    kw = dict(duration_s=600, kill_every_s=10, outages=2, outage_max_s=300, freezes=1, exhausts=1, spool_fulls=1,
              grace_s=24)
    assert schedule(3, **kw) == schedule(3, **kw) != schedule(4, **kw)
    faults = schedule(3, **kw)
    assert {f.kind for f in faults} == set(FAULTS)
    outages = sorted((f.at_s, f.at_s + f.length_s) for f in faults if f.kind == "outage")
    assert len(outages) == 2 and outages[0][1] <= outages[1][0] and all(b - a <= 300 for a, b in outages)


def test_each_invariant_breach_is_reported(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="chaos", storage=url, direction="maximize")
    dist = {"x": CategoricalDistribution([1, 2, 3])}

    def add(state, x, **attrs):
        study.add_trial(create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                                     params={"x": x}, distributions=dist, user_attrs=attrs))

    add(TrialState.COMPLETE, 1, status="ok", gpu_seconds=10.0)                      # 0: recorded...
    add(TrialState.COMPLETE, 1, status="ok", gpu_seconds=10.0, recovered_from=0)   # 1: ...and recovered: twice
    add(TrialState.FAIL, 2, gpu_seconds=5.0)                                        # 2: no status, no message
    add(TrialState.FAIL, 2, status="lost", message="m", retry_of=2, gpu_seconds=5.0)  # 3: a launched retry...
    add(TrialState.FAIL, 2, status="lost", message="m", retry_of=3)                 # 4: ...retried again
    add(TrialState.FAIL, 3, status="lost", message="m", retry_of=3)                 # 5: 3 retried twice
    add(TrialState.WAITING, 3)                                                      # 6: left waiting
    add(TrialState.COMPLETE, 3, status="ok", retry_of=3, recovered_from=5)         # 7: 5's copy, not a retry
    log = tmp_path / "log"
    log.mkdir()
    (log / "1.jsonl").write_text(json.dumps({"event": "received", "number": 0, "pid": 1, "status": "ok",
                                             "gpu_seconds": 10.0}) + "\n")
    spool = tmp_path / "runs" / "chaos" / "spool" / "host-1"
    spool.mkdir(parents=True)
    (spool / "trial-0009.json").write_text("{}")
    found = check_invariants(url, "chaos", 20.0, tmp_path / "runs", log)["violations"]
    assert "trial 6 left WAITING" in found
    assert any(v.startswith("spool file left") for v in found)
    assert any(v.startswith("trial 0's result recorded 2 times") for v in found)
    assert any(v.startswith("FAIL trial 2 without status/message") for v in found)
    assert "trial 3 retried 2 times" in found
    assert "trial 3, itself a retry that launched, was retried again" in found
    assert not any(v.startswith("spent") for v in found)          # 20 GPU-s charged (trial 0 is recovered: 0)
    over = check_invariants(url, "chaos", 5.0, tmp_path / "runs", log)["violations"]
    assert "spent 20 GPU-s of 5 (+ one trial: 10)" in over          # over by more than one trial


def test_a_result_lost_only_when_a_kill_met_a_full_spool_is_told_apart(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="chaos", storage=url, direction="maximize")
    dist = {"x": CategoricalDistribution([1, 2, 3])}
    for x in (1, 2, 3):   # trials 0-2: failed as stale by a peer, charged their last beat
        study.add_trial(create_trial(state=TrialState.FAIL, params={"x": x}, distributions=dist,
                                     user_attrs={"status": "lost", "message": "m", "gpu_seconds": 4.0}))
    log = tmp_path / "log"
    log.mkdir()

    def received(number, pid, spooled, t):
        return json.dumps({"event": "received", "number": number, "pid": pid, "status": "ok", "gpu_seconds": 9.0,
                           "spooled": spooled, "t": t}) + "\n"

    # 0: the full spool refused it (twice: a retry tries again), then its coordinator was killed;
    # 1: spooled, then killed (replay must have recorded it); 2: not spooled, never killed
    (log / "7.jsonl").write_text(received(0, 7, False, 100.0) + received(0, 7, False, 101.0) + received(1, 7, True, 90.0))
    (log / "8.jsonl").write_text(received(2, 8, False, 100.0))
    found = check_invariants(url, "chaos", 100.0, tmp_path / "runs", log, killed=[(7, 102.0), (8, 50.0)])
    assert found["killed_holding_an_unspooled_result"] == [0]
    assert sorted(v.split("'")[0] for v in found["violations"]) == ["trial 1", "trial 2"]   # one line each


@pytest.mark.slow
@pytest.mark.postgres
def test_a_short_seeded_chaos_run_breaks_no_invariant(tmp_path):
    if _bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb) for the bench's own server")
    out = tmp_path / "chaos.json"
    # 3 coordinators for 25 s: kills every 6 s on average, one outage, one freeze past the
    # grace period, one connection-exhaustion and one full-spool window
    code = main(["--coordinators", "3", "--duration-s", "25", "--seeds", "1", "--kill-every-s", "6",
                 "--outages", "1", "--outage-max-s", "8", "--grace-s", "8", "--window-s", "8", "--wall-s", "1.5",
                 "--budget-fill", "0.3", "--drain-s", "240", "--json", str(out)])
    [result] = json.loads(out.read_text())
    assert result["violations"] == [] and code == 0
    assert result["received"] >= 1 and not result["hung"]
    for kind in ("outage", "freeze", "exhaust"):
        assert result["faults"].get(kind) == 1, result["faults"]
