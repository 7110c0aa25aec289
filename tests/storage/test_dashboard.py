"""Real clients read a tuner study on PostgreSQL: optuna-dashboard's HTTP API and Optuna's CLI."""

import dataclasses
import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from tests.pg import free_port, sleep_launcher, wait_until
from tests.spine_helpers import fast_spec
from tuner.study import RunOptions, run_study

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # starts optuna-dashboard


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


class Dashboard:
    """`optuna-dashboard URL --host 127.0.0.1 --port P`, as a user starts it."""

    def __init__(self, storage_url: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(["optuna-dashboard", storage_url, "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def __enter__(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"optuna-dashboard exited: {self.proc.stderr.read()[-2000:]}")
            try:
                get_json(f"{self.base}/api/studies")
                return self
            except OSError:
                time.sleep(0.3)
        pytest.fail("optuna-dashboard did not answer within 60 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def study(self, name: str) -> dict:
        [entry] = [s for s in get_json(f"{self.base}/api/studies")["study_summaries"] if s["study_name"] == name]
        return get_json(f"{self.base}/api/studies/{entry['study_id']}")


def optuna_cli(*args) -> subprocess.Popen:
    optuna_bin = Path(sys.executable).with_name("optuna")
    command = [str(optuna_bin)] if optuna_bin.exists() else [sys.executable, "-m", "optuna.cli"]
    return subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def output_json(proc: subprocess.Popen):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out)


def test_dashboard_and_optuna_cli_read_the_study_while_a_coordinator_writes(pg_url, tmp_path):
    spec = fast_spec(tmp_path)
    options = RunOptions(storage_url=pg_url, budget_gpu_seconds=60.0, runs_dir=tmp_path)
    run_study(spec, dataclasses.replace(options, budget_gpu_seconds=20.0), launcher=sleep_launcher(spec, sleep_s=0))
    # Optuna's own CLI, started beside the dashboard (each costs seconds of imports)
    clis = {"studies": optuna_cli("studies", "--storage", pg_url, "-f", "json"),
            "trials": optuna_cli("trials", "--study-name", "fast", "--storage", pg_url, "-f", "json"),
            "best": optuna_cli("best-trial", "--study-name", "fast", "--storage", pg_url, "-f", "json")}
    with Dashboard(pg_url) as dash:
        first = dash.study("fast")
        assert len(first["trials"]) == 2
        studies, cli_trials, best = (output_json(clis[k]) for k in ("studies", "trials", "best"))
        study = optuna.load_study(study_name="fast", storage=pg_url)
        assert [s["name"] for s in studies] == ["fast"] and studies[0]["n_trials"] == 2
        assert sorted(t["number"] for t in cli_trials) == [0, 1]
        assert best["number"] == study.best_trial.number and best["value"] == study.best_value

        # a coordinator goes on while the dashboard serves: it sees the new trials
        writer = threading.Thread(target=run_study, args=(spec, options),
                                  kwargs={"launcher": sleep_launcher(spec, sleep_s=0.1)})
        writer.start()
        writer.join(timeout=120)
        trials = study.get_trials()
        assert len(trials) > 2
        # the dashboard re-reads a study's trials after a short TTL (2 s under 100 trials)
        assert wait_until(lambda: len(dash.study("fast")["trials"]) == len(trials), timeout_s=15)
        detail = dash.study("fast")
    by_number = {t["number"]: t for t in detail["trials"]}
    for t in trials:
        shown = by_number[t.number]
        attrs = {a["key"]: a["value"] for a in shown["user_attrs"]}
        if t.state.name == "PRUNED":  # never launched (an exact repeat, a skipped or pruned run): not a Fail
            assert shown["state"] == "Pruned" and attrs["status"] == t.user_attrs["status"] and attrs["gpu_seconds"] == "0.0"
            continue
        assert shown["state"] == "Complete" and shown["values"] == [t.value]
        assert attrs["status"] == "ok" and float(attrs["gpu_seconds"]) == t.user_attrs["gpu_seconds"]
        assert {p["name"]: p["param_external_value"] for p in shown["params"]} == {k: str(v) for k, v in t.params.items()}
        assert {int(v["step"]): v["value"] for v in shown["intermediate_values"]} == t.intermediate_values
    assert by_number[0]["user_attrs"][0] == {"key": "role", "value": "baseline"}
    assert [t["number"] for t in detail["best_trials"]] == [study.best_trial.number]
    study_attrs = {a["key"] for a in detail["user_attrs"]}
    assert {"spec", "spec_fingerprint", "budget_limit_gpu_seconds"} <= study_attrs
