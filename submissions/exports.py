"""Grade exports, every number from the one grade (submissions/scoring.py, through the
board of submissions/standings.py): the LMS CSV of one assignment, the Canvas and Moodle
gradebook CSVs of every assignment, and Gradescope's autograder ``results.json`` for one
submission or for the whole class.

LMS CSV (docs/course.md, "Exports"): every student is a row, those without a submission
included; ``score`` is the student's grade (late and disqualified work: 0, with what it
earned in ``late_score`` and ``reason``). A student who never submitted gets a blank grade
(not 0: "no grade yet" is not a failing grade) unless staff ask for zeros (``zeros``). A row
without an e-mail and a roster id cannot be matched by an LMS's import: `unmatchable`
lists them, and every export answer says how many (the routes' ``X-Export-Warning``).

Gradescope: the format of Gradescope's autograder specification ("Output format" of
https://gradescope-autograders.readthedocs.io/en/latest/specs/): a top-level ``score`` (which
Gradescope uses instead of the sum of the tests' scores), ``tests`` with ``name``, ``score``,
``max_score``, ``status``, ``output`` and ``visibility``, plus ``output``, ``visibility``,
``execution_time`` (seconds), ``leaderboard`` and ``extra_data``.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from grader.manifest import MANIFESTS
from submissions import audit, grades, repository, standings
from submissions.csv_cells import SafeCsvWriter, safe_cell
from submissions.lateness import describe_duration
from submissions.models import Student, Submission, SubmissionStatus
from submissions.scoring import WITHHELD_LATE, ZERO, Grade, PointsPolicy, Score

LMS_COLUMNS = (
    "student_id", "name", "email", "id", "submissions", "late_submissions",
    "disqualified_submissions", "status", "submission_id", "correctness_points",
    "speed_points", "score", "max_score", "ranked_speedup", "rank", "ranking", "reason",
    "late_submission_id", "late_score", "graded_submission_id", "late_by", "late_by_s",
    "late_penalty_percent", "slip_days", "grade",
)


def _points(value: float) -> str:
    return f"{value:g}"


def unmatchable(session: Session) -> list[Student]:
    """The enrolled students an LMS's gradebook import cannot match to one of its users:
    no e-mail and no roster id (Canvas matches on SIS User ID or SIS Login ID, Moodle on
    the e-mail or ID number; a name alone is not unique). Id order."""
    return [s for s in repository.list_students(session) if not s.email and not s.external_id]


def unmatchable_warning(students: list[Student]) -> str | None:
    """One ASCII line for a response header (and the exports page) naming the rows an LMS
    cannot match by student id, or None when every row can be matched."""
    if not students:
        return None
    ids = ", ".join(str(s.id) for s in students[:50])
    more = f" and {len(students) - 50} more" if len(students) > 50 else ""
    return (f"{len(students)} student row(s) have no e-mail and no roster id, so an LMS "
            f"cannot match them: student ids {ids}{more}; add one on the roster")


def _no_submission(standing: standings.Standing | None) -> bool:
    return standing is None or standing.status == standings.NO_SUBMISSION


def lms_csv(session: Session, *, assignment: str, actor: audit.Actor, now: dt.datetime,
            zeros: bool = False) -> str:
    """The LMS gradebook CSV of `assignment` (LMS_COLUMNS, one row per student in id order);
    the export is recorded in the audit log. Every number is the board's grade
    (submissions/standings.py, submissions/scoring.py): what the leaderboard, the pages and
    the CLI show.

    ``status`` is ``ranked``, ``unranked`` (late, disqualified, or the final run's reason;
    ``reason`` says which), ``no_passing_submission`` or ``no_submission``; ``ranking`` is
    ``provisional`` or ``final``; ``late_score`` is what the best late passing submission
    earned before the late policy. A student without a submission has blank points and
    score unless `zeros` (then 0). The course-policy columns describe the graded
    submission (best or latest: ``graded_submission_id``): ``late_by`` to the second
    ("1 day 2 h"), ``late_by_s``, the late curve's ``late_penalty_percent``, the
    ``slip_days`` spent on it, and ``grade`` as every page writes it.

    Raises:
        UnknownAssignment: not in the manifest.
    """
    board = standings.board(session, assignment=assignment, now=now)
    policy = board.rules.policy
    buffer = io.StringIO()
    writer = SafeCsvWriter(buffer)
    writer.writerow(LMS_COLUMNS)
    students = repository.list_students(session)
    for student in students:
        standing = board.of_student(student.id)
        assert standing is not None  # noqa: S101 - the board has every enrolled student
        grade = standing.grade
        parts = grade.counted if grade is not None else ZERO
        late = grade is not None and grade.withheld == WITHHELD_LATE
        blank = _no_submission(standing) and not zeros
        row: dict[str, Any] = {
            "student_id": student.id, "name": student.name, "email": student.email or "",
            "id": student.external_id or "",
            "submissions": standing.counts.total, "late_submissions": standing.counts.late,
            "disqualified_submissions": standing.counts.disqualified,
            "status": standing.status, "submission_id": standing.submission_id or "",
            "correctness_points": "" if blank else _points(parts.correctness),
            "speed_points": "" if blank else _points(parts.speed),
            "score": "" if blank else _points(parts.total),
            "max_score": _points(policy.max_total),
            "ranked_speedup": "" if standing.headline_speedup is None
            else f"{standing.headline_speedup:.6g}",
            "rank": standing.rank or "", "ranking": board.phase,
            "reason": standing.reason or "",
            "late_submission_id": standing.submission_id if late else "",
            "late_score": _points(grade.earned.total) if late and grade is not None else "",
            "graded_submission_id": standing.graded_submission_id or "",
        }
        charge = grade.late if grade is not None else None
        if charge is not None:
            row |= {"late_by": describe_duration(charge.late_by),
                    "late_by_s": f"{charge.late_by.total_seconds():g}",
                    "late_penalty_percent": _points(charge.percent),
                    "slip_days": charge.slip_days}
        if grade is not None:
            row["grade"] = grade.text()
        writer.writerow([safe_cell(row.get(column, "")) for column in LMS_COLUMNS])
    audit.record(session, actor=actor, action="export.lms", now=now, target_type="assignment",
                 target_id=assignment, assignment=assignment,
                 details={"students": len(students), "ranking": board.phase, "zeros": zeros})
    return buffer.getvalue()


# ------------------------------------------------------------ course-wide gradebooks

#: Canvas's gradebook import: the identity columns of its own gradebook export, then one
#: column per assignment (a name Canvas does not know creates that assignment), and a
#: second row whose first cell is "Points Possible" giving each assignment's maximum
#: (Canvas guides, "How do I import grades in the Gradebook?").
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
#: Moodle's grade import (Grades > Import > CSV file) maps one identity column to a user
#: field ("Map from" / "Map to": Email address or ID number) and each other column to a
#: grade item; these headers are those of Moodle's own grade export, and the grade item
#: columns say "(Real)" as its export does for a points grade.
MOODLE_IDENTITY = ("Full name", "Email address", "ID number")


def _boards(session: Session, *, now: dt.datetime) -> list[standings.Board]:
    return [standings.board(session, assignment=name, now=now) for name in MANIFESTS]


def canvas_csv(session: Session, *, actor: audit.Actor, now: dt.datetime,
               zeros: bool = False) -> str:
    """Every assignment's grade in one CSV that Canvas's gradebook import takes as it is
    (CANVAS_IDENTITY, then one column per assignment, the "Points Possible" row second).
    ``SIS User ID`` is the roster id and ``SIS Login ID`` the e-mail (the Canvas user
    ``ID`` is unknown here and left empty: Canvas matches on either SIS column). Each
    cell is the grade of submissions/scoring.py (late and disqualified work: 0; no
    submission: blank, or 0 with `zeros`). Audited.
    """
    boards = _boards(session, now=now)
    buffer = io.StringIO()
    writer = SafeCsvWriter(buffer)
    writer.writerow([*CANVAS_IDENTITY, *(b.assignment.name for b in boards)])
    writer.writerow(["Points Possible", "", "", "", "",
                     *(_points(b.rules.policy.max_total) for b in boards)])
    students = repository.list_students(session)
    for student in students:
        writer.writerow([student.name, "", student.external_id or "", student.email or "", "",
                         *(_grade_cell(b, student.id, zeros) for b in boards)])
    audit.record(session, actor=actor, action="export.canvas", now=now,
                 target_type="gradebook", details={"students": len(students), "zeros": zeros,
                                                   "assignments": [b.assignment.name
                                                                   for b in boards]})
    return buffer.getvalue()


def moodle_csv(session: Session, *, actor: audit.Actor, now: dt.datetime,
               zeros: bool = False) -> str:
    """Every assignment's grade in one CSV for Moodle's grade import (MOODLE_IDENTITY,
    then ``NAME (Real)`` per assignment, and ``Feedback: NAME`` with the grade as every
    page writes it, e.g. "0 of 100 (60 before the late policy)"; no submission: blank, or
    0 with `zeros`). Audited."""
    boards = _boards(session, now=now)
    buffer = io.StringIO()
    writer = SafeCsvWriter(buffer)
    writer.writerow([*MOODLE_IDENTITY,
                     *(f"{b.assignment.name} (Real)" for b in boards),
                     *(f"Feedback: {b.assignment.name}" for b in boards)])
    students = repository.list_students(session)
    for student in students:
        writer.writerow([student.name, student.email or "", student.external_id or "",
                         *(_grade_cell(b, student.id, zeros) for b in boards),
                         *(_feedback(b, student.id) for b in boards)])
    audit.record(session, actor=actor, action="export.moodle", now=now,
                 target_type="gradebook", details={"students": len(students), "zeros": zeros,
                                                   "assignments": [b.assignment.name
                                                                   for b in boards]})
    return buffer.getvalue()


def _grade_cell(board: standings.Board, student_id: int, zeros: bool) -> str:
    """The student's grade; blank for a student who never submitted (unless `zeros`)."""
    standing = board.of_student(student_id)
    if _no_submission(standing) and not zeros:
        return ""
    grade = standing.grade if standing is not None else None
    return _points(grade.total if grade is not None else 0.0)


def _feedback(board: standings.Board, student_id: int) -> str:
    standing = board.of_student(student_id)
    if standing is None or standing.grade is None:
        return standing.reason or "" if standing else ""
    text = standing.grade.text()
    late = standing.grade.late
    if late is not None and late.describe() not in text:  # "... before the late policy"
        text += f"; {late.describe()}"
    reason = f"; {standing.reason}" if standing.reason else ""
    return f"{text}{reason}"


# ------------------------------------------------------------------------- Gradescope

Visibility = Literal["hidden", "after_due_date", "after_published", "visible"]


class GradescopeTest(BaseModel):
    """One entry of ``tests`` in Gradescope's results.json."""

    name: str
    score: float
    max_score: float
    status: Literal["passed", "failed"]
    output: str = ""
    visibility: Visibility = "visible"


class GradescopeLeaderboardEntry(BaseModel):
    """One entry of ``leaderboard`` (``order``: ``asc`` or ``desc``, Gradescope's default)."""

    name: str
    value: float
    order: Literal["asc", "desc"] = "desc"


class GradescopeResults(BaseModel):
    """Gradescope's autograder ``results.json`` (the subset this service fills)."""

    score: float = Field(description="the submission's score; Gradescope uses it instead of "
                         "the sum of the tests' scores")
    execution_time: int | None = Field(None, description="grading wall time, whole seconds")
    output: str
    output_format: Literal["text"] = "text"
    visibility: Visibility = "visible"
    stdout_visibility: Visibility = "hidden"
    tests: list[GradescopeTest]
    leaderboard: list[GradescopeLeaderboardEntry] = []
    extra_data: dict[str, Any] = {}


def gradescope_results(
    session: Session, *, submission: Submission, actor: audit.Actor | None, now: dt.datetime,
    grade_override: Grade | None = None,
) -> GradescopeResults:
    """The submission's current grading as Gradescope results: one test for correctness
    (``correctness_points`` if every check passed), one per check (0 points: shown passed or
    failed with its message), one for speed (the speed points of the headline speedup). A
    disqualified submission scores 0 with the reason; a late one says so. Staff exports
    are audited (`actor`); a student reading their own is not. `grade_override`: the
    student's grade from the board (a final run's speed points), for the class export.

    Raises:
        UnknownAssignment: the submission's assignment left the manifest.
    """
    rules = grades.rules(session, assignment=submission.assignment, now=now,
                         student_id=submission.student_id)
    policy = rules.policy
    grading = submission.current_grading
    passed = grading is not None and grading.status == SubmissionStatus.PASSED  # a finished status
    headline = grading.headline_speedup if grading is not None else None
    grade = grade_override or rules.grade_of(submission)
    parts = grade.counted if grade is not None else ZERO
    late = rules.submission_late(submission)
    notes = []
    if submission.disqualified_at is not None:
        notes.append(f"Disqualified: {submission.disqualified_reason}")
    if late:
        due = rules.due_for(submission.student_id)
        charge = grade.late if grade is not None else None
        notes.append(f"Submitted after the due date in force ({due.isoformat() if due else ''})"
                     + (f", {charge.describe()}" if charge is not None else "")
                     + ": late, never ranked.")
    if grade is not None and (grade.withheld or grade.late is not None):
        notes.append(f"Score: {grade.text()}")
    status_line = (f"{submission.assignment}: {grading.status if grading else 'unknown'}"
                   + (f" ({grading.error_kind}: {grading.error_message})"
                      if grading is not None and grading.error_kind else ""))
    tests = [_correctness_test(policy, parts, passed, grading, grade),
             _policy_test(submission, late=late, due=rules.due_for(submission.student_id), grade=grade)]
    credits = {c.name: c for c in (grade.credits if grade is not None else ())}
    for check in (grading.checks if grading is not None else []):
        credit = credits.get(check.name)
        # 0 of 0 here: the correctness test carries the points (Gradescope would add both).
        tests.append(GradescopeTest(
            name=f"check {check.name}", score=0, max_score=0,
            status="passed" if check.passed else "failed",
            output=("not run (earns nothing): " if check.skipped else "") + (check.message or "")
            + (f" [{credit.earned:g} of {credit.points:g} correctness points]"
               if credit is not None else ""),
        ))
    if policy.thresholds:
        tests.append(GradescopeTest(
            name="speed (headline speedup)", score=parts.speed,
            max_score=policy.max_speed_points,
            status="passed" if parts.speed > 0 else "failed",
            output=_speed_output(policy, headline),
        ))
    results = GradescopeResults(
        score=parts.total,
        execution_time=None if grading is None or grading.grading_duration_s is None
        else round(grading.grading_duration_s),
        output="\n".join([status_line, *notes]),
        tests=tests,
        leaderboard=[GradescopeLeaderboardEntry(name="speedup", value=headline)]
        if headline is not None and grade is not None and grade.withheld is None else [],
        extra_data={"submission_id": submission.id,
                    "grading_id": grading.id if grading else None,
                    "grader_version": grading.grader_version if grading else None,
                    "late": late,
                    "score_before_late_policy": grade.earned.total if grade else None,
                    "disqualified": submission.disqualified_at is not None},
    )
    if actor is not None:
        audit.record(session, actor=actor, action="export.gradescope", now=now,
                     target_type="submission", target_id=submission.id,
                     assignment=submission.assignment)
    return results


def _correctness_test(policy: PointsPolicy, parts: Score, passed: bool, grading: Any,
                      grade: Grade | None) -> GradescopeTest:
    """Passed when every check passed, whatever the lateness: its status follows the checks
    (issue 38: "failed" beside "12 of 12 checks that ran passed" for late work). Its score
    is the points counted, so late or disqualified work scores 0 here, and says why; the
    lateness itself is `_policy_test`."""
    checks = grading.checks if grading is not None else []
    ran = [c for c in checks if not c.skipped]
    withheld = (f"; {_points(parts.correctness)} points counted ({grade.text()})"
                if grade is not None and grade.withheld else "")
    return GradescopeTest(
        name="correctness (every check passes)",
        score=parts.correctness,
        max_score=policy.correctness_points,
        status="passed" if passed else "failed",
        output=f"{sum(1 for c in ran if c.passed)} of {len(ran)} checks that ran passed"
               + (f"; {len(checks) - len(ran)} not run" if len(checks) != len(ran) else "")
               + withheld,
    )


def _policy_test(submission: Submission, *, late: bool, due: dt.datetime | None,
                 grade: Grade | None = None) -> GradescopeTest:
    """The course policy's own test: failed when the upload is late (after the due date in
    force, slip days spent) or disqualified, saying which and what the late policy charged
    (submissions/scoring.py); 0 points either way (the points are in the correctness and
    speed tests)."""
    problems = []
    if late:
        charge = grade.late if grade is not None else None
        problems.append(f"late: uploaded after the due date in force "
                        f"({due.isoformat() if due else 'none'})"
                        + (f", {charge.describe()}" if charge is not None else "") + "; never ranked")
    if submission.disqualified_at is not None:
        problems.append(f"disqualified: {submission.disqualified_reason or 'by staff'}")
    return GradescopeTest(
        name="on time and not disqualified", score=0, max_score=0,
        status="failed" if problems else "passed",
        output="; ".join(problems) or "uploaded on time; not disqualified",
    )


def _speed_output(policy: PointsPolicy, headline: float | None) -> str:
    thresholds = ", ".join(f">= {t.min_speedup:g}x: {t.points:g}" for t in policy.thresholds)
    measured = ("no GPU benchmark (speed points need one)" if headline is None
                else f"headline speedup {headline:.4g}x")
    return f"{measured}; thresholds {thresholds}"


class GradescopeStudentResults(BaseModel):
    """One student's row of the class-wide Gradescope export: who, and the results.json of
    the submission their grade comes from (None: nothing graded)."""

    student_id: int
    name: str
    email: str | None
    external_id: str | None
    submission_id: int | None
    results: GradescopeResults | None


class GradescopeClassExport(BaseModel):
    """Every enrolled student's Gradescope results for one assignment."""

    assignment: str
    ranking: Literal["provisional", "final"]
    students: list[GradescopeStudentResults]


def gradescope_class(session: Session, *, assignment: str, actor: audit.Actor,
                     now: dt.datetime) -> GradescopeClassExport:
    """The Gradescope results.json of each student's graded submission (the board's:
    the ranked one, else the one their unranked row is about), so its ``score`` is the
    student's grade in every other export. One audit event for the export.

    Raises:
        UnknownAssignment: not in the manifest.
    """
    board = standings.board(session, assignment=assignment, now=now)
    rows = []
    students = repository.list_students(session)
    for student in students:
        standing = board.of_student(student.id)
        submission = (repository.get_submission(session, submission_id=standing.submission_id)
                      if standing is not None and standing.submission_id else None)
        rows.append(GradescopeStudentResults(
            student_id=student.id, name=student.name, email=student.email,
            external_id=student.external_id,
            submission_id=submission.id if submission is not None else None,
            results=None if submission is None else gradescope_results(
                session, submission=submission, actor=None, now=now,
                grade_override=standing.grade if standing is not None else None)))
    audit.record(session, actor=actor, action="export.gradescope_class", now=now,
                 target_type="assignment", target_id=board.assignment.name,
                 assignment=board.assignment.name, details={"students": len(students)})
    return GradescopeClassExport(assignment=board.assignment.name, ranking=board.phase,
                                 students=rows)
