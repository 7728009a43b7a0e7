"""Students' commands: ``grader submit``, ``grader status``, ``grader history``.

Each takes its own argv and returns an exit code. The server and the token come from
``--server`` / ``--token`` or the environment (``GRADER_SERVER``, default
http://127.0.0.1:8000; ``GRADER_TOKEN``).

Exit codes of ``submit`` and ``status``: 0 passed, 1 failed, 2 error (the file could not be
graded, the upload was refused, or the server answered with an error), 3 no verdict yet
(``status`` without ``--wait``, or ``submit`` past ``--timeout``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from api.schemas import TERMINAL, AssignmentList, SubmissionCreated, SubmissionList, SubmissionRead
from client.http import (
    ApiError,
    ServiceClient,
    new_idempotency_key,
    resolve_server,
    resolve_token,
)
from grader.manifest import DEFAULT_ASSIGNMENT, resolve_assignment
from grader.report.document import ResultDocument
from grader.report.render import render_result

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_PENDING = 0, 1, 2, 3


def connection_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--server`` and ``--token``. `suppress`: on a subcommand's parser, so that a value given
    before the subcommand (on the parent parser) is kept when none is given after it."""
    default = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--server", help="the service's URL (default: $GRADER_SERVER, else "
                        "http://127.0.0.1:8000)", **default)
    parser.add_argument("--token", help="your token (default: $GRADER_TOKEN)", **default)


def _client(args: argparse.Namespace, console: Console) -> ServiceClient | None:
    token = resolve_token(args.token)
    if token is None:
        console.print("[red]no token: pass --token T or set GRADER_TOKEN[/red]")
        return None

    def tell(why: str, seconds: float) -> None:
        console.print(f"[yellow]{why}; retrying in {seconds:.0f} s[/yellow]")

    return ServiceClient(resolve_server(args.server), token, on_retry=tell)


def print_api_error(console: Console, error: ApiError) -> None:
    """One red line: ``refused (422 source_syntax_error): ...``."""
    label = "error" if error.status == 0 else f"refused ({error.status} {error.code})"
    console.print(f"[red]{escape(label)}: {escape(error.message)}[/red]", highlight=False)


def _minute_or_second(moment: dt.datetime) -> str:
    """``2026-12-01 12:00 UTC``, with the seconds when they are not zero (``12:00:07 UTC``):
    lateness is decided to the second, so a time beside a due date never hides it."""
    moment = moment.astimezone(dt.UTC)
    exact = moment.second == 0 and moment.microsecond == 0
    return moment.strftime("%Y-%m-%d %H:%M UTC" if exact else "%Y-%m-%d %H:%M:%S UTC")


def _utc(moment: dt.datetime | None) -> str:
    if moment is None:
        return "-"
    return _minute_or_second(moment)


# ----------------------------------------------------------------------------- render


def render_submission(console: Console, submission: SubmissionRead, server: str | None = None) -> None:
    """The summary and per-check table (grader/report/render.py, as `grader check` prints them; with
    `server`, the first check to fix links to its row of the service's /checks page), then
    what the service adds: score, lateness, disqualification."""
    console.print(f"submission [bold]{submission.id}[/bold] ({escape(submission.assignment)}, "
                  f"{escape(submission.filename or 'no file name')}, uploaded "
                  f"{_utc(submission.created_at)}): [bold]{submission.status}[/bold]")
    document = submission.result_document()
    if document is None:
        console.print(f"no verdict yet ({submission.status}); `grader status "
                      f"{submission.id} --wait` waits for it")
    else:
        try:
            render_result(document, console, source_name=submission.filename, server=server)
        except ValidationError:  # a server newer or older than this client: show the basics
            for check in submission.checks:
                mark = "-" if check.skipped else ("✓" if check.passed else "✗")
                console.print(f"{mark} {check.name}: {check.message or ''}", markup=False, highlight=False)
            if submission.error is not None:
                console.print(f"error ({submission.error.kind}): {submission.error.message}",
                              markup=False, highlight=False)
    if submission.score is not None:
        score = submission.score
        console.print(f"score: [bold]{score.text}[/bold] (correctness "
                      f"{score.correctness_points:g} + speed {score.speed_points:g})",
                      highlight=False)
    score = submission.score
    if submission.late:
        how_late = f", {score.late_text}" if score is not None and score.late_text else ""
        cost = (f"{score.late_penalty_percent:g}% late penalty" if score is not None
                and score.late_penalty_percent and score.withheld is None else "graded 0")
        console.print(f"[yellow]late: uploaded after your due date ({_utc(submission.due_at)})"
                      f"{how_late}; never ranked, {cost}[/yellow]", highlight=False)
    elif score is not None and score.slip_days:
        console.print(f"[yellow]{score.late_text}, covered by {score.slip_days} slip day(s)"
                      "[/yellow]", highlight=False)
    if submission.disqualification is not None:
        console.print(f"[red]disqualified on {_utc(submission.disqualification.at)}: "
                      f"{escape(submission.disqualification.reason)}[/red]", highlight=False)


def _exit_code(status: str) -> int:
    return {"passed": EXIT_PASSED, "failed": EXIT_FAILED, "error": EXIT_ERROR}.get(
        status, EXIT_PENDING)


def progress_line(submission: SubmissionRead, *, waited_s: float) -> str:
    """What ``grader submit`` shows while it waits: ``queued (number 3 in the queue) ... 12 s``
    or ``running: compiling your kernels (attempt 1; 40 s of the 1800 s a whole grading may
    take)``: the worker's limit on the whole grading (GRADER_GRADER_TIMEOUT_S: compilation,
    every sandboxed run and the benchmark), not one run's (the README's 180 s), the grader's
    stage (``running: the checks, then on a GPU the benchmark ...`` before it reports one)
    (the API's ``progress``; an older server without it: the status and the time waited)."""
    progress = submission.progress
    if submission.status == "running":
        if progress is not None and progress.elapsed_s is not None:
            limit = f" of the {progress.limit_s:g} s a whole grading may take" if progress.limit_s else ""
            doing = progress.stage_label or "the checks, then on a GPU the benchmark"
            return f"running: {doing} (attempt {submission.attempts}; {progress.elapsed_s:.0f} s{limit})"
        return f"running (attempt {submission.attempts}) ... {waited_s:.0f} s"
    place = (f" (number {progress.queue_position} in the queue)"
             if progress is not None and progress.queue_position else "")
    return f"queued{place} ... {waited_s:.0f} s"


#: Longest long-poll the CLI asks for (the server allows 60 s).
LONG_POLL_S = 30


def wait_for_verdict(client: ServiceClient, console: Console, submission_id: int, *,
                     timeout_s: float, poll_interval_s: float) -> SubmissionRead | None:
    """Wait for the submission's verdict (None after `timeout_s` seconds) with long-polls:
    ``GET /api/v1/submissions/{id}?wait=30`` answers as soon as the status changes, so the
    server sees about one request per status change or per 30 s instead of one a second.
    Two requests are at least `poll_interval_s` apart whatever the server does (a server
    without long-poll answers at once). Busy answers are retried by the client (Retry-After,
    jitter)."""
    started = time.monotonic()
    first = True
    with console.status("uploaded; asking for its place in the queue...") as progress:
        while True:
            elapsed = time.monotonic() - started
            # The first read answers at once, so the queue place shows from the first second
            # (a long-poll on a queued submission answered only when a worker took it, or
            # after 30 s: "waiting for a worker..." for 30 s, issue 38).
            wait = 0 if first else int(max(0, min(LONG_POLL_S, timeout_s - elapsed)))
            first = False
            asked = time.monotonic()
            submission = SubmissionRead.model_validate(client.get_json(
                f"/api/v1/submissions/{submission_id}", params={"wait": wait},
                timeout=wait + 30.0))
            if submission.status in TERMINAL:
                return submission
            elapsed = time.monotonic() - started
            progress.update(progress_line(submission, waited_s=elapsed))
            if elapsed >= timeout_s:
                return None
            time.sleep(max(0.0, poll_interval_s - (time.monotonic() - asked)))


# ----------------------------------------------------------------------------- submit


def submit(argv: list[str]) -> int:
    """`grader submit FILE`: upload, wait for the verdict, print it."""
    parser = argparse.ArgumentParser(
        prog="grader submit", description="Upload a file, wait for its grading and print "
        "the verdicts. Exit code: 0 passed, 1 failed, 2 error or refused, 3 no verdict in time.")
    parser.add_argument("file", type=Path)
    connection_arguments(parser)
    parser.add_argument("--assignment", default=None,
                        help="the assignment (default: the one whose function the file defines, "
                             f"else {DEFAULT_ASSIGNMENT})")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="least seconds between two status requests (long-polls)")
    parser.add_argument("--no-wait", action="store_true", help="upload and return")
    parser.add_argument("--quiet", action="store_true", help="print the verdict in one line")
    args = parser.parse_args(argv)

    console, errors = Console(quiet=args.quiet), Console(stderr=True)
    try:
        content = args.file.read_bytes()
    except OSError as exc:
        errors.print(f"[red]cannot read {escape(str(args.file))}: {escape(str(exc))}[/red]")
        return EXIT_ERROR
    # Never spend a submission on a file meant for another assignment.
    assignment, note = resolve_assignment(args.assignment, content.decode("utf-8", "replace"))
    if assignment is None:
        errors.print(f"[red]{escape(args.file.name)}: {escape(note)}; nothing was uploaded[/red]", highlight=False)
        return EXIT_ERROR
    if note:
        console.print(f"[dim]{escape(note)}[/dim]", highlight=False)
    args.assignment = assignment
    client = _client(args, errors)
    if client is None:
        return EXIT_ERROR
    with client:
        try:
            response = client.request(
                "POST", "/api/v1/submissions", expect=(202,),
                idempotency_key=new_idempotency_key(),
                files={"file": (args.file.name, content, "text/x-python")},
                data={"assignment": args.assignment})
            created = SubmissionCreated.model_validate(response.json())
            late = (f" [yellow](late: {created.late_text} after your due date, never "
                    "ranked)[/yellow]" if created.late else "")
            if created.slip_days_spent or created.slip_days_left:
                late += (f" [dim]slip days: {created.slip_days_spent} spent on "
                         f"{created.assignment}, {created.slip_days_left} left[/dim]")
            limit = (f", {created.submissions_used} of {created.max_submissions} used"
                     if created.max_submissions else "")
            due = f", due {_utc(created.due_at)}" if created.due_at else ""
            console.print(f"submission [bold]{created.id}[/bold] queued "
                          f"({created.assignment}{due}{limit}){late}")
            if args.no_wait:
                return EXIT_PENDING
            submission = wait_for_verdict(client, console, created.id, timeout_s=args.timeout,
                                          poll_interval_s=args.poll_interval)
        except ApiError as error:
            print_api_error(errors, error)
            return EXIT_ERROR
    if submission is None:
        errors.print(f"[red]no verdict after {args.timeout:g} s; check later with "
                     f"`grader status {created.id}`[/red]")
        return EXIT_PENDING
    if args.quiet:
        print(one_line(submission))
    else:
        render_submission(console, submission, client.server)
    return _exit_code(submission.status)


def one_line(submission: SubmissionRead) -> str:
    """``submission 7: failed: fix example_two_element first; 4/13 checks passed``: the
    summary's line (grader.report.document.summarize), what ``--quiet`` prints."""
    document = submission.result_document()
    line = submission.status
    if document is not None:
        try:
            line = ResultDocument.model_validate(document).summary.line
        except ValidationError:  # a server newer or older than this client
            pass
    return f"submission {submission.id}: {line}"


# ----------------------------------------------------------------------------- status


def status(argv: list[str]) -> int:
    """`grader status [ID]`: one submission in full (default: your latest)."""
    parser = argparse.ArgumentParser(
        prog="grader status", description="Print one of your submissions in full: verdicts, "
        "log, score, lateness (default: the latest). Exit code as `grader submit`.")
    parser.add_argument("submission_id", nargs="?", type=int)
    connection_arguments(parser)
    parser.add_argument("--wait", action="store_true", help="wait for the verdict")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--source", action="store_true",
                        help="print the stored source file instead")
    parser.add_argument("--json", action="store_true", help="print the API's JSON answer")
    args = parser.parse_args(argv)

    console, errors = Console(), Console(stderr=True)
    client = _client(args, errors)
    if client is None:
        return EXIT_ERROR
    with client:
        try:
            submission_id = args.submission_id
            if submission_id is None:
                latest = SubmissionList.model_validate(
                    client.get_json("/api/v1/submissions", params={"limit": 1})).submissions
                if not latest:
                    errors.print("you have no submission yet")
                    return EXIT_ERROR
                submission_id = latest[0].id
            if args.source:
                response = client.request("GET", f"/api/v1/submissions/{submission_id}/source")
                sys.stdout.write(response.text)
                return EXIT_PASSED
            submission = SubmissionRead.model_validate(
                client.get_json(f"/api/v1/submissions/{submission_id}"))
            if args.wait and submission.status not in TERMINAL:
                submission = wait_for_verdict(client, console, submission_id,
                                              timeout_s=args.timeout, poll_interval_s=1.0) \
                    or submission
        except ApiError as error:
            print_api_error(errors, error)
            return EXIT_ERROR
    if args.json:
        sys.stdout.write(submission.model_dump_json(indent=2) + "\n")
    else:
        render_submission(console, submission, client.server)
    return _exit_code(submission.status)


# ---------------------------------------------------------------------------- history


def history(argv: list[str]) -> int:
    """`grader history`: your assignments (dates, limits) and submissions."""
    parser = argparse.ArgumentParser(
        prog="grader history", description="List the course's assignments (due dates, "
        "submissions left) and your submissions, newest first.")
    connection_arguments(parser)
    parser.add_argument("--assignment", help="only this assignment's submissions")
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args(argv)

    console, errors = Console(), Console(stderr=True)
    client = _client(args, errors)
    if client is None:
        return EXIT_ERROR
    params: dict[str, Any] = {"limit": args.limit}
    if args.assignment:
        params["assignment"] = args.assignment
    with client:
        try:
            courses = AssignmentList.model_validate(client.get_json("/api/v1/assignments"))
            rows = SubmissionList.model_validate(
                client.get_json("/api/v1/submissions", params=params)).submissions
        except ApiError as error:
            print_api_error(errors, error)
            return EXIT_ERROR
    for assignment in courses.assignments:
        used = assignment.you.submissions_used if assignment.you else 0
        limit = f"{used} of {assignment.max_submissions}" if assignment.max_submissions else str(used)
        state = ("open" if assignment.is_open else "closed") + (
            ", past due" if assignment.is_past_due else "")
        you = assignment.you
        slip = (f"; slip days: {you.slip_days_left} you could spend here of "
                f"{you.slip_days_budget}" + (f" ({you.slip_days_spent} spent here)"
                                             if you.slip_days_spent else "")
                if you is not None and you.slip_days_budget else "")
        late_now = f"; an upload now would be {you.late_now}" if you and you.late_now else ""
        console.print(f"[bold]{assignment.name}[/bold]: due {_utc(assignment.due_at)} "
                      f"({state}, late policy {assignment.late_policy}); "
                      f"submissions used: {limit}; max {assignment.points.max_points:g} points"
                      f"{slip}{late_now}", highlight=False)
    table = Table(title="your submissions")
    for column in ("id", "assignment", "uploaded", "status", "score", "speedup", "notes"):
        table.add_column(column)
    for row in rows:
        late = (row.score.late_text if row.score is not None and row.score.late_text
                else "late")
        notes = ", ".join(filter(None, [late if row.late else "",
                                        "disqualified" if row.disqualified else ""]))
        table.add_row(
            str(row.id), row.assignment, _utc(row.created_at), row.status,
            "" if row.score is None else row.score.text,
            "" if row.headline_speedup is None else f"{row.headline_speedup:.3g}x", notes)
    console.print(table)
    return EXIT_PASSED


COMMANDS = {"submit": submit, "status": status, "history": history}
