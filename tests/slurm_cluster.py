"""A real Slurm cluster on this machine in a temp dir, for tests (no fake srun).

munged (as the munge user, its own key and socket), slurmctld and one slurmd per node run
in the foreground as children of the test process, on free ports, with every state, spool,
log and pid file under one temp dir; SLURM_CONF points the client commands (srun, sbatch,
squeue, scancel, scontrol) at it. Nothing under /etc is touched, so a machine's own Slurm,
if any, is left alone.

The first node is this host (`NodeName=$(hostname) CPUs=2`). With ``nodes=2`` (the default)
a second slurmd runs here too, as node `<hostname>-2` on its own port: Slurm then schedules
real two-node jobs and steps, so multi-node trials (srun -N2, torchrun's c10d rendezvous
across both) run for real on one machine.

Needs root (slurmd starts job steps as the submitting user) and `apt-get install -y
slurm-wlm munge`; without them the `slurm_cluster` fixture skips with the reason.

Example:
    >>> cluster = start_cluster(nodes=1)    # doctest: +SKIP
    >>> cluster.run("srun", "-N1", "-n2", "hostname").stdout   # doctest: +SKIP
    'vm\\nvm\\n'
    >>> cluster.stop()                      # doctest: +SKIP
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.local_services import free_port

__all__ = ["SlurmCluster", "missing_reason", "start_cluster"]  # the fixture is in conftest.py

_BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "scontrol")
_READY_TIMEOUT_S = 60.0
# 2 CPUs per node: the CI machine has 2 cores (a node may not claim more CPUs than slurmd
# finds, or it goes DRAIN with "Low CPUs"); the second node shares the same cores.
_NODE_CPUS = 2


def missing_reason() -> str | None:
    """Why a real Slurm cannot be started here, or None when it can."""
    missing = [b for b in _BINARIES if shutil.which(b) is None
               and not Path("/usr/sbin", b).exists()]
    if missing:
        return (f"Slurm test cluster: {', '.join(missing)} not installed "
                "(apt-get install -y slurm-wlm munge)")
    if os.geteuid() != 0:
        return "Slurm test cluster: slurmd must run as root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "Slurm test cluster: no `munge` user (apt-get install -y munge creates it)"
    if (os.cpu_count() or 1) < _NODE_CPUS:
        return f"Slurm test cluster: needs {_NODE_CPUS} CPUs"
    return None


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    """A running test cluster: its dir, config, daemons and an environment for clients."""

    root: Path
    conf_path: Path
    nodes: tuple[str, ...]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def node(self) -> str:
        """The first node: this host."""
        return self.nodes[0]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    def run(self, *cmd: str, timeout_s: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=check)

    def job_ids(self) -> list[str]:
        """Jobs still in the queue (any state but finished), as squeue lists them."""
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return out.split()

    def wait_queue_empty(self, timeout_s: float = 30.0) -> list[str]:
        """Wait until squeue lists nothing; returns what is still there at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self.job_ids()
            if not jobs or time.monotonic() > deadline:
                return jobs
            time.sleep(0.5)

    def logs(self) -> str:
        """The daemons' log tails, for a failing test's message."""
        parts = []
        for path in sorted((self.root / "log").glob("*.log")):
            name = path.name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (this cluster's only, by pid)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                jobs = self.job_ids()
                if jobs:
                    self.run("scancel", *jobs, timeout_s=15)
                    self.wait_queue_empty(timeout_s=20)
            except (subprocess.SubprocessError, OSError):
                pass
        daemons = [n for n in self.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]
        for name in daemons:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _slurm_conf(root: Path, nodes: tuple[str, ...], ctld_port: int, munge_socket: Path) -> str:
    host = nodes[0]
    # Every node is a slurmd on this host, each on a port of its own (Slurm's "multiple
    # slurmd" setup); NodeAddr is how Slurm, and tuner's rendezvous, reach it.
    node_lines = "\n".join(
        f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port()} "
        f"CPUs={_NODE_CPUS} State=UNKNOWN" for n in nodes)
    node_list = ",".join(nodes)
    first_job_id = 1 + ctld_port * 10  # a free port is this cluster's own: so are its job ids
    return textwrap.dedent(f"""\
        # A test cluster (tests/slurm_cluster.py); every path under {root}.
        ClusterName=tunertest
        # Job ids of their own: trials' rendezvous ports derive from the job id (tuner.launch),
        # so two clusters side by side (pytest-xdist workers) must not number jobs alike.
        FirstJobId={first_job_id}
        SlurmctldHost={host}(127.0.0.1)
        SlurmctldPort={ctld_port}
        SlurmUser=root
        SlurmdUser=root
        AuthType=auth/munge
        CredType=cred/munge
        AuthInfo=socket={munge_socket}
        StateSaveLocation={root}/state
        SlurmdSpoolDir={root}/spool/%n
        SlurmctldPidFile={root}/run/slurmctld.pid
        SlurmdPidFile={root}/run/slurmd-%n.pid
        SlurmctldLogFile={root}/log/slurmctld.log
        SlurmdLogFile={root}/log/slurmd-%n.log
        # No cgroups in a container: track processes by parent pid, bind nothing.
        ProctrackType=proctrack/linuxproc
        TaskPlugin=task/none
        JobAcctGatherType=jobacct_gather/none
        AccountingStorageType=accounting_storage/none
        JobCompType=jobcomp/none
        SwitchType=switch/none
        MpiDefault=none
        SchedulerType=sched/backfill
        # A job whose begin time passed (a requeued one) starts within a second or two, not at
        # the next 30 s backfill pass: the requeue test waits on three allocations.
        SchedulerParameters=bf_interval=1
        SelectType=select/cons_tres
        SelectTypeParameters=CR_CPU
        ReturnToService=2
        # Cancelled test jobs are gone in seconds (KillWait: SIGTERM -> SIGKILL, default 30 s).
        KillWait=3
        InactiveLimit=0
        MinJobAge=300
        # `urgent` preempts `debug` (jobs cancelled, state PREEMPTED), for the preemption test.
        PreemptType=preempt/partition_prio
        PreemptMode=CANCEL
        {{node_lines}}
        PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
        PartitionName=urgent Nodes={node_list} MaxTime=INFINITE State=UP PriorityTier=2
        """).replace("{node_lines}", node_lines)


def _start_munge(root: Path) -> tuple[subprocess.Popen, Path]:
    """munged as the munge user with a fresh key, on a socket of its own under ``root``."""
    munge = pwd.getpwnam("munge")
    mdir = root / "munge"
    mdir.mkdir()
    mdir.chmod(0o755)  # clients (slurmd, srun) must reach the socket; the key stays 0400
    key = mdir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (mdir, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    sock = mdir / "munge.socket"
    cmd = [_which("munged"), "--foreground", f"--socket={sock}", f"--key-file={key}",
           f"--pid-file={mdir / 'munged.pid'}", f"--seed-file={mdir / 'munged.seed'}",
           f"--log-file={root / 'log' / 'munged.log'}"]
    # munged refuses to run as root and checks that its dirs are not writable by others.
    proc = subprocess.Popen(cmd, user=munge.pw_uid, group=munge.pw_gid, extra_groups=[],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"munged exited: {proc.stderr.read().strip()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("munged did not create its socket within 10 s")
        time.sleep(0.1)
    return proc, sock


def start_cluster(nodes: int = 2, ready_timeout_s: float = _READY_TIMEOUT_S) -> SlurmCluster:
    """Start munged, slurmctld and a slurmd per node; return once srun answers on all of them
    (`srun -N1 -n2 hostname` and `srun -N<nodes> hostname`).

    Raises:
        RuntimeError: a daemon died or the cluster did not answer in time (the message holds
            the daemons' logs).
    """
    # Not pytest's tmp_path: munged needs every dir on its paths traversable by `munge`.
    root = Path(tempfile.mkdtemp(prefix="tuner-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool", "run", "log"):
        (root / sub).mkdir()
    (root / "log").chmod(0o777)  # munged (as munge) writes its log there
    host = socket.gethostname().split(".")[0]
    names = (host, *(f"{host}-{i}" for i in range(2, nodes + 1)))
    cluster = SlurmCluster(root=root, conf_path=root / "slurm.conf", nodes=names)
    try:
        cluster.procs["munged"], sock = _start_munge(root)
        cluster.conf_path.write_text(_slurm_conf(root, names, free_port(), sock))
        devnull = subprocess.DEVNULL
        cluster.procs["slurmctld"] = subprocess.Popen(
            [_which("slurmctld"), "-D", "-c", "-i", "-f", str(cluster.conf_path)],
            env=cluster.env, stdout=devnull, stderr=devnull, start_new_session=True)
        for name in names:
            cluster.procs[f"slurmd-{name}"] = subprocess.Popen(
                [_which("slurmd"), "-D", "-f", str(cluster.conf_path), "-N", name],
                env=cluster.env, stdout=devnull, stderr=devnull, start_new_session=True)
        _wait_ready(cluster, ready_timeout_s)
    except Exception as exc:
        logs = cluster.logs()
        cluster.stop()
        raise RuntimeError(f"the Slurm test cluster did not start: {exc}\n{logs}") from None
    except BaseException:  # Ctrl-C while starting: leave no daemon behind
        cluster.stop()
        raise
    return cluster


def _wait_ready(cluster: SlurmCluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}")
        n = len(cluster.nodes)
        try:
            answers = [cluster.run("srun", "-N1", "-n2", "--immediate=5", "hostname", timeout_s=20),
                       cluster.run("srun", f"-N{n}", f"-n{n}", "--immediate=5", "hostname", timeout_s=20)]
        except subprocess.TimeoutExpired:
            continue
        if all(a.returncode == 0 for a in answers) and [len(a.stdout.split()) for a in answers] == [2, n]:
            return
        last = " / ".join(a.stderr.strip() for a in answers)
        time.sleep(1.0)
    raise RuntimeError(f"srun did not answer on every node within {timeout_s:g} s: {last}")

