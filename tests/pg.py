"""PostgreSQL fixtures: the real server, never a mock.

* ``pg_url``: a fresh database (``tuner_test_<random>``) on the local server, dropped after
  the test. Override the server with TUNER_TEST_PG_HOST / _PORT / _USER.
* ``compose_pg``: a private, throwaway PostgreSQL server (initdb in a temporary folder, its
  own port) set up the way docker-compose.yml's ``postgres`` service sets up its own: the
  superuser, password and database from the compose environment, scram-sha-256 password
  auth on TCP (the local server trusts every password, so a wrong one cannot be tested
  there), the compose file's server options. Tests that restart the server use it, so
  other people's tests on the shared server never see a restart.
* ``private_db_url``: a fresh database on that private server.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.local_services import free_port
from bench.local_services import postgres_bindir as _bindir

ROOT = Path(__file__).resolve().parents[1]
PG_HOST = os.environ.get("TUNER_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("TUNER_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("TUNER_TEST_PG_USER", "postgres")


# ------------------------------------------------------------------ the local server

def _connect(host: str, port: int, user: str, dbname: str = "postgres", password: str | None = None):
    import psycopg2
    conn = psycopg2.connect(host=host, port=port, user=user, password=password, dbname=dbname,
                            connect_timeout=3)
    conn.autocommit = True  # CREATE / DROP DATABASE cannot run in a transaction
    return conn


def pg_available() -> str | None:
    """None when the local server answers, else why not (the skip reason)."""
    try:
        _connect(PG_HOST, PG_PORT, PG_USER).close()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"no PostgreSQL at {PG_HOST}:{PG_PORT} ({str(exc).strip().splitlines()[0]})"


def create_database(host: str, port: int, user: str, password: str | None = None) -> str:
    name = f"tuner_test_{uuid.uuid4().hex[:10]}"
    conn = _connect(host, port, user, password=password)
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return name


def drop_database(host: str, port: int, user: str, name: str, password: str | None = None) -> None:
    with contextlib.suppress(Exception):  # a stopped private server takes its databases along
        conn = _connect(host, port, user, password=password)
        with conn.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.close()




# ------------------------------------------------------------- a private server

def compose_postgres() -> tuple[dict[str, str], list[str]]:
    """docker-compose.yml's postgres service: its environment defaults and server options."""
    import yaml
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["postgres"]
    env = {k: expand(str(v), {}) for k, v in service["environment"].items()}
    command = [expand(str(c), {}) for c in service.get("command", [])]
    return env, command[1:] if command[:1] == ["postgres"] else command


def expand(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR:-default} and ${VAR} interpolation ($$ is a literal $)."""
    value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1)) or m.group(2), value)
    value = re.sub(r"(?<!\$)\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), value)
    return value.replace("$$", "$")


@dataclass
class PrivateServer:
    """A PostgreSQL server of the tests' own; ``restart()`` disturbs nobody else."""

    bindir: Path
    datadir: Path
    port: int
    user: str
    password: str
    db: str
    options: str = ""
    """The server options it was started with (``start()`` uses them again)."""

    def url(self, db: str | None = None, *, password: str | None = None) -> str:
        return (f"postgresql+psycopg2://{self.user}:{self.password if password is None else password}"
                f"@127.0.0.1:{self.port}/{db or self.db}")

    def _ctl(self, *args: str, timeout: float = 60) -> None:
        log = self.datadir.parent / "server.log"
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(log),
                                     "-w", *args]), check=True, timeout=timeout, capture_output=True)

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._ctl("stop", "-m", "immediate")

    def pause(self) -> None:
        """Stop the server (an outage: clients get "connection refused") until ``start()``."""
        self._ctl("stop", "-m", "fast")

    def start(self) -> None:
        self._ctl("start", "-o", self.options)


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start_private_server(*, user: str, password: str, db: str, options: list[str]) -> PrivateServer:
    """initdb + start, like the postgres image's entry point: superuser `user` with `password`,
    database `db`, password (scram-sha-256) auth for TCP clients."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb) to start a private server")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start a private PostgreSQL server")
    base = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    datadir = base / "data"
    pwfile = base / "pw"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(datadir), "-U", user, f"--pwfile={pwfile}",
                                 "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"]),
                   check=True, timeout=120, capture_output=True)
    port = free_port()
    # the compose file's own server options, then what a throwaway test server needs
    opts = " ".join([*options, "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                     "-c", f"unix_socket_directories={base}", "-c", "fsync=off"])
    server = PrivateServer(bindir=bindir, datadir=datadir, port=port, user=user, password=password, db=db,
                           options=opts)
    server.start()
    conn = _connect("127.0.0.1", port, user, password=password)
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{db}"')
    conn.close()
    return server






def wait_until(predicate, *, timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False


# ------------------------------------------------------------ an in-process workload

def sleep_launcher(spec, *, sleep_s: float = 0.05, cost_gpu_seconds=lambda number: 10.0):
    """A launcher that runs nothing: sleeps, then reports `cost_gpu_seconds(trial number)`
    (capped at the budget's reservation, as real launchers stop a trial there), the worker's
    pid, and a throughput that depends on the trial."""
    import math

    from tuner.launch import Launcher, TrialResult

    class SleepLauncher(Launcher):
        name = "sleep"

        def launch(self, request):
            time.sleep(sleep_s)
            cost = min(cost_gpu_seconds(request.number), request.max_gpu_seconds or math.inf)
            return TrialResult(status="ok", launcher="sleep", world_size=2, gpu_seconds=cost,
                               wall_seconds=cost / 2, extra={"pid": os.getpid()},
                               step_values=tuple((s, 100.0 + request.number % 7 + s) for s in range(4)))

    return SleepLauncher(spec)
