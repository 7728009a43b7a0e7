"""Students' extensions of due dates (accommodations): granted, replaced and revoked by
staff, one by one or from a CSV, each audited (``extension.grant``, ``extension.revoke``,
``extension.import``). What an extension does to the due date: submissions/lateness.py;
every reader derives lateness and grades again from it, so nothing else changes here.

Extensions CSV (UTF-8, a byte-order mark is fine, one header row; names compared
case-insensitively, other columns ignored): the student by ``student_id`` (the service's
id), ``email``, ``id`` (the roster id) or ``name``; then ``due_at`` (ISO 8601 with a zone)
or ``extra_days``, and ``reason``. All or nothing: every bad row is reported in one pass.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from submissions import assignments, audit, repository, service, slip_days
from submissions.errors import (
    DomainError,
    ExtensionInvalid,
    ExtensionNotFound,
    ExtensionsCsvInvalid,
    StudentNotFound,
)
from submissions.models import Extension, Student

MAX_REASON_CHARS = 2000
MAX_EXTRA_DAYS = 366.0
MAX_ROWS = 10_000


@dataclass(frozen=True)
class ExtensionTerms:
    """A new due date (aware) or extra days past the class-wide one, and why."""

    due_at: dt.datetime | None
    extra_days: float | None
    reason: str


def check_terms(terms: ExtensionTerms) -> ExtensionTerms:
    """The terms as stored (the date in UTC, the reason trimmed).

    Raises:
        ExtensionInvalid: neither or both of `due_at` and `extra_days`, a naive time, extra
            days not in (0, 366], a blank or too long reason, or one with a NUL character.
    """
    if (terms.due_at is None) == (terms.extra_days is None):
        raise ExtensionInvalid("give either a new due date or extra days (exactly one)")
    if terms.due_at is not None and terms.due_at.tzinfo is None:
        raise ExtensionInvalid("due_at needs a time zone (e.g. a trailing Z)")
    if terms.extra_days is not None and not (
            math.isfinite(terms.extra_days) and 0 < terms.extra_days <= MAX_EXTRA_DAYS):
        raise ExtensionInvalid(f"extra_days must be more than 0 and at most {MAX_EXTRA_DAYS:g}")
    reason = (terms.reason or "").strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise ExtensionInvalid(f"a reason is required (at most {MAX_REASON_CHARS} characters)")
    if "\x00" in reason:  # PostgreSQL text cannot hold NUL; refuse it on every database
        raise ExtensionInvalid("the reason must not contain NUL characters")
    return ExtensionTerms(
        due_at=None if terms.due_at is None else terms.due_at.astimezone(dt.UTC),
        extra_days=terms.extra_days, reason=reason)


def _describe(row: Extension | None) -> dict[str, object] | None:
    if row is None:
        return None
    return {"due_at": None if row.due_at is None else row.due_at.isoformat(),
            "extra_days": row.extra_days, "reason": row.reason, "granted_by": row.granted_by}


def _student(session: Session, student_id: int) -> Student:
    student = repository.get_student(session, student_id=student_id)
    if student is None:
        raise StudentNotFound(f"no student {student_id}")
    return student


def grant(session: Session, *, assignment: str, student_id: int, terms: ExtensionTerms,
          actor: audit.Actor, now: dt.datetime) -> Extension:
    """Grant (or replace) the student's extension of `assignment`; audited with the old
    and new terms.

    Raises:
        UnknownAssignment, StudentNotFound, ExtensionInvalid.
    """
    row = assignments.load(session, name=assignment, now=now)
    _student(session, student_id)
    terms = check_terms(terms)
    if terms.extra_days is not None and row.due_at is None:
        raise ExtensionInvalid(f"{row.name} has no due date to extend by days; give a date")
    before = _describe(repository.get_extension(session, assignment=row.name,
                                                student_id=student_id))
    extension = repository.upsert_extension(
        session, assignment=row.name, student_id=student_id, due_at=terms.due_at,
        extra_days=terms.extra_days, reason=terms.reason, granted_by=actor.label, now=now)
    audit.record(session, actor=actor, action="extension.grant", now=now,
                 target_type="student", target_id=student_id, assignment=row.name,
                 details={"before": before, "after": _describe(extension)})
    slip_days.rederive(session, student_id=student_id, now=now)  # fewer may be needed now
    session.refresh(extension)
    return extension


def revoke(session: Session, *, assignment: str, student_id: int, actor: audit.Actor,
           now: dt.datetime) -> None:
    """Remove the student's extension of `assignment`; audited with what it was.

    Raises:
        UnknownAssignment, ExtensionNotFound.
    """
    name = assignments.resolve_manifest(assignment).name
    before = _describe(repository.get_extension(session, assignment=name, student_id=student_id))
    if before is None or not repository.delete_extension(session, assignment=name,
                                                         student_id=student_id):
        raise ExtensionNotFound(f"student {student_id} has no extension of {name}")
    audit.record(session, actor=actor, action="extension.revoke", now=now,
                 target_type="student", target_id=student_id, assignment=name,
                 details={"before": before})
    slip_days.rederive(session, student_id=student_id, now=now)


def list_extensions(session: Session, *, assignment: str) -> list[Extension]:
    """The extensions of `assignment`, by student id. Raises UnknownAssignment."""
    name = assignments.resolve_manifest(assignment).name
    return sorted(repository.extensions_of_assignment(session, assignment=name).values(),
                  key=lambda e: e.student_id)


#: Header names (lower-cased, trimmed) accepted for each field.
COLUMN_ALIASES = {
    "student_id": ("student_id",),
    "email": ("email", "e-mail"),
    "external_id": ("id", "sid", "external_id"),
    "name": ("name", "student"),
    "due_at": ("due_at", "due", "new_due_date"),
    "extra_days": ("extra_days", "days"),
    "reason": ("reason",),
}


def _find(session: Session, cells: dict[str, str | None]) -> Student:
    if cells["student_id"]:
        try:
            return _student(session, int(cells["student_id"]))
        except ValueError:
            raise StudentNotFound(f"student_id {cells['student_id']!r} is not a number") from None
    matches = repository.find_students_matching(
        session,
        # "" matches no one: every student has a non-blank name.
        name_key=service.student_name_key(cells["name"]) if cells["name"] else "",
        email=service.clean_email(cells["email"]), external_id=cells["external_id"])
    if len(matches) != 1:
        who = cells["email"] or cells["external_id"] or cells["name"] or "(no student column)"
        raise StudentNotFound(f"{'no' if not matches else 'several'} student(s) match {who!r}")
    return matches[0]


def import_csv(session: Session, *, assignment: str, text: str, actor: audit.Actor,
               now: dt.datetime) -> list[Extension]:
    """Grant every extension of the CSV (module docstring); one ``extension.import`` audit
    event besides each grant's. All or nothing.

    Raises:
        UnknownAssignment: not in the manifest.
        ExtensionsCsvInvalid: the file or some rows are invalid (every problem listed).
    """
    row_settings = assignments.load(session, name=assignment, now=now)
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        header = next(reader, None)
        if header is None:
            raise ExtensionsCsvInvalid("the file is empty (expected a header such as "
                                       "`email,due_at,extra_days,reason`)", errors=[])
        columns = {cell.strip().lower(): index for index, cell in enumerate(header)}
        positions = {field: next((columns[a] for a in aliases if a in columns), None)
                     for field, aliases in COLUMN_ALIASES.items()}
        if all(positions[f] is None for f in ("student_id", "email", "external_id", "name")):
            raise ExtensionsCsvInvalid("the header names no student column (student_id, "
                                       "email, id or name)",
                                       errors=[{"line": 1, "message": "no student column"}])
        plan: list[tuple[int, Student, ExtensionTerms]] = []
        errors: list[dict[str, object]] = []
        seen: dict[int, int] = {}
        for cells in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            if len(plan) + len(errors) >= MAX_ROWS:
                raise ExtensionsCsvInvalid(f"more than {MAX_ROWS} rows", errors=[])
            values = {field: (cells[p].strip() or None) if p is not None and p < len(cells)
                      else None for field, p in positions.items()}
            try:
                student = _find(session, values)
                due_at = (dt.datetime.fromisoformat(values["due_at"].replace("Z", "+00:00"))
                          if values["due_at"] else None)
                terms = check_terms(ExtensionTerms(
                    due_at=due_at,
                    extra_days=float(values["extra_days"]) if values["extra_days"] else None,
                    reason=values["reason"] or ""))
                if terms.extra_days is not None and row_settings.due_at is None:
                    raise ExtensionInvalid("the assignment has no due date to extend by days")
            except (DomainError, ValueError) as exc:
                errors.append({"line": line,
                               "message": getattr(exc, "message", None) or str(exc)})
                continue
            if student.id in seen:
                errors.append({"line": line,
                               "message": f"the same student as line {seen[student.id]}"})
                continue
            seen[student.id] = line
            plan.append((line, student, terms))
    except csv.Error as exc:
        raise ExtensionsCsvInvalid(f"not a valid CSV file: {exc}", errors=[]) from None
    if errors:
        raise ExtensionsCsvInvalid(f"{len(errors)} problem(s) in the file; nothing changed",
                                   errors=errors)
    granted = [grant(session, assignment=row_settings.name, student_id=student.id, terms=terms,
                     actor=actor, now=now) for _line, student, terms in plan]
    audit.record(session, actor=actor, action="extension.import", now=now,
                 target_type="assignment", target_id=row_settings.name,
                 assignment=row_settings.name,
                 details={"rows": len(plan), "students": [s.id for _l, s, _t in plan]})
    return granted
