"""Students: insertion (unique names, e-mails and roster ids), lookups, token updates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from submissions.models import Student

__all__ = [
    "find_student_by_name_key",
    "find_student_by_token_sha256",
    "find_students_matching",
    "get_student",
    "insert_student",
    "list_students",
    "lock_student",
    "update_student_token",
]


def insert_student(
    session: Session,
    *,
    name: str,
    name_key: str,
    token_sha256: str,
    now: dt.datetime,
    email: str | None = None,
    external_id: str | None = None,
) -> Student | None:
    """Insert a student with the sha256 of their token; flushes to assign the id.

    Returns None, inserting nothing, when another student already has `name_key`, `email`
    or `external_id` (the unique indexes decide, so two concurrent inserts of one name
    cannot both succeed). The insert runs in a savepoint, so the session stays usable
    after a conflict.
    """
    student = Student(name=name, name_key=name_key, token_sha256=token_sha256, created_at=now,
                      email=email, external_id=external_id)
    try:
        with session.begin_nested():
            session.add(student)
    except IntegrityError:
        if not find_students_matching(session, name_key=name_key, email=email,
                                      external_id=external_id):
            raise  # some other constraint
        return None
    return student


def find_student_by_name_key(session: Session, *, name_key: str) -> Student | None:
    """The student whose normalised name is `name_key` (unique constraint), or None."""
    return session.scalars(select(Student).where(Student.name_key == name_key)).first()


def find_students_matching(
    session: Session, *, name_key: str, email: str | None, external_id: str | None
) -> Sequence[Student]:
    """Students that share the name key, the e-mail or the roster id (each unique), in id
    order: at most three."""
    conditions = [Student.name_key == name_key]
    if email is not None:
        conditions.append(Student.email == email)
    if external_id is not None:
        conditions.append(Student.external_id == external_id)
    return session.scalars(select(Student).where(or_(*conditions)).order_by(Student.id)).all()


def find_student_by_token_sha256(session: Session, *, token_sha256: str) -> Student | None:
    """The student whose token hashes to `token_sha256` (unique index), or None."""
    return session.scalars(select(Student).where(Student.token_sha256 == token_sha256)).first()


def get_student(session: Session, *, student_id: int) -> Student | None:
    """The student with id `student_id`, or None."""
    return session.get(Student, student_id)


def list_students(session: Session) -> Sequence[Student]:
    """All students, in creation order."""
    return session.scalars(select(Student).order_by(Student.id)).all()


def lock_student(session: Session, *, student_id: int) -> None:
    """Serialise concurrent uploads of one student until the transaction ends.

    PostgreSQL: ``SELECT ... FOR UPDATE`` on the student row, so two simultaneous uploads
    cannot both pass the rate-limit and submission-count checks. SQLite: a no-op, because
    the transaction already holds the database write lock (``BEGIN IMMEDIATE``).
    """
    session.execute(select(Student.id).where(Student.id == student_id).with_for_update())


def update_student_token(
    session: Session, *, student_id: int, token_sha256: str, now: dt.datetime
) -> bool:
    """Replace a student's token hash (the old token stops working at commit). Returns
    False when there is no such student."""
    result = session.execute(
        update(Student)
        .where(Student.id == student_id)
        .values(token_sha256=token_sha256, token_rotated_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return result.rowcount == 1
