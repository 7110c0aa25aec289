"""Shared fixtures and markers.

Fixtures (real services, never mocks):

* ``pg_url``: a fresh, empty database on the local PostgreSQL server (127.0.0.1:5432 unless
  TUNER_TEST_PG_HOST / _PORT / _USER say otherwise), dropped after the test.
* ``storage_url``: the same test on SQLite and on PostgreSQL (contract tests, as Optuna's
  ``StorageTestCase`` runs over its backends).
* ``compose_pg``: a private PostgreSQL server (initdb in a temporary folder, its own port),
  configured like docker-compose.yml's ``postgres`` service; tests that stop or restart a
  server use it, never the shared one. ``private_db_url``: a fresh database on it.
* ``slurm_cluster``: a real one-node Slurm (slurmctld, slurmd, munged) for the session.

Markers: ``slow`` for tests that start processes (torchrun, `tuner` subprocesses, private
servers, Slurm); ``postgres`` for tests that need PostgreSQL, set here for every test that
uses a PostgreSQL fixture. ``pytest -m "not slow"`` is the quick suite.
"""

from __future__ import annotations

import os
import shutil

# README's command runs three test workers on two cores: a BLAS or OpenMP pool per process (and
# per subprocess: `tuner`, torchrun) only spins. Set before anything imports NumPy or torch.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

from tests import pg  # noqa: E402
from tests import slurm_cluster as slurm  # noqa: E402

_PG_FIXTURES = {"pg_url", "compose_pg", "private_db_url"}
# Fixtures that start processes: a test using one is slow.
_SLOW_FIXTURES = {"compose_pg", "private_db_url", "slurm_cluster"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _PG_FIXTURES or getattr(getattr(item, "callspec", None), "params", {}).get("storage_url") == "postgresql":
            item.add_marker(pytest.mark.postgres)
        if names & _SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def pg_url():
    """A fresh, empty database on the local server; its SQLAlchemy URL."""
    reason = pg.pg_available()
    if reason:
        pytest.skip(reason)
    name = pg.create_database(pg.PG_HOST, pg.PG_PORT, pg.PG_USER)
    yield f"postgresql+psycopg2://{pg.PG_USER}@{pg.PG_HOST}:{pg.PG_PORT}/{name}"
    pg.drop_database(pg.PG_HOST, pg.PG_PORT, pg.PG_USER, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    """The same contract on both backends: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def compose_pg():
    """A private server configured from docker-compose.yml's postgres service."""
    env, options = pg.compose_postgres()
    server = pg.start_private_server(user=env["POSTGRES_USER"], password=env["POSTGRES_PASSWORD"],
                                     db=env["POSTGRES_DB"], options=options)
    yield server
    server.stop()
    shutil.rmtree(server.datadir.parent, ignore_errors=True)


@pytest.fixture
def private_db_url(compose_pg):
    """A fresh database on the private server (password auth); its SQLAlchemy URL."""
    name = pg.create_database("127.0.0.1", compose_pg.port, compose_pg.user, compose_pg.password)
    yield compose_pg.url(name)
    pg.drop_database("127.0.0.1", compose_pg.port, compose_pg.user, name, compose_pg.password)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-node Slurm for the session; SLURM_CONF points at it meanwhile."""
    reason = slurm.missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = slurm.start_cluster()
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf_path)
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()
