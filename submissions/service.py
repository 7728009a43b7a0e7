"""Service functions behind the HTTP API: students, tokens, upload validation, the
assignment's upload rules (dates, late policy, submission limit, rate limit).

Keyword-only; they flush through submissions/repository.py and never commit (the request
dependency owns the transaction). They raise the domain exceptions of submissions/errors.py.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import secrets
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from grader.manifest import AssignmentManifest
from grader.source_validation import SourceRejected
from grader.source_validation import validate_source as validate_source_text
from submissions import assignments, audit, grades, repository, slip_days
from submissions.errors import (
    MissingFunction,
    RateLimited,
    SourceNotUtf8,
    SourceSyntaxError,
    StudentEmailTaken,
    StudentExternalIdTaken,
    StudentFieldInvalid,
    StudentNameInvalid,
    StudentNameTaken,
    StudentNotFound,
    SubmissionLimitReached,
    SubmissionNotFound,
    UploadEmpty,
    UploadTooLarge,
    describe_size,
)
from submissions.models import Assignment, Student, Submission
from submissions.settings import Settings

#: Prefix of student tokens: recognisable in logs and secret scanners, and a token never
#: starts with "-", which a command line (`grader submit --token ...`) would take for an option.
STUDENT_TOKEN_PREFIX = "gst_"

# ------------------------------------------------------------------------------ tokens


def hash_token(token: str) -> str:
    """sha256 hex digest of a bearer token (tokens are 256-bit random, so no salt/KDF)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token(prefix: str) -> str:
    """A fresh bearer token: `prefix` + 256 random bits (URL-safe base64)."""
    return prefix + secrets.token_urlsafe(32)


def tokens_equal(presented: str, expected: str) -> bool:
    """Constant-time comparison of two tokens."""
    return secrets.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def derive_grading_seed(*, deployment_seed: str, submission_id: int) -> int:
    """The seed handed to ``grader check --seed`` for one submission.

    First 8 bytes of ``sha256(f"{deployment_seed}:{submission_id}")``, big-endian, masked
    to 63 bits so it fits a signed BIGINT column. Students cannot predict it without the
    deployment secret; staff can recompute it to reproduce a grading.
    """
    digest = hashlib.sha256(f"{deployment_seed}:{submission_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


@dataclass(frozen=True)
class CreatedStudent:
    """A new student and their bearer token (shown once; only its hash is stored)."""

    student: Student
    token: str


#: Longest student name (characters, after trimming); the ``students.name`` column width.
MAX_STUDENT_NAME_CHARS = 200
#: Longest e-mail and roster id (the column widths).
MAX_EMAIL_CHARS, MAX_EXTERNAL_ID_CHARS = 320, 100


def student_name_key(name: str) -> str:
    """The form in which student names are compared: trimmed and case-folded, so "Alice",
    " alice " and "ALICE" are one name. Stored in the unique ``students.name_key`` column.
    (alembic/versions/2026_11_29_0002_unique_student_name.py holds a frozen copy.)"""
    return name.strip().casefold()


def clean_email(email: str | None) -> str | None:
    """An e-mail as stored: trimmed and lower-cased; None for None or blank.

    Raises:
        StudentFieldInvalid: not of the form ``local@domain`` or too long.
    """
    if email is None or not email.strip():
        return None
    value = email.strip().lower()
    local, at, domain = value.partition("@")
    if not at or not local or "." not in domain or any(ch.isspace() for ch in value):
        raise StudentFieldInvalid(f"not an e-mail address: {email!r}", field="email")
    if len(value) > MAX_EMAIL_CHARS:
        raise StudentFieldInvalid(f"the e-mail is longer than {MAX_EMAIL_CHARS} characters",
                                  field="email")
    return value


def clean_external_id(external_id: str | None) -> str | None:
    """A roster id as stored: trimmed; None for None or blank.

    Raises:
        StudentFieldInvalid: longer than MAX_EXTERNAL_ID_CHARS.
    """
    if external_id is None or not external_id.strip():
        return None
    value = external_id.strip()
    if len(value) > MAX_EXTERNAL_ID_CHARS:
        raise StudentFieldInvalid(
            f"the roster id is longer than {MAX_EXTERNAL_ID_CHARS} characters", field="id")
    return value


def clean_student_name(name: str) -> str:
    """The name as stored (trimmed). Raises StudentNameInvalid when blank or too long."""
    clean_name = name.strip()
    if not clean_name:
        raise StudentNameInvalid("the student name must not be blank")
    if len(clean_name) > MAX_STUDENT_NAME_CHARS:
        raise StudentNameInvalid(
            f"the student name is longer than {MAX_STUDENT_NAME_CHARS} characters",
            max_chars=MAX_STUDENT_NAME_CHARS,
        )
    return clean_name


def raise_student_conflict(
    session: Session, *, name: str, email: str | None, external_id: str | None
) -> None:
    """Raise the error for the first unique field another student already holds; return
    when none is taken.

    Raises:
        StudentNameTaken, StudentEmailTaken, StudentExternalIdTaken (details: student_id).
    """
    name_key = student_name_key(name)
    for existing in repository.find_students_matching(
        session, name_key=name_key, email=email, external_id=external_id
    ):
        if existing.name_key == name_key:
            raise StudentNameTaken(
                f"a student named {existing.name!r} already exists (id {existing.id}); "
                "names must be unique, ignoring case and surrounding spaces",
                student_id=existing.id,
            )
        if email is not None and existing.email == email:
            raise StudentEmailTaken(
                f"student {existing.id} ({existing.name}) already has the e-mail {email}",
                student_id=existing.id,
            )
        if external_id is not None and existing.external_id == external_id:
            raise StudentExternalIdTaken(
                f"student {existing.id} ({existing.name}) already has the roster id "
                f"{external_id}", student_id=existing.id,
            )


def create_student(
    session: Session,
    *,
    name: str,
    now: dt.datetime,
    email: str | None = None,
    external_id: str | None = None,
    actor: audit.Actor | None = None,
) -> CreatedStudent:
    """Create a student with a fresh random token. The name is stored trimmed, the e-mail
    lower-cased. With an `actor`, the creation is recorded in the audit log (a roster
    import records one event for the whole file instead).

    Raises:
        StudentNameInvalid: the name is blank or longer than MAX_STUDENT_NAME_CHARS.
        StudentFieldInvalid: a malformed e-mail or roster id.
        StudentNameTaken, StudentEmailTaken, StudentExternalIdTaken: another student has
            the same name (up to case and surrounding whitespace), e-mail or roster id
            (also when both are created concurrently).
    """
    clean_name = clean_student_name(name)
    email = clean_email(email)
    external_id = clean_external_id(external_id)
    token = new_token(STUDENT_TOKEN_PREFIX)
    student = repository.insert_student(
        session, name=clean_name, name_key=student_name_key(clean_name),
        token_sha256=hash_token(token), now=now, email=email, external_id=external_id,
    )
    if student is None:
        raise_student_conflict(session, name=clean_name, email=email, external_id=external_id)
        raise StudentNameTaken(f"a student named {clean_name!r} already exists")  # raced away
    if actor is not None:
        audit.record(session, actor=actor, action="student.create", now=now,
                     target_type="student", target_id=student.id,
                     details={"name": student.name, "email": email, "external_id": external_id})
    return CreatedStudent(student=student, token=token)


def rotate_student_token(
    session: Session, *, student_id: int, actor: audit.Actor, now: dt.datetime
) -> CreatedStudent:
    """Give a student a new token; the old one stops working when the transaction commits.
    Recorded in the audit log (never the token).

    Raises:
        StudentNotFound: no such student.
    """
    token = new_token(STUDENT_TOKEN_PREFIX)
    if not repository.update_student_token(
        session, student_id=student_id, token_sha256=hash_token(token), now=now
    ):
        raise StudentNotFound(f"no student {student_id}")
    student = repository.get_student(session, student_id=student_id)
    assert student is not None  # noqa: S101 - just updated in this transaction
    audit.record(session, actor=actor, action="student.rotate_token", now=now,
                 target_type="student", target_id=student_id)
    return CreatedStudent(student=student, token=token)


def authenticate_student(session: Session, *, token: str) -> Student | None:
    """The student owning `token`, or None."""
    return repository.find_student_by_token_sha256(session, token_sha256=hash_token(token))


# --------------------------------------------------------------------------- uploads


def update_assignment(session: Session, *, name: str, changes: Mapping[str, Any], actor: audit.Actor,
                      now: dt.datetime, confirm_past_due: bool = False) -> Assignment:
    """Change an assignment's settings (``assignments.update``: its checks, errors and audit
    record) and re-derive what follows from them at once: when a rule slip days depend on
    changed (``assignments.RULES_OF_SLIP_DAYS``), every student's slip days
    (``slip_days.rederive_all``). Returns the assignment's row, refreshed.

    Raises: as ``assignments.update``.
    """
    changed = assignments.update(session, name=name, changes=changes, actor=actor, now=now,
                                 confirm_past_due=confirm_past_due)
    if changed.fields & assignments.RULES_OF_SLIP_DAYS:
        slip_days.rederive_all(session, now=now)
        session.refresh(changed.row)
    return changed.row


def resolve_assignment(name: str) -> AssignmentManifest:
    """The manifest entry for `name` (grader/manifest.py). Raises UnknownAssignment."""
    return assignments.resolve_manifest(name)


def display_filename(client_filename: str | None) -> str | None:
    """The client's file name reduced to a short printable base name, for display only."""
    if not client_filename:
        return None
    base = client_filename.replace("\\", "/").rsplit("/", 1)[-1]
    printable = "".join(ch for ch in base if unicodedata.category(ch)[0] not in "CZ" or ch == " ")
    return printable[:255] or None


#: The API's error for each kind of problem the shared source validator reports.
_SOURCE_ERRORS = {
    "not_utf8": SourceNotUtf8,
    "empty": UploadEmpty,
    "syntax": SourceSyntaxError,
    "missing_function": MissingFunction,
}


def validate_source(upload: bytes, *, assignment: AssignmentManifest, max_bytes: int) -> str:
    """Check an uploaded file before it is queued and return it as text.

    The rules are grader/source_validation.py's, the same that ``grader check`` applies.

    Raises:
        UploadTooLarge: more than `max_bytes` bytes.
        SourceNotUtf8: not UTF-8.
        UploadEmpty: no bytes, or only whitespace (and perhaps a byte-order mark).
        SourceSyntaxError: not valid Python (details: line, column).
        MissingFunction: the assignment's function is not bound at module level.
    """
    if len(upload) > max_bytes:
        raise UploadTooLarge(
            f"the file is larger than the upload limit of {describe_size(max_bytes)}",
            max_bytes=max_bytes
        )
    try:
        return validate_source_text(upload, assignment)
    except SourceRejected as exc:
        problem = exc.problem
        raise _SOURCE_ERRORS[problem.kind](problem.message, **problem.details) from None


def enforce_rate_limit(
    session: Session,
    *,
    student_id: int,
    assignment: Assignment,
    settings: Settings,
    now: dt.datetime,
) -> None:
    """Raise RateLimited if the student already has as many counted submissions of
    `assignment` in the window as its rate limit allows (the assignment's own, else
    ``GRADER_RATE_LIMIT_SUBMISSIONS`` per ``GRADER_RATE_LIMIT_WINDOW_S``). Infrastructure
    errors do not count. Call after `repository.lock_student`."""
    limit = assignments.rate_limit(assignment, settings)
    window = dt.timedelta(seconds=limit.window_s)
    times = repository.counted_submission_times(
        session, student_id=student_id, assignment=assignment.name, since=now - window
    )
    if len(times) < limit.submissions:
        return
    # The upload becomes possible when enough of the counted ones leave the window.
    frees_at = times[len(times) - limit.submissions] + window
    retry_after_s = max(1, math.ceil((frees_at - now).total_seconds()))
    raise RateLimited(
        f"at most {limit.submissions} submissions per {limit.window_s:g} s; "
        f"try again in {retry_after_s} s",
        retry_after_s=retry_after_s,
        limit=limit.submissions,
        window_s=limit.window_s,
    )


@dataclass(frozen=True)
class QueuedSubmission:
    """An accepted upload: the submission, its assignment's settings, the rules it is read
    under (the uploader's due date in force), and how many of the assignment's submissions
    the student has used (this one included)."""

    submission: Submission
    assignment: Assignment
    rules: grades.AssignmentRules
    used: int


def create_submission(
    session: Session,
    *,
    student: Student,
    assignment_name: str,
    upload: bytes,
    client_filename: str | None,
    settings: Settings,
    now: dt.datetime,
) -> QueuedSubmission:
    """Validate an upload against the source rules and the assignment's upload rules, and
    queue it. The source text, its sha256 and the derived grading seed
    are stored in the database (no shared disk needed); lateness is not (it is derived
    whenever read, submissions/lateness.py).

    Order: the assignment and its dates first (nothing else matters if it is closed), then
    the file, then (with the student row locked) the submission limit and the rate limit.

    Raises: UnknownAssignment, AssignmentNotOpen, AssignmentClosed, UploadTooLarge,
    SourceNotUtf8, UploadEmpty, SourceSyntaxError, MissingFunction, SubmissionLimitReached,
    RateLimited.
    """
    manifest = resolve_assignment(assignment_name)
    rules = grades.rules(session, assignment=manifest.name, now=now, student_id=student.id)
    assignment = rules.assignment
    assignments.check_upload_window(assignment, due_at=rules.due_for(student.id), now=now,
                                    slip_days_left=slip_days.left_for(
                                        session, student_id=student.id,
                                        assignment=manifest.name))
    source_text = validate_source(
        upload, assignment=manifest, max_bytes=settings.max_upload_bytes
    )
    repository.lock_student(session, student_id=student.id)
    used = repository.count_counted_submissions(
        session, student_id=student.id, assignment=manifest.name
    )
    if assignment.max_submissions is not None and used >= assignment.max_submissions:
        raise SubmissionLimitReached(
            f"you have used all {assignment.max_submissions} submissions of {manifest.name} "
            "(gradings that broke on our side do not count)",
            max_submissions=assignment.max_submissions,
            used=used,
        )
    enforce_rate_limit(session, student_id=student.id, assignment=assignment,
                       settings=settings, now=now)
    deployment_seed = settings.deployment_seed.get_secret_value()
    submission = repository.insert_submission(
        session,
        student_id=student.id,
        assignment=manifest.name,
        source_text=source_text,
        source_sha256=hashlib.sha256(upload).hexdigest(),
        source_bytes=len(upload),
        original_filename=display_filename(client_filename),
        now=now,
        derive_seed=lambda submission_id: derive_grading_seed(
            deployment_seed=deployment_seed, submission_id=submission_id
        ),
    )
    # Which submission counts may now be this one: spend (or move) slip days, under the
    # student's row lock taken above, so concurrent uploads spend them once.
    slip_days.rederive(session, student_id=student.id, now=now)
    rules = grades.rules(session, assignment=manifest.name, now=now, student_id=student.id)
    return QueuedSubmission(submission=submission, assignment=assignment, rules=rules,
                            used=used + 1)


# ------------------------------------------------------------------------ visibility


def get_visible_submission(
    session: Session, *, submission_id: int, viewer_student_id: int | None
) -> Submission:
    """The submission if the viewer may see it: its owner, or staff
    (``viewer_student_id=None``).

    Raises:
        SubmissionNotFound: no such submission, or another student's (indistinguishable).
    """
    submission = repository.get_submission(session, submission_id=submission_id)
    if submission is None or (
        viewer_student_id is not None and submission.student_id != viewer_student_id
    ):
        raise SubmissionNotFound(f"no submission {submission_id}")
    return submission
