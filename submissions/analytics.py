"""Class analytics for staff, per assignment: how often each check passes, which checks fail
most and with which hints, and how both move day by day (the page /staff/analytics and its
CSV). Built from the check verdicts of every submission's current grading
(repository.current_check_verdicts); counts are of submissions, each counted on the UTC day
it was uploaded, and of students beside them (issue 38: one student's 30 uploads are not 30
students stuck on a check). A skipped check (not run on that device, or after the run ended)
counts neither way.

Hints are grouped with their numbers blanked (``hint_key``): the same diagnosis of two
submissions differs only in its figures ("up to 0.00155, 0.79 ulps"); the most common group
is shown with one example's words.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from submissions import repository
from submissions.csv_cells import SafeCsvWriter
from submissions.repository.analytics import CheckVerdictRow

#: Hints listed on the page (most common first).
TOP_HINTS = 10
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", re.IGNORECASE)


def hint_of(row: CheckVerdictRow) -> str | None:
    """The hint or diagnosis a failed check gave: ``details.hint`` of its stored numbers, the
    grader's own structured field (grader/checks/evaluate.py); None without one.

    Never taken from the message: a message holds the submission's own text (an exception's
    message, a name it chose), so the words after a ``Hint:`` in it may be the student's."""
    details = (row.numbers or {}).get("details")
    if isinstance(details, dict) and isinstance(details.get("hint"), str) and details["hint"].strip():
        return details["hint"].strip()
    return None


def hint_key(hint: str) -> str:
    """`hint` with every number blanked, so that one diagnosis groups across submissions."""
    return _NUMBER.sub("#", hint)


@dataclass
class CheckRate:
    """One check's verdicts: ``graded`` submissions ran it, ``passed`` of them passed; the
    students whose submissions ran it, and those with at least one failing it."""

    name: str
    graded: int = 0
    passed: int = 0
    ran_by: set[int] = field(default_factory=set)
    failed_by: set[int] = field(default_factory=set)

    @property
    def students(self) -> int:
        """Students with a submission that ran the check."""
        return len(self.ran_by)

    @property
    def students_failed(self) -> int:
        """Students with at least one submission that failed it."""
        return len(self.failed_by)

    @property
    def failed(self) -> int:
        return self.graded - self.passed

    @property
    def pass_rate(self) -> float | None:
        """passed / graded (0..1), None when no submission ran it."""
        return self.passed / self.graded if self.graded else None


@dataclass
class HintCount:
    """A failing check's hint, how many submissions (and students) got it (numbers
    blanked), one example."""

    check: str
    example: str
    count: int
    students: int = 0


@dataclass
class DayRates:
    """One UTC day of uploads: the submissions graded, those that passed every check that
    ran, and each check's rate that day (by check name)."""

    day: dt.date
    submissions: int = 0
    students: int = 0
    all_passed: int = 0
    checks: dict[str, CheckRate] = field(default_factory=dict)
    top_hint: dict[str, HintCount] = field(default_factory=dict)


@dataclass
class ClassAnalytics:
    """The class's picture for one assignment (``class_analytics``)."""

    assignment: str
    submissions: int
    checks: list[CheckRate]  # in the report's order
    most_failed: list[CheckRate]  # most failures first; only checks that failed
    hints: list[HintCount]  # most common first, at most TOP_HINTS
    days: list[DayRates]  # oldest first
    top_hint: dict[str, HintCount] = field(default_factory=dict)  # each failing check's most common
    students: int = 0  # students with a graded submission


def class_analytics(session: Session, *, assignment: str) -> ClassAnalytics:
    """The analytics of `assignment` (a name the caller resolved)."""
    return summarise(assignment, repository.current_check_verdicts(session, assignment=assignment))


def summarise(assignment: str, rows: list[CheckVerdictRow]) -> ClassAnalytics:
    """`rows` (one per check of a submission's current grading) as ClassAnalytics."""
    order: dict[str, int] = {}
    totals: dict[str, CheckRate] = {}
    days: dict[dt.date, DayRates] = {}
    hint_counts: Counter[tuple[str, str]] = Counter()
    day_hints: dict[tuple[dt.date, str], Counter[str]] = {}
    examples: dict[tuple[str, str], str] = {}
    outcome: dict[int, bool] = {}  # submission -> every check that ran passed
    day_of: dict[int, dt.date] = {}
    student_of: dict[int, int] = {}
    hint_students: dict[tuple[str, str], set[int]] = {}
    for row in rows:
        student_of[row.submission_id] = row.student_id
        moment = row.uploaded_at if row.uploaded_at.tzinfo else row.uploaded_at.replace(tzinfo=dt.UTC)
        day = moment.astimezone(dt.UTC).date()
        day_of[row.submission_id] = day
        outcome.setdefault(row.submission_id, True)
        order.setdefault(row.name, row.position)
        if row.skipped:
            continue
        today = days.setdefault(day, DayRates(day=day))
        for rates in (totals.setdefault(row.name, CheckRate(row.name)),
                      today.checks.setdefault(row.name, CheckRate(row.name))):
            rates.graded += 1
            rates.passed += int(row.passed)
            rates.ran_by.add(row.student_id)
            if not row.passed:
                rates.failed_by.add(row.student_id)
        if row.passed:
            continue
        outcome[row.submission_id] = False
        hint = hint_of(row)
        if hint is not None:
            key = (row.name, hint_key(hint))
            hint_counts[key] += 1
            hint_students.setdefault(key, set()).add(row.student_id)
            examples.setdefault(key, hint)
            day_hints.setdefault((day, row.name), Counter())[key[1]] += 1
    day_students: dict[dt.date, set[int]] = {}
    for submission_id, day in day_of.items():
        today = days.setdefault(day, DayRates(day=day))
        today.submissions += 1
        today.all_passed += int(outcome[submission_id])
        day_students.setdefault(day, set()).add(student_of[submission_id])
    for day, students in day_students.items():
        days[day].students = len(students)
    for (day, check), counter in day_hints.items():
        key, count = counter.most_common(1)[0]
        days[day].top_hint[check] = HintCount(check=check, example=examples[(check, key)], count=count)
    checks = sorted(totals.values(), key=lambda rate: order[rate.name])
    top_hint: dict[str, HintCount] = {}
    for (check, key), count in hint_counts.most_common():
        top_hint.setdefault(check, HintCount(check=check, example=examples[(check, key)], count=count,
                                             students=len(hint_students[(check, key)])))
    return ClassAnalytics(
        assignment=assignment, submissions=len(day_of), checks=checks,
        most_failed=sorted((c for c in checks if c.failed), key=lambda c: (-c.failed, order[c.name])),
        hints=[HintCount(check=check, example=examples[(check, key)], count=count,
                         students=len(hint_students[(check, key)]))
               for (check, key), count in hint_counts.most_common(TOP_HINTS)],
        days=[days[day] for day in sorted(days)], top_hint=top_hint,
        students=len(set(student_of.values())))


CSV_COLUMNS = ("day", "check", "graded", "passed", "failed", "pass_rate", "top_hint", "top_hint_count",
               "students", "students_failed")


def analytics_csv(analytics: ClassAnalytics) -> str:
    """One row per check and UTC day of upload (``day`` ``all``: over every day), columns
    ``CSV_COLUMNS``; ``pass_rate`` in 0..1 with 4 decimals, empty when nothing ran;
    ``students``: students whose submissions ran the check, ``students_failed``: those with
    one failing it (graded, passed and failed count submissions)."""
    out = io.StringIO()
    writer = SafeCsvWriter(out)
    writer.writerow(CSV_COLUMNS)
    rows = [("all", rate, analytics.top_hint.get(rate.name)) for rate in analytics.checks]
    rows += [(day.day.isoformat(), rate, day.top_hint.get(rate.name))
             for day in analytics.days for rate in (day.checks.get(c.name) for c in analytics.checks) if rate]
    for day, rate, hint in rows:
        writer.writerow([day, rate.name, rate.graded, rate.passed, rate.failed,
                         "" if rate.pass_rate is None else f"{rate.pass_rate:.4f}",
                         hint.example if hint else "", hint.count if hint else "",
                         rate.students, rate.students_failed])
    return out.getvalue()
