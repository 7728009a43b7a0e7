"""Staff commands over HTTP: ``grader course SUBCOMMAND`` (a TA's or an instructor's token;
``--server`` / ``--token`` or GRADER_SERVER / GRADER_TOKEN, as for students).

    grader course show [NAME]                  assignments and their settings
    grader course set NAME [--opens T] [--due T [--confirm-past-due]]
                      [--late-policy refuse|mark_late|penalty]
                      [--late-percent P --late-unit hour|day] [--late-cap N|none]
                      [--late-after-cap zero|refuse] [--counting best|latest]
                      [--max-submissions N|none] [--rate-limit N/SECONDS|default]
                      [--leaderboard visible|hidden] [--correctness-points P]
                      [--check-points "autograd_fp32:20,..."|default]
                      [--speed-points "1.0:10,1.5:20"|none]            (instructor)
    grader course slip-days STUDENT_ID [--set N --reason TEXT]         (set: instructor)
    grader course import-roster ROSTER.csv [--output tokens.csv]       (instructor)
    grader course add-student NAME [--email E] [--id ID]               (instructor)
    grader course add-staff NAME --role ta|instructor                  (instructor)
    grader course rotate-token student|staff ID                        (instructor)
    grader course regrade NAME [--student ID] [--status S] [--grader-version V]
                      [--submission ID ...]                            (create; prints id)
    grader course regrade-show ID | regrade-apply ID | regrade-discard ID
    grader course disqualify SUBMISSION --reason TEXT | restore SUBMISSION [--reason TEXT]
    grader course extend NAME STUDENT_ID (--due T | --days N) --reason TEXT  (instructor)
    grader course revoke-extension NAME STUDENT_ID                     (instructor)
    grader course extensions NAME
    grader course import-extensions NAME EXTENSIONS.csv                (instructor)
    grader course final-run NAME [--start]                             (start: instructor)
    grader course leaderboard NAME
    grader course export-lms NAME --output grades.csv
    grader course export-canvas --output grades.csv | export-moodle --output grades.csv
                                                       (every assignment in one file)
    grader course gradescope-class NAME --output results.json     (every student)
    grader course gradescope SUBMISSION --output results.json
    grader course audit [--limit N]
    grader course similarity NAME [--run [--threshold T]] [--min-similarity M]
                      (queue a review, or list the latest review's pairs)
    grader course similarity-review NAME PAIR [--note TEXT] [--clear]
    grader course similarity-sources NAME
    grader course similarity-add-source NAME FILE --name N [--origin URL]
    grader course similarity-remove-source NAME SOURCE_ID
    grader course export-similarity NAME --output pairs.csv

Times are ISO 8601 with a zone (``2026-12-15T23:59:00Z``). Exit code 0, or 2 when the
server refuses (the error's code is printed).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from api.schemas import (
    AssignmentList,
    AssignmentRead,
    AuditLog,
    ExtensionList,
    ExtensionRead,
    FinalRunRead,
    Leaderboard,
    RegradeRead,
    SimilarityOverview,
    SimilarityRunRead,
    SimilaritySide,
    SimilaritySourceList,
    SlipDaysRead,
    TokenIssued,
)
from client.cli import _minute_or_second, connection_arguments, print_api_error
from client.http import (
    ApiError,
    ServiceClient,
    new_idempotency_key,
    resolve_server,
    resolve_token,
)

EXIT_OK, EXIT_ERROR = 0, 2



def _add_data_row(table: Table, *cells: object) -> None:
    """Add a row whose cells are data, never Rich markup (names, reasons and messages come
    from people and submissions: ``[/]`` in one would raise MarkupError)."""
    table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells))

def _moment(text: str) -> str | None:
    if text.lower() in {"none", "null", ""}:
        return None
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; append Z for UTC")
    return moment.isoformat()


def _limit(text: str) -> int | None:
    return None if text.lower() in {"none", "null"} else int(text)


def _late_cap(text: str) -> float | None:
    return None if text.lower() in {"none", "null"} else float(text)


def _check_points(text: str) -> dict[str, float] | None:
    """``name:points,...`` -> {name: points}; ``default`` -> None (the folder's points)."""
    if text.lower() in {"default", "none", ""}:
        return None
    points = {}
    for pair in text.split(","):
        name, _, value = pair.strip().partition(":")
        try:
            points[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not name:points: {pair!r}") from None
    return points


def _thresholds(text: str) -> list[dict[str, float]]:
    if text.lower() in {"none", ""}:
        return []
    pairs = []
    for item in text.split(","):
        speedup, _, points = item.partition(":")
        pairs.append({"min_speedup": float(speedup), "points": float(points)})
    return pairs


def _utc(moment: dt.datetime | None) -> str:  # as client/cli.py writes a time
    return "-" if moment is None else _minute_or_second(moment)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", help="default: $GRADER_SERVER, else http://127.0.0.1:8000")
    parser.add_argument("--token", help="a TA's or an instructor's token (default: $GRADER_TOKEN)")
    parser.add_argument("--json", action="store_true",
                        help="print only the API's JSON answer (for scripts)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    show = commands.add_parser("show", help="assignments and their settings")
    show.add_argument("name", nargs="?")

    change = commands.add_parser("set", help="change an assignment's settings (instructor)")
    change.add_argument("name")
    # SUPPRESS: an option not given leaves no attribute, so "none" (clear) differs from absent.
    change.add_argument("--opens", type=_moment, default=argparse.SUPPRESS,
                        help="open date, e.g. 2026-12-01T00:00:00Z; none")
    change.add_argument("--due", type=_moment, default=argparse.SUPPRESS,
                        help="due date, e.g. 2026-12-15T23:59:00Z; none")
    change.add_argument("--confirm-past-due", action="store_true",
                        help="set a due date that has already passed")
    change.add_argument("--late-policy", choices=["refuse", "mark_late", "penalty"])
    change.add_argument("--late-percent", type=float, help="penalty per --late-unit started")
    change.add_argument("--late-unit", choices=["hour", "day"])
    change.add_argument("--late-cap", type=_late_cap, default=argparse.SUPPRESS,
                        help="units late after which --late-after-cap applies; none")
    change.add_argument("--late-after-cap", choices=["zero", "refuse"])
    change.add_argument("--counting", choices=["best", "latest"],
                        help="which submission gives a student's grade")
    change.add_argument("--check-points", type=_check_points, default=argparse.SUPPRESS,
                        help='points per check "name:points,..." (every check); default: '
                             "the assignment folder's points")
    change.add_argument("--max-submissions", type=_limit, default=argparse.SUPPRESS,
                        help="N, or none")
    change.add_argument("--rate-limit", help="N/SECONDS (e.g. 20/3600), or default")
    change.add_argument("--leaderboard", choices=["visible", "hidden"])
    change.add_argument("--correctness-points", type=float)
    change.add_argument("--speed-points", type=_thresholds,
                        help='thresholds "min_speedup:points,...", e.g. "1.0:10,1.5:20"; none')

    slip = commands.add_parser("slip-days", help="a student's slip days (show, or --set)")
    slip.add_argument("student_id", type=int)
    slip.add_argument("--set", type=int, dest="days", help="the new budget for the term")
    slip.add_argument("--reason", help="why (with --set; audited)")

    roster = commands.add_parser("import-roster", help="create students from a CSV (instructor)")
    roster.add_argument("file", type=Path)
    roster.add_argument("--output", type=Path, help="write the tokens CSV here (else stdout)")

    student = commands.add_parser("add-student", help="create one student and print their "
                                  "token (instructor; safe to retry)")
    student.add_argument("name")
    student.add_argument("--email")
    student.add_argument("--id", dest="external_id", help="the institution's student id")

    extend = commands.add_parser("extend", help="grant or replace a student's extension "
                                 "(instructor; audited)")
    extend.add_argument("name")
    extend.add_argument("student_id", type=int)
    terms = extend.add_mutually_exclusive_group(required=True)
    terms.add_argument("--due", type=_moment, help="the student's own due date, e.g. "
                       "2026-12-18T23:59:00Z")
    terms.add_argument("--days", type=float, help="extra days past the class-wide due date")
    extend.add_argument("--reason", required=True)
    revoke = commands.add_parser("revoke-extension", help="revoke a student's extension "
                                 "(instructor; audited)")
    revoke.add_argument("name")
    revoke.add_argument("student_id", type=int)
    listing = commands.add_parser("extensions", help="the extensions of an assignment")
    listing.add_argument("name")
    imported = commands.add_parser("import-extensions", help="grant extensions from a CSV "
                                   "(student_id|email|id|name, due_at|extra_days, reason)")
    imported.add_argument("name")
    imported.add_argument("file", type=Path)

    staff = commands.add_parser("add-staff", help="create a staff account (instructor)")
    staff.add_argument("name")
    staff.add_argument("--role", choices=["ta", "instructor"], required=True)

    rotate = commands.add_parser("rotate-token", help="new token for a student or staff member")
    rotate.add_argument("kind", choices=["student", "staff"])
    rotate.add_argument("id", type=int)

    regrade = commands.add_parser("regrade", help="re-run submissions (preview first)")
    regrade.add_argument("name", help="the assignment")
    regrade.add_argument("--student", type=int)
    regrade.add_argument("--status", choices=["passed", "failed", "error"])
    regrade.add_argument("--grader-version")
    regrade.add_argument("--submission", type=int, action="append", dest="submissions")
    for verb in ("show", "apply", "discard"):
        sub = commands.add_parser(f"regrade-{verb}", help=f"{verb} a regrade batch")
        sub.add_argument("id", type=int)

    disqualify = commands.add_parser("disqualify", help="disqualify a submission")
    disqualify.add_argument("submission", type=int)
    disqualify.add_argument("--reason", required=True, help="shown to the student")
    restore = commands.add_parser("restore", help="lift a disqualification")
    restore.add_argument("submission", type=int)
    restore.add_argument("--reason")

    final = commands.add_parser("final-run", help="the final ranking run (show, or --start)")
    final.add_argument("name")
    final.add_argument("--start", action="store_true", help="start it (instructor, after the due date)")

    board = commands.add_parser("leaderboard", help="the ranking")
    board.add_argument("name")

    lms = commands.add_parser("export-lms", help="gradebook CSV, one row per student")
    lms.add_argument("name")
    lms.add_argument("--output", type=Path, required=True)
    lms.add_argument("--zeros", action="store_true",
                     help="0 for students who never submitted (default: a blank cell)")

    for kind in ("canvas", "moodle"):
        gradebook = commands.add_parser(f"export-{kind}", help=f"every assignment's grades in "
                                        f"one CSV for {kind.title()}'s gradebook import")
        gradebook.add_argument("--output", type=Path, required=True)
        gradebook.add_argument("--zeros", action="store_true",
                               help="0 for students who never submitted (default: a blank cell)")
    everyone = commands.add_parser("gradescope-class", help="every student's Gradescope "
                                   "results.json of one assignment")
    everyone.add_argument("name")
    everyone.add_argument("--output", type=Path, required=True)
    gradescope = commands.add_parser("gradescope", help="one submission as Gradescope results.json")
    gradescope.add_argument("submission", type=int)
    gradescope.add_argument("--output", type=Path, required=True)

    audit = commands.add_parser("audit", help="the log of staff actions")
    audit.add_argument("--limit", type=int, default=50)

    similar = commands.add_parser("similarity", help="similarity review: list the latest "
                                  "review's pairs, or queue a review with --run")
    similar.add_argument("name")
    similar.add_argument("--run", action="store_true", help="queue a review (a worker runs it)")
    similar.add_argument("--threshold", type=float, help="with --run: pairs at or above it (0..1]")
    similar.add_argument("--min-similarity", type=float, help="list pairs at or above it")
    review = commands.add_parser("similarity-review", help="mark a pair reviewed (decides nothing)")
    review.add_argument("name")
    review.add_argument("pair", type=int)
    review.add_argument("--note")
    review.add_argument("--clear", action="store_true", help="clear the mark instead")
    known = commands.add_parser("similarity-sources", help="the known sources of an assignment")
    known.add_argument("name")
    add_known = commands.add_parser("similarity-add-source", help="add a public kernel that "
                                    "every submission is compared with")
    add_known.add_argument("name")
    add_known.add_argument("file", type=Path)
    add_known.add_argument("--name", dest="source_name", required=True)
    add_known.add_argument("--origin", help="where it comes from (a URL; never fetched)")
    remove_known = commands.add_parser("similarity-remove-source", help="remove a public source")
    remove_known.add_argument("name")
    remove_known.add_argument("source_id", type=int)
    export_similar = commands.add_parser("export-similarity", help="the latest review's pairs as CSV")
    export_similar.add_argument("name")
    export_similar.add_argument("--output", type=Path, required=True)
    export_similar.add_argument("--min-similarity", type=float)
    # The connection options are accepted after the subcommand too (as `grader submit`
    # takes them): suppressed defaults keep a value given before it.
    for sub in commands.choices.values():
        connection_arguments(sub, suppress=True)
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                         help="print only the API's JSON answer (for scripts)")
    return parser


def main(argv: list[str]) -> int:
    """`grader course ...`; returns the exit code."""
    args = build_parser().parse_args(argv)
    # With --json, standard output carries only the API's JSON answer.
    console = Console(file=io.StringIO()) if args.json else Console()
    errors = Console(stderr=True)
    token = resolve_token(args.token)
    if token is None:
        errors.print("[red]no token: pass --token T or set GRADER_TOKEN[/red]")
        return EXIT_ERROR
    with ServiceClient(resolve_server(args.server), token) as client:
        try:
            answer = HANDLERS[args.command](client, args, console)
        except ApiError as error:
            print_api_error(errors, error)
            return EXIT_ERROR
    if args.json and answer is not None:
        sys.stdout.write(json.dumps(answer, indent=2, default=str) + "\n")
    return EXIT_OK


# ---------------------------------------------------------------------------- handlers


def _print_assignment(console: Console, a: AssignmentRead) -> None:
    thresholds = ", ".join(f">= {t.min_speedup:g}x: {t.points:g}" for t in a.points.speed_points)
    console.print(
        f"[bold]{a.name}[/bold] ({a.title})\n"
        f"  opens {_utc(a.opens_at)}, due {_utc(a.due_at)}, late policy {a.late_policy}"
        f" ({'open' if a.is_open else 'closed'})\n"
        f"  max submissions {a.max_submissions or 'unlimited'}, rate limit "
        f"{a.rate_limit_submissions} per {a.rate_limit_window_s:g} s, leaderboard "
        f"{'visible' if a.leaderboard_visible else 'hidden'} to students\n"
        f"  points: correctness {a.points.correctness_points:g} + speed "
        f"[{thresholds or 'none'}] = max {a.points.max_points:g}; {a.points.counting} "
        "submission counts"
        + (f"\n  late curve: {a.late_curve.percent:g}% per {a.late_curve.unit}"
           + (f", past {a.late_curve.cap:g} {a.late_curve.unit}(s): {a.late_curve.after_cap}"
              if a.late_curve.cap is not None else ", no cap")
           if a.late_curve else "")
        + ("\n  check points" + (" (staff's)" if a.points.check_points_overridden else "")
           + ":\n" + textwrap.fill(", ".join(f"{c.name} {c.points:g}"
                                             for c in a.points.check_points),
                                   width=88, initial_indent="    ", subsequent_indent="    ")
           if a.points.check_points else "")
        + (f"\n  final run {a.final_run.id} ({'finished' if a.final_run.finished else 'running'})"
           if a.final_run else ""), highlight=False)


def _show(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    if args.name:
        data = client.get_json(f"/api/v1/assignments/{args.name}")
        _print_assignment(console, AssignmentRead.model_validate(data))
        return data
    data = client.get_json("/api/v1/assignments")
    for assignment in AssignmentList.model_validate(data).assignments:
        _print_assignment(console, assignment)
    return data


def _set(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    body: dict[str, Any] = {}
    for option, field in (("opens", "opens_at"), ("due", "due_at"),
                          ("max_submissions", "max_submissions")):
        if hasattr(args, option):
            body[field] = getattr(args, option)
    if args.late_policy:
        body["late_policy"] = args.late_policy
    if args.rate_limit:
        if args.rate_limit == "default":
            body |= {"rate_limit_submissions": None, "rate_limit_window_s": None}
        else:
            count, _, window = args.rate_limit.partition("/")
            body |= {"rate_limit_submissions": int(count), "rate_limit_window_s": float(window)}
    if args.leaderboard:
        body["leaderboard_visible"] = args.leaderboard == "visible"
    for option in ("late_percent", "late_unit", "late_after_cap", "counting"):
        if getattr(args, option) is not None:
            body[option] = getattr(args, option)
    if hasattr(args, "late_cap"):
        body["late_cap"] = args.late_cap
    if hasattr(args, "check_points"):
        body["check_points"] = args.check_points
    if args.correctness_points is not None:
        body["correctness_points"] = args.correctness_points
    if args.speed_points is not None:
        body["speed_points"] = args.speed_points
    data = client.request("PATCH", f"/api/v1/assignments/{args.name}", json=body,
                          params={"confirm_past_due": "true"} if args.confirm_past_due
                          else None).json()
    _print_assignment(console, AssignmentRead.model_validate(data))
    return data


def _slip_days(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    path = f"/api/v1/students/{args.student_id}/slip-days"
    if args.days is not None:
        data = client.request("PUT", path, json={"days": args.days,
                                                 "reason": args.reason or ""}).json()
    else:
        data = client.get_json(path)
    held = SlipDaysRead.model_validate(data)
    spent = ", ".join(f"{s.days} on {s.assignment} (submission {s.submission_id})"
                      for s in held.spent)
    console.print(f"student {held.student_id}: {held.left} of {held.budget} slip day(s) left"
                  + (f"; spent {spent}" if spent else ""), highlight=False, markup=False)
    return data


def _import_roster(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    text = client.request("POST", "/api/v1/students/import", params={"format": "csv"},
                          content=args.file.read_bytes(),
                          headers={"Content-Type": "text/csv"}).text
    created = sum(1 for row in csv.DictReader(io.StringIO(text)) if row["token"])
    if args.output:
        args.output.write_text(text)
        args.output.chmod(0o600)
        console.print(f"{created} student(s) created; tokens written to {args.output} "
                      "(hand each student their line; the tokens are not stored)")
    else:
        sys.stdout.write(text)
    return None


def _add_student(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    # One Idempotency-Key for this student, reused by every retry: a 201 lost on the way back
    # is retried and answered with the same student and token, never a 409.
    data = client.request("POST", "/api/v1/students", expect=(201,),
                          idempotency_key=new_idempotency_key(),
                          json={"name": args.name, "email": args.email,
                                "external_id": args.external_id}).json()
    console.print(data["token"], highlight=False)
    console.print(f"[dim]student {data['id']} ({escape(data['name'])}) created; give them the token "
                  "above (it is not stored)[/dim]")
    return data


def _add_staff(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.request("POST", "/api/v1/staff", expect=(201,),
                          json={"name": args.name, "role": args.role}).json()
    console.print(data["token"], highlight=False)
    console.print(f"[dim]{data['role']} {data['id']} ({escape(data['name'])}) created; the token "
                  "above is shown once[/dim]")
    return data


def _rotate(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    path = "students" if args.kind == "student" else "staff"
    issued = TokenIssued.model_validate(
        client.request("POST", f"/api/v1/{path}/{args.id}/token").json())
    console.print(issued.token, highlight=False)
    console.print(f"[dim]{issued.kind} {issued.id} ({escape(issued.name)}): new token above; the old "
                  "one no longer works[/dim]")
    return issued.model_dump()


def _print_regrade(console: Console, regrade: RegradeRead) -> None:
    console.print(f"regrade [bold]{regrade.id}[/bold] of {regrade.assignment}: {regrade.state}, "
                  f"{regrade.total} submission(s), {regrade.pending} pending, "
                  f"{regrade.changed} changed")
    table = Table()
    for column in ("submission", "student", "before", "after", "score before", "score after",
                   "points change", "grader before", "grader after"):
        table.add_column(column)
    for row in regrade.rows:
        before, after = row.before, row.after
        _add_data_row(table,
            str(row.submission_id), row.student_name,
            before.status if before else "-", after.status + (" *" if row.verdict_changed else ""),
            before.score.text if before and before.score else "-",
            after.score.text if after.score else "-",
            "-" if row.score_delta is None else f"{row.score_delta:+g}",
            (before.grader_version or "-") if before else "-", after.grader_version or "-")
    console.print(table)


def _regrade(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    body = {"assignment": args.name, "student_id": args.student, "status": args.status,
            "grader_version": args.grader_version, "submission_ids": args.submissions}
    data = client.request("POST", "/api/v1/regrades", expect=(201,),
                          json={k: v for k, v in body.items() if v is not None}).json()
    _print_regrade(console, RegradeRead.model_validate(data))
    console.print(f"preview: grader course regrade-show {data['id']}; then regrade-apply or "
                  "regrade-discard")
    return data


def _regrade_verb(verb: str):  # noqa: ANN202
    def handler(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
        if verb == "show":
            data = client.get_json(f"/api/v1/regrades/{args.id}")
        else:
            data = client.request("POST", f"/api/v1/regrades/{args.id}/{verb}").json()
        _print_regrade(console, RegradeRead.model_validate(data))
        return data
    return handler


def _disqualify(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.request("POST", f"/api/v1/submissions/{args.submission}/disqualify",
                          json={"reason": args.reason}).json()
    console.print(f"submission {args.submission} disqualified: {args.reason}", markup=False, highlight=False)
    return data


def _restore(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.request("POST", f"/api/v1/submissions/{args.submission}/restore",
                          json={"reason": args.reason}).json()
    console.print(f"submission {args.submission} restored")
    return data


def _final_run(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    if args.start:
        data = client.request("POST", f"/api/v1/assignments/{args.name}/final-run",
                              expect=(202,)).json()
    else:
        data = client.get_json(f"/api/v1/assignments/{args.name}/final-run")
    run = FinalRunRead.model_validate(data)
    console.print(f"final run {run.id} of {run.assignment} (started {_utc(run.created_at)} by "
                  f"{run.created_by}): {run.students} student(s), {run.pending} pending", markup=False)
    table = Table()
    for column in ("student", "submission", "status", "speedup", "reason"):
        table.add_column(column)
    for row in run.rows:
        _add_data_row(table, row.student_name, str(row.submission_id), row.status,
                      "" if row.headline_speedup is None else f"{row.headline_speedup:.4g}",
                      row.reason or "")
    console.print(table)
    return data


def _leaderboard(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.get_json("/api/v1/leaderboard", params={"assignment": args.name})
    board = Leaderboard.model_validate(data)
    table = Table(title=f"{board.assignment} ({board.phase})")
    for column in ("rank", "student", "submission", "speedup", "score", "reason"):
        table.add_column(column)
    for row in board.rows:
        _add_data_row(table, str(row.rank or "-"), row.student_name or "", str(row.submission_id or ""),
                      "" if row.headline_speedup is None else f"{row.headline_speedup:.4g}",
                      "" if row.score is None else row.score.text, row.reason or "")
    console.print(table)
    running = board.final_run_running
    if running is not None:
        console.print(f"final run {running.id} is grading: {running.graded} of {running.total} done; "
                      f"the board is {board.phase} until it finishes", markup=False)
    return data


def _export_warning(response: Any, console: Console) -> None:
    """The service's warning about rows an LMS cannot match (X-Export-Warning), as data."""
    warning = response.headers.get("x-export-warning")
    if warning:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


def _export_lms(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    response = client.request("GET", f"/api/v1/assignments/{args.name}/export/lms",
                              params={"zeros": "true"} if args.zeros else None)
    args.output.write_text(response.text)
    console.print(f"{len(response.text.splitlines()) - 1} student row(s) written to {args.output}")
    _export_warning(response, console)
    return None


def _export_gradebook(kind: str):  # noqa: ANN202 - a handler
    def handler(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
        response = client.request("GET", f"/api/v1/assignments/export/{kind}",
                                  params={"zeros": "true"} if args.zeros else None)
        args.output.write_text(response.text)
        console.print(f"{kind.title()} gradebook written to {args.output}")
        _export_warning(response, console)
        return None
    return handler


def _gradescope_class(client: ServiceClient, args: argparse.Namespace,
                      console: Console) -> Any:
    data = client.get_json(f"/api/v1/assignments/{args.name}/export/gradescope")
    args.output.write_text(json.dumps(data, indent=2))
    console.print(f"Gradescope results of {len(data['students'])} student(s) written to "
                  f"{args.output}")
    return None


def _gradescope(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.get_json(f"/api/v1/submissions/{args.submission}/gradescope")
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    console.print(f"Gradescope results of submission {args.submission} (score "
                  f"{data['score']:g}) written to {args.output}")
    return None


def _print_extensions(console: Console, title: str, rows: list[ExtensionRead]) -> None:
    table = Table(title=title)
    for column in ("student", "due in force", "terms", "reason", "granted by"):
        table.add_column(column, overflow="fold")
    for e in rows:
        terms = f"until {_utc(e.due_at)}" if e.due_at else f"+{e.extra_days:g} days"
        _add_data_row(table, f"{e.student_name} ({e.student_id})", _utc(e.due_in_force), terms,
                      e.reason, e.granted_by)
    console.print(table)


def _extend(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    body = {"due_at": args.due, "extra_days": args.days, "reason": args.reason}
    data = client.request("PUT", f"/api/v1/assignments/{args.name}/extensions/"
                          f"{args.student_id}", json=body).json()
    extension = ExtensionRead.model_validate(data)
    console.print(f"{extension.student_name} ({extension.student_id}) is now due "
                  f"{_utc(extension.due_in_force)} for {args.name}", markup=False, highlight=False)
    return data


def _revoke_extension(client: ServiceClient, args: argparse.Namespace,
                      console: Console) -> Any:
    client.request("DELETE", f"/api/v1/assignments/{args.name}/extensions/{args.student_id}",
                   expect=(204,))
    console.print(f"extension of student {args.student_id} for {args.name} revoked; the "
                  "class-wide due date applies", markup=False, highlight=False)
    return None


def _extensions(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.get_json(f"/api/v1/assignments/{args.name}/extensions")
    _print_extensions(console, f"{args.name} extensions",
                      ExtensionList.model_validate(data).extensions)
    return data


def _import_extensions(client: ServiceClient, args: argparse.Namespace,
                       console: Console) -> Any:
    data = client.request("POST", f"/api/v1/assignments/{args.name}/extensions/import",
                          content=args.file.read_bytes(),
                          headers={"Content-Type": "text/csv"}).json()
    _print_extensions(console, f"{args.name}: extensions granted",
                      ExtensionList.model_validate(data).extensions)
    return data


def _audit(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.get_json("/api/v1/audit", params={"limit": args.limit})
    table = Table(title="audit log")
    for column in ("when", "who", "action", "target", "details"):
        table.add_column(column, overflow="fold")
    for event in AuditLog.model_validate(data).events:
        _add_data_row(table, _utc(event.created_at), f"{event.actor_name} ({event.actor_kind})",
                      event.action, f"{event.target_type or ''} {event.target_id or ''}",
                      json.dumps(event.details) if event.details else "")
    console.print(table)
    return data


def _side(side: SimilaritySide) -> str:
    if side.kind == "submission":
        latest = " (latest upload)" if side.compared_as == "latest_upload" else ""
        return f"#{side.submission_id} {escape(side.student_name or '')}{latest}"
    return f"source: {escape(side.source_name or '')}"


def _similarity(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    base = f"/api/v1/assignments/{args.name}/similarity"
    if args.run:
        data = client.request("POST", base, json={"threshold": args.threshold},
                              expect=(202,)).json()
        run = SimilarityRunRead.model_validate(data)
        console.print(f"similarity review {run.id} of {run.assignment} queued (threshold "
                      f"{run.threshold:g}); a worker runs it when no grading waits")
        return data
    params = {} if args.min_similarity is None else {"min_similarity": args.min_similarity}
    data = client.get_json(base, params=params)
    view = SimilarityOverview.model_validate(data)
    if view.pending is not None:
        console.print(f"review {view.pending.id}: {view.pending.status}"
                      + (f" ({escape(view.pending.error_message)})" if view.pending.error_message else ""))
    if view.run is None:
        console.print(f"no finished similarity review of {view.assignment} yet")
        return data
    run = view.run
    console.print(f"review {run.id} ({run.tool}, finished {_utc(run.finished_at)}): "
                  f"{run.submissions_compared} submissions, {run.sources_compared} known sources, "
                  f"{run.pairs_compared} pairs in {run.duration_s or 0:.2f} s")
    table = Table(title=f"{view.assignment}: pairs at or above {view.min_similarity:g}")
    for column in ("pair", "similarity", "submission", "compared with", "reviewed"):
        table.add_column(column)
    for pair in view.pairs:
        table.add_row(str(pair.id), f"{pair.similarity:.0%}", _side(pair.left), _side(pair.right),
                      escape(pair.reviewed_by or "") if pair.reviewed_at else "")
    console.print(table)
    return data


def _similarity_review(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.request("POST", f"/api/v1/assignments/{args.name}/similarity/pairs/{args.pair}/review",
                          json={"reviewed": not args.clear, "note": args.note}).json()
    console.print(f"pair {args.pair} {'mark cleared' if args.clear else 'marked reviewed'}")
    return data


def _similarity_sources(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    data = client.get_json(f"/api/v1/assignments/{args.name}/similarity/sources")
    table = Table(title=f"{args.name}: known sources")
    for column in ("id", "kind", "name", "origin", "bytes", "added"):
        table.add_column(column, overflow="fold")
    for source in SimilaritySourceList.model_validate(data).sources:
        table.add_row(str(source.id), source.kind, escape(source.name), escape(source.origin or ""),
                      str(source.bytes), f"{_utc(source.added_at)} by {escape(source.added_by)}")
    console.print(table)
    return data


def _similarity_add_source(client: ServiceClient, args: argparse.Namespace,
                           console: Console) -> Any:
    data = client.request("POST", f"/api/v1/assignments/{args.name}/similarity/sources",
                          json={"name": args.source_name, "origin": args.origin,
                                "text": args.file.read_text(encoding="utf-8")},
                          expect=(201,)).json()
    console.print(f"source {data['id']} ({escape(data['name'])}) added to {args.name}; the next "
                  "review compares every submission with it")
    return data


def _similarity_remove_source(client: ServiceClient, args: argparse.Namespace,
                              console: Console) -> Any:
    client.request("DELETE", f"/api/v1/assignments/{args.name}/similarity/sources/{args.source_id}",
                   expect=(204,))
    console.print(f"source {args.source_id} removed from {args.name}")
    return None


def _export_similarity(client: ServiceClient, args: argparse.Namespace, console: Console) -> Any:
    params = {} if args.min_similarity is None else {"min_similarity": args.min_similarity}
    text = client.request("GET", f"/api/v1/assignments/{args.name}/similarity/export",
                          params=params).text
    args.output.write_text(text)
    console.print(f"{len(text.splitlines()) - 1} pair(s) written to {args.output}")
    return None


HANDLERS = {
    "show": _show, "set": _set, "slip-days": _slip_days, "import-roster": _import_roster,
    "add-student": _add_student, "add-staff": _add_staff,
    "rotate-token": _rotate, "regrade": _regrade, "regrade-show": _regrade_verb("show"),
    "regrade-apply": _regrade_verb("apply"), "regrade-discard": _regrade_verb("discard"),
    "disqualify": _disqualify, "restore": _restore, "final-run": _final_run,
    "extend": _extend, "revoke-extension": _revoke_extension, "extensions": _extensions,
    "import-extensions": _import_extensions,
    "leaderboard": _leaderboard, "export-lms": _export_lms, "gradescope": _gradescope,
    "export-canvas": _export_gradebook("canvas"), "export-moodle": _export_gradebook("moodle"),
    "gradescope-class": _gradescope_class,
    "audit": _audit,
    "similarity": _similarity, "similarity-review": _similarity_review,
    "similarity-sources": _similarity_sources, "similarity-add-source": _similarity_add_source,
    "similarity-remove-source": _similarity_remove_source,
    "export-similarity": _export_similarity,
}
