"""What a bench or a test needs to start a local service of its own: a free TCP port on the
loopback address, and where this machine's PostgreSQL server binaries are.

bench/chaos.py starts a private PostgreSQL with these; tests/pg.py (its private servers) and
tests/slurm_cluster.py (slurmctld and slurmd ports) import them from here.
"""

from __future__ import annotations

import glob
import shutil
import socket
from pathlib import Path

__all__ = ["free_port", "postgres_bindir"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bindir() -> Path | None:
    """The newest installed PostgreSQL's binaries (initdb, pg_ctl), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None
