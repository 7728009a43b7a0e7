"""Service commands that work on the database directly, dispatched by `grader`
(grader/cli.py): ``worker``, ``students``, ``staff``. Each takes its own argv and returns an
exit code. (``serve`` is api/cli.py; students' and staff's HTTP commands are client/.)

They use the same database as `grader serve` from any current directory
(submissions/settings.py); actions on people and tokens are recorded in the audit log as
done by ``user@host`` (kind ``cli``).

Also runnable directly: ``python -m submissions.cli worker``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from submissions.cli_transaction import EXIT_ERROR, run_in_transaction

logger = logging.getLogger("submissions.cli")

EXIT_OK, EXIT_FAILED = 0, 1


def _configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


# ----------------------------------------------------------------------------- worker


def worker(argv: list[str]) -> int:
    """`grader worker`: grade queued submissions until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="grader worker", description=worker.__doc__)
    parser.add_argument("--worker-id", help="default host:pid:random")
    parser.add_argument("--migrate", action="store_true",
                        help="run the migrations first (normally `grader serve` does)")
    parser.add_argument("--schema-wait-s", type=float, default=60.0,
                        help="how long to wait for the schema to be migrated")
    parser.add_argument("--gpu", metavar="INDEX|UUID",
                        help="grade on this GPU only (nvidia-smi's index or GPU-... UUID; "
                             "GRADER_WORKER_GPU)")
    parser.add_argument("--cpus", metavar="LIST",
                        help="bind the worker and its graders to these host cores, e.g. 0-7 "
                             "(GRADER_WORKER_CPUS)")
    parser.add_argument("--idle-exit-s", type=float, metavar="S",
                        help="exit after S seconds without a job (GRADER_WORKER_IDLE_EXIT_S)")
    args = parser.parse_args(argv)
    _configure_logging()

    from submissions.db import create_session_factory, engine_from_settings
    from submissions.grading import grading_sandbox_problem
    from submissions.migrations import schema_is_current, upgrade_to_head
    from submissions.placement import WorkerPlacement, parse_cpu_list
    from submissions.settings import get_settings
    from submissions.worker import Worker

    settings = get_settings()
    problem = grading_sandbox_problem(settings)
    if problem is not None:
        logger.error("grader worker not started: every grading would end as an infrastructure "
                     "error. %s", problem)
        return EXIT_ERROR
    overrides = {name: value for name, value in (("worker_gpu", args.gpu), ("worker_cpus", args.cpus),
                                                  ("worker_idle_exit_s", args.idle_exit_s)) if value is not None}
    if overrides:
        settings = type(settings).model_validate({**settings.model_dump(), **overrides})
    placement = WorkerPlacement(gpu=settings.worker_gpu,
                                cpus=parse_cpu_list(settings.worker_cpus) if settings.worker_cpus else None)
    try:
        placement.apply()
    except OSError as exc:
        logger.error("cannot bind the worker to host cores %s: %s", settings.worker_cpus, exc)
        return EXIT_ERROR
    if placement.gpu is not None or placement.cpus is not None:
        logger.info("worker bound to GPU %s, host cores %s", placement.gpu or "(default)",
                    settings.worker_cpus or "(inherited)")
    if args.migrate:
        upgrade_to_head(database_url=settings.database_url)
    engine = engine_from_settings(settings)
    deadline = time.monotonic() + args.schema_wait_s
    while not schema_is_current(engine):
        if time.monotonic() > deadline:
            logger.error("the database schema is not at the latest migration; run "
                         "`grader serve` or `alembic upgrade head` (or pass --migrate)")
            return EXIT_ERROR
        time.sleep(1.0)

    grading_worker = Worker(settings, create_session_factory(engine), worker_id=args.worker_id)

    def _stop(signum: int, _frame: Any) -> None:
        logger.info("worker %s: received %s, stopping", grading_worker.worker_id,
                    signal.Signals(signum).name)
        grading_worker.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    grading_worker.run_forever()
    engine.dispose()
    return EXIT_OK


# ------------------------------------------------------------------- database commands


# --------------------------------------------------------------------------- students


def students(argv: list[str]) -> int:
    """`grader students add|list|import|rotate-token`: manage students in the database.
    Exit code 2 when nothing could be done (e.g. the name is taken, a roster row is bad)."""
    parser = argparse.ArgumentParser(prog="grader students", description=students.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="create a student and print their token")
    add.add_argument("name")
    add.add_argument("--email")
    add.add_argument("--id", dest="external_id", help="the institution's student id")
    commands.add_parser("list", help="list students")
    roster = commands.add_parser(
        "import", help="create students from a roster CSV (header: name,email,id) and print "
        "or write their tokens")
    roster.add_argument("file", type=Path, help="the roster CSV ('-': standard input)")
    roster.add_argument("--output", type=Path,
                        help="write student_id,name,email,id,token here (mode 0600) "
                        "instead of standard output")
    rotate = commands.add_parser("rotate-token", help="give a student a new token")
    rotate.add_argument("student_id", type=int)
    args = parser.parse_args(argv)

    from submissions import audit, repository, service
    from submissions import roster as rosters
    from submissions.models import utc_now

    actor = audit.cli_actor()

    def add_student(session: Any) -> int:
        created = service.create_student(session, name=args.name, email=args.email,
                                         external_id=args.external_id, now=utc_now(),
                                         actor=actor)
        print(created.token)
        print(f"student {created.student.id} ({created.student.name}) created; "
              "give them the token above (it is not stored)", file=sys.stderr)
        return EXIT_OK

    def list_students(session: Any) -> int:
        for student in repository.list_students(session):
            print(f"{student.id}\t{student.name}\t{student.email or ''}\t"
                  f"{student.external_id or ''}\t{student.created_at.isoformat()}")
        return EXIT_OK

    def import_roster(session: Any) -> int:
        text = sys.stdin.read() if str(args.file) == "-" else args.file.read_text("utf-8-sig")
        imported = rosters.import_roster(session, text=text, actor=actor, now=utc_now())
        tokens = rosters.tokens_csv(imported)
        created = sum(1 for i in imported if i.created)
        if args.output is not None:
            args.output.touch(mode=0o600)
            args.output.write_text(tokens, encoding="utf-8")
            args.output.chmod(0o600)
        else:
            sys.stdout.write(tokens)
        print(f"{created} student(s) created, {len(imported) - created} already existed "
              f"(they keep their tokens){'; tokens in ' + str(args.output) if args.output else ''}",
              file=sys.stderr)
        return EXIT_OK

    def rotate_token(session: Any) -> int:
        issued = service.rotate_student_token(session, student_id=args.student_id, actor=actor,
                                              now=utc_now())
        print(issued.token)
        print(f"student {issued.student.id} ({issued.student.name}): new token above; the "
              "old one no longer works", file=sys.stderr)
        return EXIT_OK

    actions = {"add": add_student, "list": list_students, "import": import_roster,
               "rotate-token": rotate_token}
    return run_in_transaction(actions[args.command])


# ------------------------------------------------------------------------------ staff


def staff(argv: list[str]) -> int:
    """`grader staff add|list|rotate-token`: instructor and TA accounts in the database
    (each with a personal token; the GRADER_INSTRUCTOR_TOKEN instructor needs none)."""
    parser = argparse.ArgumentParser(prog="grader staff", description=staff.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="create a staff account and print its token")
    add.add_argument("name")
    add.add_argument("--role", choices=["instructor", "ta"], required=True)
    commands.add_parser("list", help="list staff accounts")
    rotate = commands.add_parser("rotate-token", help="give a staff member a new token")
    rotate.add_argument("staff_id", type=int)
    args = parser.parse_args(argv)

    from submissions import audit, repository
    from submissions import staff as accounts
    from submissions.models import StaffRole, utc_now

    actor = audit.cli_actor()

    def add_member(session: Any) -> int:
        created = accounts.create_staff_member(session, name=args.name,
                                               role=StaffRole(args.role), actor=actor,
                                               now=utc_now())
        print(created.token)
        print(f"{created.member.role} {created.member.id} ({created.member.name}) created; "
              "the token above is shown once", file=sys.stderr)
        return EXIT_OK

    def list_members(session: Any) -> int:
        for member in repository.list_staff_members(session):
            print(f"{member.id}\t{member.name}\t{member.role}\t{member.created_at.isoformat()}")
        return EXIT_OK

    def rotate_token(session: Any) -> int:
        rotated = accounts.rotate_staff_token(session, staff_id=args.staff_id, actor=actor,
                                              now=utc_now())
        print(rotated.token)
        print(f"{rotated.member.role} {rotated.member.id} ({rotated.member.name}): new token "
              "above; the old one no longer works", file=sys.stderr)
        return EXIT_OK

    actions = {"add": add_member, "list": list_members, "rotate-token": rotate_token}
    return run_in_transaction(actions[args.command])


def lti(argv: list[str]) -> int:
    """`grader lti ...`: the LMS integration (submissions/lti/cli.py)."""
    from submissions.lti.cli import main as lti_main

    return lti_main(argv)


COMMANDS = {"worker": worker, "students": students, "staff": staff, "lti": lti}


def main(argv: list[str] | None = None) -> int:
    """``python -m submissions.cli COMMAND ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m submissions.cli {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return EXIT_ERROR
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
