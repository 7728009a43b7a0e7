"""A fleet of grading workers as SLURM jobs, matched to the queue (`grader fleet slurm`).

SLURM clusters run no Docker daemon and their jobs are short-lived, so each worker is one
batch job: `grader worker` from a virtualenv on the cluster's shared filesystem (or inside an
Apptainer image), one GPU each (``--gres=gpu:1``; SLURM sets ``CUDA_VISIBLE_DEVICES`` and the
job's cores), a time limit, the course's partition and account. The controller, a small loop
that runs anywhere that reaches the database and the SLURM client commands (a login node),
compares on every tick the gradings waiting in the queue with the worker jobs it has:

    busy    = running jobs whose worker is grading (its heartbeat names a submission)
    idle    = running jobs - busy (a worker that is starting counts here: it will claim)
    wanted  = queued gradings - idle - pending jobs        (jobs that would find work)
    submit  = max(0, min(wanted, max_jobs - pending - running))

and submits that many jobs. It never cancels one: a worker exits by itself after
``idle_exit_s`` without a job (``grader worker --idle-exit-s``), so a job is never killed in
the middle of a grading by the controller. A job cancelled by others (``scancel``, preemption,
its time limit) gets SIGTERM: its worker hands the grading back to the queue unfinished, and
if it is killed before that, the grading's lease expires and the next worker's sweep
re-queues it (submissions/worker.py); either way another job grades it.

The workers need the service's settings (database URL, deployment seed): the controller
writes them to ``environment_file`` (mode 0600, readable by the submitting user only, on the
shared filesystem), which each job reads at its start; nothing secret goes on the sbatch
command line, where ``squeue`` and ``ps`` would show it.

The SLURM client commands (``sbatch``, ``squeue``) are the interface: they are stable across
SLURM versions and need no library built against the cluster's libslurm.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

logger = logging.getLogger("submissions.fleet.slurm")

#: Seconds an ``sbatch`` or ``squeue`` call may take before the tick counts as failed.
SLURM_COMMAND_TIMEOUT_S = 30.0

#: SLURM job states (``squeue --format=%T``) counted as waiting for a node, and as holding one.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "RESIZING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT"})

#: The settings a worker job needs, copied from the controller's environment into the
#: job's environment file (every GRADER_* variable is copied; these are listed in the docs).
WORKER_ENVIRONMENT_PREFIX = "GRADER_"


class SlurmFleetConfig(BaseModel):
    """How `grader fleet slurm` submits and bounds its worker jobs.

    Attributes:
        name: the controller's name: its row in /healthz and /metrics, and the jobs' name.
        max_jobs: the most worker jobs pending and running at once (one GPU each).
        partition, account, qos: ``sbatch --partition/--account/--qos`` (None: the cluster's default).
        time_limit: ``sbatch --time`` (SLURM's syntax, e.g. ``04:00:00``); a worker ended by it
            hands its grading back like any other stop.
        gres: ``sbatch --gres`` (``gpu:1``; ``gpu:h200:1`` for one model); empty for CPU-only workers.
        cpus_per_job: ``sbatch --cpus-per-task`` (None: the cluster's default).
        memory: ``sbatch --mem`` (e.g. ``64G``; None: the cluster's default).
        idle_exit_s: a worker job exits after this many seconds without a job.
        interval_s: seconds between two ticks.
        worker_command: the argv that starts a worker on a node (default: this interpreter's
            ``-m submissions.cli worker``, i.e. the same virtualenv, which must be on a
            filesystem the nodes share).
        apptainer_image: run the worker inside this Apptainer/Singularity image instead
            (``apptainer exec --nv IMAGE grader worker``), where the cluster has Apptainer.
        environment_file: where the workers' GRADER_* settings are written (0600).
        log_dir: where each job's output goes (``grader-worker-<jobid>.log``).
        extra_sbatch_args: further sbatch options, passed as they are (e.g. ``--constraint=h200``).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("grader-workers", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    max_jobs: int = Field(ge=1, le=10_000)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str = "04:00:00"
    gres: str = "gpu:1"
    cpus_per_job: int | None = Field(None, ge=1)
    memory: str | None = None
    idle_exit_s: float = Field(300.0, gt=0)
    interval_s: float = Field(10.0, gt=0)
    worker_command: list[str] = Field(default_factory=lambda: [sys.executable, "-m", "submissions.cli", "worker"])
    apptainer_image: Path | None = None
    environment_file: Path
    log_dir: Path
    extra_sbatch_args: list[str] = Field(default_factory=list)

    @field_validator("worker_command")
    @classmethod
    def _non_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("worker_command must not be empty")
        return value


@dataclass(frozen=True)
class SlurmJob:
    """One worker job as ``squeue`` lists it."""

    job_id: str
    state: str

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES


@dataclass(frozen=True)
class FleetTick:
    """What one tick saw and did."""

    queue_depth: int
    pending: int
    running: int
    busy: int
    submitted: list[str]


class SlurmError(RuntimeError):
    """A SLURM command failed (its stderr is the message)."""


def jobs_to_submit(*, queue_depth: int, pending: int, running: int, busy: int, max_jobs: int) -> int:
    """How many worker jobs to submit now (the rule in the module docstring)."""
    idle = max(0, running - busy)
    wanted = queue_depth - idle - pending
    return max(0, min(wanted, max_jobs - pending - running))


def worker_id_prefix(job_id: str) -> str:
    """The start of the worker id of the worker in job ``job_id`` (the job script sets it)."""
    return f"slurm-{job_id}@"


def _run(command: Sequence[str], *, stdin: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    try:
        answer = subprocess.run(  # noqa: S603 - argv list, no shell
            list(command), input=stdin, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT_S,
            check=False, env=dict(environ) if environ is not None else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{command[0]}: {exc}") from exc
    if answer.returncode != 0:
        raise SlurmError(f"{shlex.join(command)} exited {answer.returncode}: {answer.stderr.strip()[:500]}")
    return answer.stdout


class SlurmFleet:
    """Submits and counts the worker jobs of one controller (see the module docstring)."""

    def __init__(self, config: SlurmFleetConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)
        for tool in ("sbatch", "squeue"):
            if shutil.which(tool, path=self.environ.get("PATH")) is None:
                raise SlurmError(f"{tool} is not on PATH: run the controller where the SLURM client "
                                 "commands work (a login node), or install slurm-client")

    def write_environment_file(self) -> Path:
        """Write the workers' settings (every GRADER_* variable of the controller's
        environment, with the worker's idle exit) to ``environment_file``, mode 0600."""
        path = self.config.environment_file
        path.parent.mkdir(parents=True, exist_ok=True)
        variables = {name: value for name, value in self.environ.items() if name.startswith(WORKER_ENVIRONMENT_PREFIX)}
        variables["GRADER_WORKER_IDLE_EXIT_S"] = f"{self.config.idle_exit_s:g}"
        text = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(variables.items()))
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        os.chmod(path, 0o600)
        return path

    def job_script(self) -> str:
        """The batch script of one worker job: read the settings, then exec the worker (so
        that scancel's SIGTERM reaches it) with a worker id that names the job."""
        command = self.config.worker_command
        if self.config.apptainer_image is not None:
            command = ["apptainer", "exec", "--nv", str(self.config.apptainer_image), "grader", "worker"]
        return (
            "#!/bin/sh\n"
            "# A grading worker started by `grader fleet slurm` (submissions/fleet/slurm.py).\n"
            "set -e\n"
            f"export PATH={shlex.quote(self.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin'))}\n"
            f". {shlex.quote(str(self.config.environment_file))}\n"
            f'exec {shlex.join(command)} --worker-id "slurm-$SLURM_JOB_ID@$(hostname)"\n'
        )

    def sbatch_command(self) -> list[str]:
        """The ``sbatch`` argv of one worker job (the script comes on its stdin)."""
        config = self.config
        command = ["sbatch", "--parsable", f"--job-name={config.name}", f"--time={config.time_limit}",
                   "--nodes=1", "--ntasks=1", f"--output={config.log_dir / 'grader-worker-%j.log'}",
                   # The job gets no variable of the controller's environment (it may hold
                   # secrets beyond the workers' own): the script sets what the worker needs.
                   "--export=NONE"]
        for option, value in (("--partition", config.partition), ("--account", config.account),
                              ("--qos", config.qos), ("--mem", config.memory)):
            if value:
                command.append(f"{option}={value}")
        if config.gres:
            command.append(f"--gres={config.gres}")
        if config.cpus_per_job:
            command.append(f"--cpus-per-task={config.cpus_per_job}")
        return [*command, *config.extra_sbatch_args]

    def list_jobs(self) -> list[SlurmJob]:
        """This controller's worker jobs that SLURM still knows (pending or running).

        Raises:
            SlurmError: squeue failed.
        """
        user = self.environ.get("USER") or self.environ.get("LOGNAME")
        command = ["squeue", "--noheader", f"--name={self.config.name}", "--format=%i|%T"]
        if user:
            command.append(f"--user={user}")
        jobs = []
        for line in _run(command, environ=self.environ).splitlines():
            job_id, _, state = line.strip().partition("|")
            if job_id:
                jobs.append(SlurmJob(job_id=job_id, state=state))
        return jobs

    def submit(self) -> str:
        """Submit one worker job; returns its job id.

        Raises:
            SlurmError: sbatch refused it.
        """
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        answer = _run(self.sbatch_command(), stdin=self.job_script(), environ=self.environ)
        job_id = answer.strip().split(";")[0]
        if not job_id:
            raise SlurmError(f"sbatch printed no job id: {answer!r}")
        logger.info("fleet %s: submitted worker job %s", self.config.name, job_id)
        return job_id

    def tick(self, *, queue_depth: int, busy_worker_ids: Sequence[str]) -> FleetTick:
        """One look at the queue and the jobs, and the submissions it calls for.

        Args:
            queue_depth: gradings waiting for a worker.
            busy_worker_ids: ids of workers that are grading now (their heartbeats name a
                submission).

        Raises:
            SlurmError: squeue or sbatch failed (jobs submitted before the failure stay).
        """
        jobs = self.list_jobs()
        running = [job for job in jobs if job.running]
        pending = [job for job in jobs if job.pending]
        busy = sum(1 for job in running
                   if any(worker.startswith(worker_id_prefix(job.job_id)) for worker in busy_worker_ids))
        count = jobs_to_submit(queue_depth=queue_depth, pending=len(pending), running=len(running), busy=busy,
                               max_jobs=self.config.max_jobs)
        submitted = [self.submit() for _ in range(count)]
        return FleetTick(queue_depth=queue_depth, pending=len(pending) + len(submitted), running=len(running),
                         busy=busy, submitted=submitted)
