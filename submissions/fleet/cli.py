"""`grader fleet slurm` (keep SLURM worker jobs matched to the queue) and `grader fleet
kubernetes` (write the Kubernetes manifests with the course's settings)."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger("submissions.fleet")

EXIT_OK, EXIT_ERROR = 0, 2


def _slurm_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "slurm", help="submit `grader worker` jobs to SLURM while gradings wait",
        description="Keep the number of SLURM worker jobs matched to the grading queue: submit "
                    "jobs (one GPU each) while gradings wait, never more than --max-jobs; each "
                    "worker exits after --idle-exit-s without a job. Runs until SIGTERM/SIGINT "
                    "(or one tick with --once). docs/deployment.md, 'More than one host'.")
    parser.add_argument("--max-jobs", type=int, required=True, help="most worker jobs at once")
    parser.add_argument("--name", default="grader-workers", help="controller and job name (default %(default)s)")
    parser.add_argument("--partition")
    parser.add_argument("--account")
    parser.add_argument("--qos")
    parser.add_argument("--time", dest="time_limit", default="04:00:00", help="sbatch --time (default %(default)s)")
    parser.add_argument("--gres", default="gpu:1", help="sbatch --gres (default %(default)s; '' for CPU workers)")
    parser.add_argument("--cpus-per-job", type=int, help="sbatch --cpus-per-task")
    parser.add_argument("--mem", dest="memory", help="sbatch --mem, e.g. 64G")
    parser.add_argument("--idle-exit-s", type=float, default=300.0,
                        help="a worker exits after this long without a job (default %(default)s)")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between ticks (default %(default)s)")
    parser.add_argument("--apptainer-image", type=Path, help="run workers in this Apptainer image")
    parser.add_argument("--state-dir", type=Path, required=True,
                        help="a folder on the filesystem the nodes share: the workers' settings "
                             "file (0600) and the jobs' logs")
    parser.add_argument("--sbatch-arg", action="append", default=[], dest="extra_sbatch_args",
                        help="one more sbatch option, as it is (repeatable)")
    parser.add_argument("--once", action="store_true", help="one tick, then exit")


def _kubernetes_parser(subparsers: Any) -> None:
    from submissions.fleet.kubernetes import KubernetesSettings

    parser = subparsers.add_parser(
        "kubernetes", help="write the Kubernetes manifests (API, migrations, GPU workers, KEDA)",
        description="Render deploy/kubernetes with the course's settings into --out (a "
                    "kustomization: `kubectl apply -k OUT`).")
    parser.add_argument("--out", type=Path, required=True)
    for name, field in KubernetesSettings.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=type(field.default)
                            if isinstance(field.default, int | float) else str,
                            default=field.default, help=f"{field.description} (default %(default)s)")


def _slurm(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from submissions import repository
    from submissions.db import create_session_factory, engine_from_settings
    from submissions.fleet.slurm import SlurmError, SlurmFleet, SlurmFleetConfig
    from submissions.models import utc_now
    from submissions.settings import get_settings

    settings = get_settings()
    config = SlurmFleetConfig(
        name=args.name, max_jobs=args.max_jobs, partition=args.partition, account=args.account, qos=args.qos,
        time_limit=args.time_limit, gres=args.gres, cpus_per_job=args.cpus_per_job, memory=args.memory,
        idle_exit_s=args.idle_exit_s, interval_s=args.interval_s, apptainer_image=args.apptainer_image,
        environment_file=args.state_dir / "worker.env", log_dir=args.state_dir / "logs",
        extra_sbatch_args=args.extra_sbatch_args)
    try:
        fleet = SlurmFleet(config)
    except SlurmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    fleet.write_environment_file()
    session_factory = create_session_factory(engine_from_settings(settings))
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        logger.info("fleet %s: received %s, stopping (its jobs finish on their own)", config.name,
                    signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    logger.info("fleet %s: at most %d worker jobs (%s), idle exit after %.0f s", config.name, config.max_jobs,
                " ".join(fleet.sbatch_command()[1:]), config.idle_exit_s)
    while True:
        try:
            with session_factory.begin() as session:
                cutoff = utc_now() - dt.timedelta(seconds=settings.worker_stale_after)
                queue_depth = repository.count_queued_gradings(session)
                busy = [h.worker_id for h in repository.list_worker_heartbeats(session)
                        if h.current_submission_id is not None and h.last_seen_at >= cutoff]
            error, tick = None, None
            try:
                tick = fleet.tick(queue_depth=queue_depth, busy_worker_ids=busy)
            except SlurmError as exc:
                error = str(exc)
                logger.error("fleet %s: %s", config.name, error)
            with session_factory.begin() as session:
                repository.record_fleet_tick(
                    session, name=config.name, scheduler="slurm", max_jobs=config.max_jobs,
                    pending_jobs=tick.pending if tick else 0, running_jobs=tick.running if tick else 0,
                    queue_depth=queue_depth, submitted=len(tick.submitted) if tick else 0, error=error, now=utc_now())
            if tick is not None and tick.submitted:
                logger.info("fleet %s: %d queued, %d pending, %d running (%d grading): submitted %s", config.name,
                            queue_depth, tick.pending, tick.running, tick.busy, ", ".join(tick.submitted))
        except SQLAlchemyError as exc:
            logger.error("fleet %s: database error: %s", config.name, str(exc).splitlines()[0][:200])
        if args.once or stop.wait(config.interval_s):
            return EXIT_OK


def _kubernetes(args: argparse.Namespace) -> int:
    from submissions.fleet.kubernetes import KubernetesSettings, render

    values = {name: getattr(args, name) for name in KubernetesSettings.model_fields}
    try:
        settings = KubernetesSettings.model_validate(values)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for path in render(settings, args.out):
        print(path)
    return EXIT_OK


def main(argv: list[str]) -> int:
    """`grader fleet slurm|kubernetes ...`."""
    parser = argparse.ArgumentParser(prog="grader fleet", description=__doc__)
    subparsers = parser.add_subparsers(dest="scheduler", required=True)
    _slurm_parser(subparsers)
    _kubernetes_parser(subparsers)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return _slurm(args) if args.scheduler == "slurm" else _kubernetes(args)
