"""docker-compose.yml, tested by running what it describes (Docker does not run here).

The compose file's programs run directly: a private PostgreSQL server set up the way the
postgres image sets itself up from the compose environment (tests/pg.py: compose_pg), its
healthcheck, the schema service's command, the dashboard's command, and a coordinator with
the README's TUNER_STORAGE. The pins are checked against what the tests run, so the compose
file and the Python environment cannot drift apart.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml

from tests.pg import expand, free_port, pg_available, sleep_launcher
from tests.spine_helpers import fast_spec
from tuner.study import RunOptions, run_study

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ENV_EXAMPLE = dict(line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()
                   if line.strip() and not line.startswith("#"))

pytestmark = pytest.mark.slow  # the composed services as processes



def readme_storage_url() -> str:
    """The TUNER_STORAGE a user exports after `docker compose up -d` (.env.example's comment)."""
    [url] = re.findall(r"TUNER_STORAGE=(\S+)", (ROOT / ".env.example").read_text())
    return url


def on_this_host(url: str, server) -> str:
    """A compose URL (host `postgres` or `localhost`, port 5432) pointed at the private server."""
    return re.sub(r"@(postgres|localhost):5432/", f"@127.0.0.1:{server.port}/", url)


# ---------------------------------------------------------------------- the file itself

def test_services_are_pinned_healthy_and_ordered():
    pg, schema, dash = SERVICES["postgres"], SERVICES["schema"], SERVICES["dashboard"]
    assert re.fullmatch(r"postgres:\d+\.\d+", pg["image"]), "pin a full postgres tag"
    assert re.fullmatch(r"ghcr\.io/optuna/optuna-dashboard:v\d+\.\d+\.\d+", dash["image"])
    assert schema["image"] == dash["image"]                    # the schema is made by the dashboard's Optuna
    assert "tuner-pgdata" in COMPOSE["volumes"] and "tuner-pgdata:/var/lib/postgresql/data" in pg["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    for key in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
        assert pg["environment"][key].startswith(f"${{{key}:-")   # from the environment, with a default
    assert pg["ports"] == ["${POSTGRES_PORT:-5432}:5432"] and dash["ports"] == ["${DASHBOARD_PORT:-8080}:8080"]
    assert schema["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert dash["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert dash["depends_on"]["schema"]["condition"] == "service_completed_successfully"
    # the image's entry point passes --host/--port itself: the command is only the URL
    assert len(dash["command"]) == 1 and dash["command"] == schema["command"]


def test_env_example_matches_the_defaults_and_the_readme_url():
    defaults = {}
    for service in SERVICES.values():
        for value in [*service.get("environment", {}).values(), *service.get("ports", []),
                      *service.get("command", [])]:
            defaults.update(re.findall(r"\$\{(\w+):-([^}]*)\}", str(value)))
    assert {k: v for k, v in ENV_EXAMPLE.items()} == defaults
    url = sqlalchemy.engine.make_url(readme_storage_url())
    assert (url.username, url.password, url.database) == (defaults["POSTGRES_USER"], defaults["POSTGRES_PASSWORD"],
                                                         defaults["POSTGRES_DB"])
    assert (url.host, url.port) == ("localhost", int(defaults["POSTGRES_PORT"]))


def test_pins_match_what_the_tests_run():
    import optuna_dashboard
    tag = SERVICES["dashboard"]["image"].rsplit(":", 1)[1]
    assert tag == f"v{optuna_dashboard.__version__}", \
        "the image and the optuna-dashboard the tests run are the same release: bump both"
    # tuner's Optuna range is one major, the one installed here (and in the image: see the compose comment)
    pyproject = (ROOT / "pyproject.toml").read_text()
    [(low, high)] = re.findall(r'"optuna>=(\d+)[.\d]*,\s*<(\d+)"', pyproject)
    assert int(high) == int(low) + 1 and optuna.__version__.split(".")[0] == low


def test_postgres_major_matches_the_server_the_tests_use():
    if pg_available():
        pytest.skip(pg_available())
    import psycopg2

    from tests.pg import PG_HOST, PG_PORT, PG_USER
    conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=3)
    major = conn.server_version // 10000
    conn.close()
    pinned = int(SERVICES["postgres"]["image"].split(":")[1].split(".")[0])
    if pinned != major:
        pytest.skip(f"the local server is PostgreSQL {major}, the compose file pins {pinned}")
    assert pinned == major


# ------------------------------------------------------------------ the composed programs

def test_healthcheck_schema_dashboard_and_a_coordinator_as_composed(compose_pg, tmp_path):
    env = {**os.environ, **{k: expand(str(v), {}) for k, v in SERVICES["postgres"]["environment"].items()},
           "PGHOST": "127.0.0.1", "PGPORT": str(compose_pg.port)}
    # 1. the healthcheck, as the container's shell runs it ($$ is compose's escaped $)
    kind, script = SERVICES["postgres"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    health = subprocess.run(["sh", "-c", script.replace("$$", "$")], env=env, capture_output=True, text=True, timeout=30)
    assert health.returncode == 0 and "accepting connections" in health.stdout, health.stdout + health.stderr

    # 2. the schema service: its entry point with its command (the compose URL, here)
    schema = SERVICES["schema"]
    command = [on_this_host(expand(c, {}), compose_pg) for c in schema["command"]]
    entry = [sys.executable if schema["entrypoint"][0] == "python" else schema["entrypoint"][0], *schema["entrypoint"][1:]]
    done = subprocess.run([*entry, *command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "optuna schema ready" in done.stdout, done.stderr[-2000:]
    engine = sqlalchemy.create_engine(command[0], poolclass=sqlalchemy.pool.NullPool)
    assert {"studies", "trials", "version_info"} <= set(sqlalchemy.inspect(engine).get_table_names())
    engine.dispose()

    # 3. the dashboard: the image's entry point (optuna-dashboard --port --host) + the command
    port = free_port()
    dashboard_url = on_this_host(expand(SERVICES["dashboard"]["command"][0], {}), compose_pg)
    assert dashboard_url == command[0]
    dash = subprocess.Popen(["optuna-dashboard", "--port", str(port), "--host", "127.0.0.1", dashboard_url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        studies = _wait_for_studies(dash, port)
        assert studies == []                                   # up, on the empty schema

        # 4. a coordinator with the README's `export TUNER_STORAGE=...`
        storage = on_this_host(readme_storage_url(), compose_pg)
        spec = fast_spec(tmp_path)
        run_study(spec, RunOptions(storage_url=storage, budget_gpu_seconds=30.0, runs_dir=tmp_path),
                  launcher=sleep_launcher(spec, sleep_s=0))
        n = len(optuna.load_study(study_name="fast", storage=storage).trials)
        deadline = time.monotonic() + 15                        # the dashboard's list is cached ~2 s
        while time.monotonic() < deadline:
            studies = _wait_for_studies(dash, port)
            if studies:
                break
            time.sleep(0.5)
        assert [(s["study_name"], s["directions"]) for s in studies] == [("fast", ["maximize"])]
        detail = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}",
                                                  timeout=10))
        assert len(detail["trials"]) == n == 3
    finally:
        dash.terminate()
        dash.wait(timeout=10)


def _wait_for_studies(dash, port):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if dash.poll() is not None:
            pytest.fail(f"optuna-dashboard exited: {dash.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as response:
                return json.load(response)["study_summaries"]
        except OSError:
            time.sleep(0.3)
    pytest.fail("optuna-dashboard did not answer within 60 s")
