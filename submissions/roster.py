"""Bulk student import from a roster CSV.

The file is UTF-8 (a byte-order mark is allowed), comma-separated, with a header row. The
columns read (names compared case-insensitively; any other column is ignored, so an LMS
export can be used as it is):

- ``name`` (required): the student's name, unique ignoring case and surrounding spaces;
- ``email`` (or ``e-mail``): optional, unique (compared lower-case);
- ``id`` (or ``student_id``, ``external_id``): the institution's student id, optional, unique.

A row matches an existing student when it shares the e-mail, the id or the name with one; such
a student keeps their token (rotate it separately) and gets the e-mail or id the row adds if
they had none. Every other row creates a student with a fresh token. The import is all or
nothing: if any row is invalid (no name, a malformed e-mail, a duplicate within the file, a
row that matches two different students, or a value that contradicts the matched student),
nothing is created and every problem is reported with its line number.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass

from pydantic import BaseModel
from sqlalchemy.orm import Session

from submissions import audit, repository, service
from submissions.csv_cells import SafeCsvWriter
from submissions.errors import DomainError, RosterInvalid
from submissions.models import Student

#: Header names (lower-cased, trimmed) accepted for each field.
COLUMN_ALIASES = {
    "name": ("name", "student", "full name", "student name"),
    "email": ("email", "e-mail", "mail", "email address"),
    "external_id": ("id", "student_id", "student id", "external_id", "sid"),
}
MAX_ROWS = 10_000


class RosterRow(BaseModel):
    """One data row of the roster (``line``: its line number in the file, header = 1)."""

    line: int
    name: str
    email: str | None = None
    external_id: str | None = None


@dataclass(frozen=True)
class ImportedStudent:
    """One row's outcome: a new student with their token, or an existing one (no token)."""

    line: int
    student: Student
    token: str | None

    @property
    def created(self) -> bool:
        """True when the row created the student (and `token` is theirs)."""
        return self.token is not None


def parse_roster(text: str) -> list[RosterRow]:
    """Read the rows of a roster CSV (blank rows are skipped).

    Raises:
        RosterInvalid: no header with a ``name`` column, too many rows, a malformed CSV, or
            rows with problems (all of them listed in ``errors``).
    """
    rows, errors = _read_rows(text)
    if errors:
        raise RosterInvalid(f"{len(errors)} problem(s) in the roster; nothing was imported",
                            errors=errors)
    return rows


def _read_rows(text: str) -> tuple[list[RosterRow], list[dict[str, object]]]:
    """The well-formed rows and every problem of the others (sorted by line).

    Raises:
        RosterInvalid: the file itself is unusable (no header with ``name``, too many rows,
            not CSV).
    """
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        header = next(reader, None)
        if header is None:
            raise RosterInvalid("the roster is empty (expected a header row such as "
                                "`name,email,id`)", errors=[])
        columns = {cell.strip().lower(): index for index, cell in enumerate(header)}
        positions = {
            field: next((columns[alias] for alias in aliases if alias in columns), None)
            for field, aliases in COLUMN_ALIASES.items()
        }
        if positions["name"] is None:
            raise RosterInvalid(
                f"the header has no `name` column (found: {', '.join(h.strip() for h in header)})",
                errors=[{"line": 1, "message": "no `name` column"}])
        rows: list[RosterRow] = []
        errors: list[dict[str, object]] = []
        for cells in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            if len(rows) >= MAX_ROWS:
                raise RosterInvalid(f"more than {MAX_ROWS} rows", errors=[])

            def cell(field: str, cells: list[str] = cells) -> str | None:
                position = positions[field]
                if position is None or position >= len(cells):
                    return None
                return cells[position].strip() or None

            name = cell("name")
            if name is None:
                errors.append({"line": line, "message": "no name"})
                continue
            try:
                rows.append(RosterRow(
                    line=line,
                    name=service.clean_student_name(name),
                    email=service.clean_email(cell("email")),
                    external_id=service.clean_external_id(cell("external_id")),
                ))
            except DomainError as exc:
                errors.append({"line": line, "message": exc.message})
    except csv.Error as exc:
        raise RosterInvalid(f"not a valid CSV file: {exc}", errors=[]) from None
    errors.extend(_duplicates(rows))
    return rows, sorted(errors, key=lambda e: e["line"])


def _duplicates(rows: list[RosterRow]) -> list[dict[str, object]]:
    seen: dict[tuple[str, str], int] = {}
    errors = []
    for row in rows:
        for field, value in (("name", service.student_name_key(row.name)),
                             ("email", row.email), ("id", row.external_id)):
            if value is None:
                continue
            first = seen.setdefault((field, value), row.line)
            if first != row.line:
                errors.append({"line": row.line,
                               "message": f"the same {field} as line {first}"})
    return errors


def import_roster(
    session: Session, *, text: str, actor: audit.Actor, now: dt.datetime
) -> list[ImportedStudent]:
    """Create the roster's new students (each with a fresh token) and match the others;
    one audit event for the import. All or nothing (see the module docstring).

    Raises:
        RosterInvalid: the file or some rows are invalid (details: ``errors``).
    """
    # Every problem in one pass: the rows' own, then each well-formed row against the
    # students already enrolled.
    rows, errors = _read_rows(text)
    plan: list[tuple[RosterRow, Student | None]] = []
    for row in rows:
        matches = repository.find_students_matching(
            session, name_key=service.student_name_key(row.name), email=row.email,
            external_id=row.external_id)
        if len(matches) > 1:
            ids = ", ".join(str(m.id) for m in matches)
            errors.append({"line": row.line,
                           "message": f"matches several existing students ({ids})"})
            continue
        existing = matches[0] if matches else None
        if existing is not None:
            for field, value in (("email", row.email), ("external_id", row.external_id)):
                held = getattr(existing, field)
                if value is not None and held is not None and held != value:
                    errors.append({"line": row.line, "message": (
                        f"student {existing.id} ({existing.name}) has {field} {held!r}, "
                        f"the roster says {value!r}")})
        plan.append((row, existing))
    if errors:
        raise RosterInvalid(f"{len(errors)} problem(s) in the roster; nothing was imported",
                            errors=sorted(errors, key=lambda e: e["line"]))

    outcome: list[ImportedStudent] = []
    for row, existing in plan:
        if existing is None:
            created = service.create_student(session, name=row.name, email=row.email,
                                             external_id=row.external_id, now=now)
            outcome.append(ImportedStudent(line=row.line, student=created.student,
                                           token=created.token))
            continue
        if existing.email is None and row.email is not None:
            existing.email = row.email
        if existing.external_id is None and row.external_id is not None:
            existing.external_id = row.external_id
        outcome.append(ImportedStudent(line=row.line, student=existing, token=None))
    session.flush()
    audit.record(session, actor=actor, action="student.import", now=now,
                 target_type="roster", details={
                     "rows": len(rows),
                     "created": [i.student.id for i in outcome if i.created],
                     "existing": [i.student.id for i in outcome if not i.created],
                 })
    return outcome


def tokens_csv(imported: list[ImportedStudent]) -> str:
    """The import's outcome as CSV for the instructor: ``student_id,name,email,id,token``
    (token empty for students who already existed)."""
    buffer = io.StringIO()
    writer = SafeCsvWriter(buffer)
    writer.writerow(["student_id", "name", "email", "id", "token"])
    for item in imported:
        writer.writerow([item.student.id, item.student.name, item.student.email or "",
                         item.student.external_id or "", item.token or ""])
    return buffer.getvalue()
