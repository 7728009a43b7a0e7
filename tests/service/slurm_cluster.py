"""A real one-node SLURM cluster for the fleet tests: Debian's munged, slurmctld and slurmd
(packages munge, slurmctld, slurmd, slurm-client; installed by `make test`'s set-up), started
as root in a temporary folder with their own ports, munge socket and key, so that nothing of
the machine's own configuration is used or changed. The client commands find it through
``SLURM_CONF`` (``environment()``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

#: The daemons and client commands the cluster needs.
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_programs() -> list[str]:
    """The programs of ``PROGRAMS`` not on PATH (or in /usr/sbin)."""
    path = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    return [program for program in PROGRAMS if shutil.which(program, path=path) is None]


class SlurmCluster:
    """munged + slurmctld + slurmd for one node named after this host, with ``cpus`` CPUs
    in one partition ``grading``."""

    def __init__(self, root: Path, *, cpus: int) -> None:
        self.root = root
        self.cpus = cpus
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge.sock"
        self._pid_files = [root / "slurmd.pid", root / "slurmctld.pid", root / "munged.pid"]

    def environment(self) -> dict[str, str]:
        """Variables that point SLURM's client commands at this cluster."""
        return {"SLURM_CONF": str(self.conf), "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"}

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=30, check=False,
                              env={**os.environ, **self.environment()})

    def start(self) -> None:
        """Start the three daemons and wait until the node is idle (30 s at most).

        Raises:
            RuntimeError: a daemon did not start or the node did not come up.
        """
        for folder in ("state", "spool", "log"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        controller_port, node_port = free_port(), free_port()
        self.conf.write_text(f"""ClusterName=gradertest{os.getpid()}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool'}
SlurmctldPidFile={self.root / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'slurmd.pid'}
SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}
SlurmdLogFile={self.root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=10
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000 State=UNKNOWN
PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
        starts = (
            ["munged", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={self.root / 'munged.pid'}", f"--log-file={self.root / 'log' / 'munged.log'}",
             f"--seed-file={self.root / 'munged.seed'}"],
            ["slurmctld", "-f", str(self.conf), "-i"],
            ["slurmd", "-f", str(self.conf), "-N", self.node],
        )
        for command in starts:
            answer = self._run(*command)
            if answer.returncode != 0:
                raise RuntimeError(f"{command[0]} did not start: {answer.stderr.strip()}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = self._run("sinfo", "--noheader", "--format=%t")
            if answer.returncode == 0 and answer.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the SLURM node did not come up: {self.logs()}")

    def jobs(self) -> list[tuple[str, str]]:
        """(job id, state) of every job the cluster knows."""
        answer = self._run("squeue", "--noheader", "--format=%i|%T")
        return [tuple(line.split("|", 1)) for line in answer.stdout.split() if "|" in line]

    def cancel(self, job_id: str) -> None:
        """``scancel`` one job (SIGTERM to its processes, SIGKILL after KillWait)."""
        self._run("scancel", job_id)

    def logs(self) -> str:
        """The daemons' logs (the ends), for a failure message."""
        return "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}"
                         for path in sorted((self.root / "log").glob("*.log")))

    def stop(self) -> None:
        """Cancel every job and stop the daemons."""
        self._run("scancel", "--full", "--user=root")
        for pid_file in self._pid_files:
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
