"""Service commands, dispatched by `grader` (grader/cli.py): ``serve``, ``worker``,
``students``, ``submit``. Each takes its own argv and returns an exit code.

Also runnable directly: ``python -m submissions.cli serve --port 8000``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("submissions.cli")

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


# ------------------------------------------------------------------------------ serve


class EmbeddedWorkers:
    """Child worker processes of `grader serve`, restarted if they die.

    Child processes (not threads) so that a worker's crash, or a stuck grading, can never
    block the web server's event loop; each child gets SIGTERM if `serve` dies.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="worker-supervisor",
                                            daemon=True)

    @staticmethod
    def _spawn(index: int) -> subprocess.Popen[bytes]:
        from submissions.grading import parent_death_signal_setter

        command = [sys.executable, "-m", "submissions.cli", "worker"]
        logger.info("starting embedded worker %d", index)
        return subprocess.Popen(  # noqa: S603
            command, stdin=subprocess.DEVNULL,
            preexec_fn=parent_death_signal_setter(signal.SIGTERM),  # noqa: PLW1509
        )

    def start(self) -> None:
        if self.count > 0:
            self._supervisor.start()

    def _supervise(self) -> None:
        # Spawning happens in this thread, which lives until the children are stopped
        # (Linux delivers the parent-death signal when the *spawning thread* exits).
        backoff = 1.0
        while not self._stopping.is_set():
            for index, process in enumerate(self.processes):
                if process is None or process.poll() is not None:
                    if process is not None:
                        logger.warning("embedded worker %d exited with %s; restarting in %.0f s",
                                       index, process.returncode, backoff)
                        if self._stopping.wait(backoff):
                            break
                        backoff = min(backoff * 2, 30.0)
                    self.processes[index] = self._spawn(index)
            self._stopping.wait(1.0)
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            if process is None:
                continue
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self) -> None:
        """Stop the children (SIGTERM; SIGKILL after 15 s) and wait for them."""
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join()


def serve(argv: list[str]) -> int:
    """`grader serve`: migrate, start embedded workers, run the API with uvicorn."""
    parser = argparse.ArgumentParser(prog="grader serve", description=serve.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers-embedded", type=int, default=1, metavar="N",
                        help="worker processes to run beside the API (default 1; 0 for none)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    _configure_logging()

    import uvicorn

    from api.main import create_app
    from submissions.migrations import upgrade_to_head
    from submissions.settings import get_settings

    settings = get_settings()
    upgrade_to_head(database_url=settings.database_url)
    logger.info("database migrated: %s", _redacted(settings.database_url))
    workers = EmbeddedWorkers(args.workers_embedded)
    received: list[int] = []

    def _remember_signal(signum: int, _frame: Any) -> None:
        received.append(signum)

    # uvicorn handles SIGTERM/SIGINT itself, then re-raises the signal through the handler
    # that was installed before it started: this one, so the workers are still stopped.
    signal.signal(signal.SIGTERM, _remember_signal)
    signal.signal(signal.SIGINT, _remember_signal)
    workers.start()
    try:
        uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        workers.stop()
    logger.info("grader serve stopped%s",
                f" ({signal.Signals(received[0]).name})" if received else "")
    return EXIT_OK


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# ----------------------------------------------------------------------------- worker


def worker(argv: list[str]) -> int:
    """`grader worker`: grade queued submissions until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="grader worker", description=worker.__doc__)
    parser.add_argument("--worker-id", help="default host:pid:random")
    parser.add_argument("--migrate", action="store_true",
                        help="run the migrations first (normally `grader serve` does)")
    parser.add_argument("--schema-wait-s", type=float, default=60.0,
                        help="how long to wait for the schema to be migrated")
    args = parser.parse_args(argv)
    _configure_logging()

    from submissions.db import create_session_factory, engine_from_settings
    from submissions.migrations import schema_is_current, upgrade_to_head
    from submissions.settings import get_settings
    from submissions.worker import Worker

    settings = get_settings()
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


# --------------------------------------------------------------------------- students


def students(argv: list[str]) -> int:
    """`grader students add NAME` (prints the new token) and `grader students list`.
    Exit code 2 when a student cannot be added (blank name, or the name is taken)."""
    parser = argparse.ArgumentParser(prog="grader students", description=students.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="create a student and print their token")
    add.add_argument("name")
    commands.add_parser("list", help="list students")
    args = parser.parse_args(argv)

    from submissions import repository, service
    from submissions.db import create_session_factory, engine_from_settings
    from submissions.errors import DomainError
    from submissions.migrations import upgrade_to_head
    from submissions.models import utc_now
    from submissions.settings import get_settings

    settings = get_settings()
    upgrade_to_head(database_url=settings.database_url)
    engine = engine_from_settings(settings)
    try:
        with create_session_factory(engine).begin() as session:
            if args.command == "add":
                try:
                    created = service.create_student(session, name=args.name, now=utc_now())
                except DomainError as exc:  # e.g. student_name_taken: nothing is created
                    print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
                    return EXIT_ERROR
                print(created.token)
                print(f"student {created.student.id} ({created.student.name}) created; "
                      "give them the token above (it is not stored)", file=sys.stderr)
            else:
                for student in repository.list_students(session):
                    print(f"{student.id}\t{student.name}\t{student.created_at.isoformat()}")
    finally:
        engine.dispose()
    return EXIT_OK


# ----------------------------------------------------------------------------- submit

_TERMINAL = {"passed", "failed", "error"}


def submit(argv: list[str]) -> int:
    """`grader submit FILE --server URL --token T`: upload, wait, print the verdicts.
    Exit code: 0 passed, 1 failed, 2 error (or the upload was refused)."""
    parser = argparse.ArgumentParser(prog="grader submit", description=submit.__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--server", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", required=True, help="your student token")
    parser.add_argument("--assignment", default="softmax_backward")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    args = parser.parse_args(argv)

    import httpx
    from rich.console import Console

    console = Console()
    error_console = Console(stderr=True)
    base = args.server.rstrip("/")
    headers = {"Authorization": f"Bearer {args.token}"}
    try:
        content = args.file.read_bytes()
    except OSError as exc:
        error_console.print(f"[red]cannot read {args.file}: {exc}[/red]")
        return EXIT_ERROR

    with httpx.Client(base_url=base, headers=headers, timeout=30.0) as client:
        try:
            response = client.post(
                "/api/v1/submissions",
                files={"file": (args.file.name, content, "text/x-python")},
                data={"assignment": args.assignment},
            )
        except httpx.HTTPError as exc:
            error_console.print(f"[red]cannot reach {base}: {exc}[/red]")
            return EXIT_ERROR
        if response.status_code != 202:
            _print_api_error(error_console, response)
            return EXIT_ERROR
        submission_id = response.json()["id"]
        console.print(f"submission [bold]{submission_id}[/bold] queued")
        submission = _wait_for_verdict(client, console, submission_id, args)
    if submission is None:
        return EXIT_ERROR
    _print_verdicts(console, submission)
    return {"passed": EXIT_OK, "failed": EXIT_FAILED}.get(submission["status"], EXIT_ERROR)


def _print_api_error(console: Any, response: Any) -> None:
    try:
        error = response.json()["error"]
        console.print(f"[red]refused ({response.status_code} {error['code']}): "
                      f"{error['message']}[/red]")
    except (ValueError, KeyError, TypeError):
        console.print(f"[red]refused ({response.status_code}): {response.text[:500]}[/red]")


def _wait_for_verdict(client: Any, console: Any, submission_id: int,
                      args: argparse.Namespace) -> dict[str, Any] | None:
    import httpx

    started = time.monotonic()
    with console.status("waiting for a worker...") as progress:
        while True:
            try:
                response = client.get(f"/api/v1/submissions/{submission_id}")
            except httpx.HTTPError as exc:
                progress.update(f"server unreachable ({exc}); retrying...")
                response = None
            if response is not None and response.status_code == 200:
                submission = response.json()
                status = submission["status"]
                if status in _TERMINAL:
                    return submission
                elapsed = time.monotonic() - started
                if status == "running":
                    progress.update(f"grading on {submission.get('worker_id') or 'a worker'} "
                                    f"(attempt {submission['attempts']}) ... {elapsed:.0f} s")
                else:
                    progress.update(f"queued ... {elapsed:.0f} s")
            elif response is not None and response.status_code != 503:
                _print_api_error(console, response)
                return None
            if time.monotonic() - started > args.timeout:
                console.print(f"[red]no verdict after {args.timeout:g} s; check later with the "
                              f"API (submission {submission_id})[/red]")
                return None
            time.sleep(args.poll_interval)


def _format_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def _error_vs_tolerance(numbers: dict[str, Any]) -> str:
    """``3.7e-07 (0.0059 of tolerance)`` from a check's numbers, as far as they are present."""
    parts = []
    if numbers.get("max_abs_err") is not None:
        parts.append(_format_number(numbers["max_abs_err"]))
    if numbers.get("tolerance") is not None:
        parts.append(f"vs {_format_number(numbers['tolerance'])}")
    ratio = numbers.get("max_err_over_tolerance")
    if ratio is not None:
        parts.append(f"({_format_number(ratio)} of tolerance)")
    return " ".join(parts)


def _print_verdicts(console: Any, submission: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"submission {submission['id']}: {submission['status']}")
    table.add_column("", justify="center")
    table.add_column("check")
    table.add_column("max error vs tolerance")
    table.add_column("message", overflow="fold")
    for check in submission.get("checks", []):
        numbers = check.get("numbers") or {}
        if check["skipped"]:
            mark = "[yellow]-[/yellow]"
        elif check["passed"]:
            mark = "[green]✓[/green]"
        else:
            mark = "[red]✗[/red]"
        table.add_row(mark, check["name"], _error_vs_tolerance(numbers),
                      check.get("message") or "")
    console.print(table)
    error = submission.get("error")
    if error:
        console.print(f"[red]error ({error['kind']}): {error.get('message') or ''}[/red]")
    benchmark = submission.get("benchmark") or {}
    headline = benchmark.get("headline") if isinstance(benchmark, dict) else None
    if isinstance(headline, dict) and headline.get("value") is not None:
        console.print(f"benchmark {headline.get('name', 'headline')}: "
                      f"[bold]{_format_number(headline['value'])}[/bold]")
    log = submission.get("log") or {}
    if log.get("text"):
        console.print("[dim]captured output (truncated)[/dim]" if log.get("truncated")
                      else "[dim]captured output[/dim]")
        console.print(log["text"], markup=False, highlight=False)


COMMANDS = {"serve": serve, "worker": worker, "students": students, "submit": submit}


def main(argv: list[str] | None = None) -> int:
    """``python -m submissions.cli COMMAND ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m submissions.cli {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return EXIT_ERROR
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
