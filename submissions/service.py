"""Service functions behind the HTTP API: students, tokens, upload validation, rate limit.

Keyword-only; they flush through submissions/repository.py and never commit (the request
dependency owns the transaction). They raise the domain exceptions of submissions/errors.py.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import secrets
import unicodedata
from dataclasses import dataclass

from sqlalchemy.orm import Session

from grader.manifest import AssignmentManifest, get_manifest
from grader.manifest import UnknownAssignment as UnknownManifest
from grader.source_validation import SourceRejected
from grader.source_validation import validate_source as validate_source_text
from submissions import repository
from submissions.errors import (
    MissingFunction,
    RateLimited,
    SourceNotUtf8,
    SourceSyntaxError,
    StudentNameInvalid,
    StudentNameTaken,
    SubmissionNotFound,
    UnknownAssignment,
    UploadEmpty,
    UploadTooLarge,
)
from submissions.models import Student, Submission
from submissions.settings import Settings

#: Prefix of student tokens: recognisable in logs and secret scanners, and a token never
#: starts with "-", which a command line (`grader submit --token ...`) would take for an option.
STUDENT_TOKEN_PREFIX = "gst_"

# ------------------------------------------------------------------------------ tokens


def hash_token(token: str) -> str:
    """sha256 hex digest of a bearer token (tokens are 256-bit random, so no salt/KDF)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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


def student_name_key(name: str) -> str:
    """The form in which student names are compared: trimmed and case-folded, so "Alice",
    " alice " and "ALICE" are one name. Stored in the unique ``students.name_key`` column.
    (alembic/versions/2026_11_29_0002_unique_student_name.py holds a frozen copy.)"""
    return name.strip().casefold()


def create_student(session: Session, *, name: str, now: dt.datetime) -> CreatedStudent:
    """Create a student with a fresh random token. The name is stored trimmed.

    Raises:
        StudentNameInvalid: the name is blank or longer than MAX_STUDENT_NAME_CHARS.
        StudentNameTaken: another student has the same name up to case and surrounding
            whitespace (also when both are created concurrently).
    """
    clean_name = name.strip()
    if not clean_name:
        raise StudentNameInvalid("the student name must not be blank")
    if len(clean_name) > MAX_STUDENT_NAME_CHARS:
        raise StudentNameInvalid(
            f"the student name is longer than {MAX_STUDENT_NAME_CHARS} characters",
            max_chars=MAX_STUDENT_NAME_CHARS,
        )
    name_key = student_name_key(clean_name)
    token = STUDENT_TOKEN_PREFIX + secrets.token_urlsafe(32)
    student = repository.insert_student(
        session, name=clean_name, name_key=name_key, token_sha256=hash_token(token), now=now
    )
    if student is None:
        existing = repository.find_student_by_name_key(session, name_key=name_key)
        existing_id = existing.id if existing is not None else None
        existing_name = existing.name if existing is not None else clean_name
        raise StudentNameTaken(
            f"a student named {existing_name!r} already exists (id {existing_id}); "
            "names must be unique, ignoring case and surrounding spaces",
            student_id=existing_id,
        )
    return CreatedStudent(student=student, token=token)


def authenticate_student(session: Session, *, token: str) -> Student | None:
    """The student owning `token`, or None."""
    return repository.find_student_by_token_sha256(session, token_sha256=hash_token(token))


# --------------------------------------------------------------------------- uploads


def resolve_assignment(name: str) -> AssignmentManifest:
    """The manifest entry for `name` (grader/manifest.py). Raises UnknownAssignment."""
    try:
        return get_manifest(name)
    except UnknownManifest as exc:
        raise UnknownAssignment(str(exc)) from None


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
            f"the file is larger than {max_bytes} bytes", max_bytes=max_bytes
        )
    try:
        return validate_source_text(upload, assignment)
    except SourceRejected as exc:
        problem = exc.problem
        raise _SOURCE_ERRORS[problem.kind](problem.message, **problem.details) from None


def enforce_rate_limit(
    session: Session, *, student_id: int, settings: Settings, now: dt.datetime
) -> None:
    """Raise RateLimited if the student already has ``rate_limit_submissions`` counted
    submissions in the last ``rate_limit_window_s`` seconds. Infrastructure errors do not
    count. Locks the student row first, so concurrent uploads are checked one at a time."""
    repository.lock_student(session, student_id=student_id)
    window = dt.timedelta(seconds=settings.rate_limit_window_s)
    times = repository.counted_submission_times(
        session, student_id=student_id, since=now - window
    )
    limit = settings.rate_limit_submissions
    if len(times) < limit:
        return
    # The upload becomes possible when enough of the counted ones leave the window.
    frees_at = times[len(times) - limit] + window
    retry_after_s = max(1, math.ceil((frees_at - now).total_seconds()))
    raise RateLimited(
        f"at most {limit} submissions per {settings.rate_limit_window_s:g} s; "
        f"try again in {retry_after_s} s",
        retry_after_s=retry_after_s,
        limit=limit,
        window_s=settings.rate_limit_window_s,
    )


def create_submission(
    session: Session,
    *,
    student: Student,
    assignment_name: str,
    upload: bytes,
    client_filename: str | None,
    settings: Settings,
    now: dt.datetime,
) -> Submission:
    """Validate an upload, apply the rate limit and queue it. The source text, its sha256
    and the derived grading seed are stored in the database (no shared disk needed).

    Raises: UnknownAssignment, UploadTooLarge, SourceNotUtf8, UploadEmpty, SourceSyntaxError,
    MissingFunction, RateLimited.
    """
    assignment = resolve_assignment(assignment_name)
    source_text = validate_source(
        upload, assignment=assignment, max_bytes=settings.max_upload_bytes
    )
    enforce_rate_limit(session, student_id=student.id, settings=settings, now=now)
    submission = repository.insert_submission(
        session,
        student_id=student.id,
        assignment=assignment.name,
        source_text=source_text,
        source_sha256=hashlib.sha256(upload).hexdigest(),
        source_bytes=len(upload),
        original_filename=display_filename(client_filename),
        now=now,
    )
    submission.seed = derive_grading_seed(
        deployment_seed=settings.deployment_seed.get_secret_value(),
        submission_id=submission.id,
    )
    session.flush()
    return submission


# ------------------------------------------------------------------------ visibility


def get_visible_submission(
    session: Session, *, submission_id: int, viewer_student_id: int | None
) -> Submission:
    """The submission if the viewer may see it: its owner, or the instructor
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
