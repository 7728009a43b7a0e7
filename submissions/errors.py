"""Domain exceptions. The API maps every subclass of `DomainError` to an HTTP response in
one handler (api/errors.py), using `code` (stable, asserted by tests) and `http_status`.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DomainError(Exception):
    """Base of every error a client can cause; carries a stable machine-readable code."""

    code: ClassVar[str] = "domain_error"
    http_status: ClassVar[int] = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotAuthenticated(DomainError):
    """No bearer token, or a token that matches no student and is not the instructor's."""

    code = "not_authenticated"
    http_status = 401


class InstructorRequired(DomainError):
    """A student's or a TA's token was used on an instructor-only endpoint (settings,
    tokens, staff accounts, final runs)."""

    code = "instructor_required"
    http_status = 403


class SubmissionNotFound(DomainError):
    """No such submission, or one the caller may not see (never reveal which)."""

    code = "submission_not_found"
    http_status = 404


class StudentNotFound(DomainError):
    """No student with that id."""

    code = "student_not_found"
    http_status = 404


class StudentNameInvalid(DomainError):
    """The student name is blank (after trimming) or too long."""

    code = "student_name_invalid"
    http_status = 422


class StudentNameTaken(DomainError):
    """Another student already has this name (compared trimmed and case-insensitively);
    `details` carries the existing student's `student_id`."""

    code = "student_name_taken"
    http_status = 409


class UnknownAssignment(DomainError):
    """The upload names an assignment that is not in the registry."""

    code = "unknown_assignment"
    http_status = 422


class UploadMalformed(DomainError):
    """The request is not a well-formed multipart/form-data body (or a small form field is
    too long, or `file` is sent twice)."""

    code = "upload_malformed"
    http_status = 422


class UploadMissingFile(DomainError):
    """A multipart/form-data body without a part named `file`; `details` carries the
    names of the `fields` that were sent instead."""

    code = "upload_missing_file"
    http_status = 422


class UploadEmpty(DomainError):
    """The uploaded file is empty or contains only whitespace."""

    code = "upload_empty"
    http_status = 422


def describe_size(n_bytes: int) -> str:
    """A byte count in the README's units: ``256 KiB``, ``2 MiB``, ``1.5 KiB``, ``900
    bytes`` (KiB = 1024 bytes). The one place the upload limit is written for people: the
    form, the error page and the API's message all say the same number."""
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n_bytes >= size:
            return f"{n_bytes / size:.4g} {unit}"
    return f"{n_bytes} bytes"


class UploadTooLarge(DomainError):
    """The uploaded file (or the whole request body) exceeds the configured cap."""

    code = "upload_too_large"
    http_status = 413


class SourceNotUtf8(DomainError):
    """The uploaded file is not UTF-8 text."""

    code = "source_not_utf8"
    http_status = 422


class SourceSyntaxError(DomainError):
    """The uploaded file is not valid Python; `details` carries `line` and `column`."""

    code = "source_syntax_error"
    http_status = 422


class MissingFunction(DomainError):
    """The uploaded file has no top-level function with the assignment's name."""

    code = "missing_function"
    http_status = 422


class RateLimited(DomainError):
    """The student has used up the submissions allowed in the window.

    `retry_after_s` (whole seconds) is sent as the ``Retry-After`` header.
    """

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class StaffRequired(DomainError):
    """A student token was used on an endpoint for staff (TAs and instructors)."""

    code = "staff_required"
    http_status = 403


class StudentRequired(DomainError):
    """An endpoint for students (uploading) was called with the instructor token."""

    code = "student_required"
    http_status = 403


class StudentEmailTaken(DomainError):
    """Another student already has this e-mail (compared case-insensitively); `details`
    carries the existing student's `student_id`."""

    code = "student_email_taken"
    http_status = 409


class StudentExternalIdTaken(DomainError):
    """Another student already has this roster id; `details` carries the existing
    student's `student_id`."""

    code = "student_external_id_taken"
    http_status = 409


class StudentFieldInvalid(DomainError):
    """A student's e-mail or roster id is malformed (`details`: `field`)."""

    code = "student_field_invalid"
    http_status = 422


class RosterInvalid(DomainError):
    """A roster CSV could not be imported; nothing was created. `details` carries `errors`:
    ``[{"line": n, "message": ...}]`` (line 1 is the header)."""

    code = "roster_invalid"
    http_status = 422


class StaffNotFound(DomainError):
    """No staff member with that id."""

    code = "staff_not_found"
    http_status = 404


class StaffNameTaken(DomainError):
    """Another staff member already has this name (trimmed, case-insensitive)."""

    code = "staff_name_taken"
    http_status = 409


class TokenNotRotatable(DomainError):
    """The bootstrap instructor's token is GRADER_INSTRUCTOR_TOKEN: change the setting and
    restart instead."""

    code = "token_not_rotatable"
    http_status = 409


class AssignmentSettingsInvalid(DomainError):
    """Assignment settings that contradict each other (e.g. opening after the due date,
    speed thresholds not ascending)."""

    code = "assignment_settings_invalid"
    http_status = 422


class SlipDaysInvalid(DomainError):
    """A slip-day budget out of range, or a change without a reason."""

    code = "slip_days_invalid"
    http_status = 422


class AssignmentNotOpen(DomainError):
    """An upload before the assignment's open date; `details` carries `opens_at`."""

    code = "assignment_not_open"
    http_status = 403


class AssignmentClosed(DomainError):
    """An upload after the due date of an assignment whose late policy is `refuse`;
    `details` carries `due_at`."""

    code = "assignment_closed"
    http_status = 403


class SubmissionLimitReached(DomainError):
    """The student has used every submission the assignment allows (`details`:
    `max_submissions`, `used`). Infrastructure errors do not count."""

    code = "submission_limit_reached"
    http_status = 403


class LeaderboardHidden(DomainError):
    """Staff made the assignment's leaderboard invisible to students."""

    code = "leaderboard_hidden"
    http_status = 403


class AlreadyDisqualified(DomainError):
    """The submission is already disqualified (restore it first to change the reason)."""

    code = "already_disqualified"
    http_status = 409


class NotDisqualified(DomainError):
    """Only a disqualified submission can be restored."""

    code = "not_disqualified"
    http_status = 409


class RegradeNotFound(DomainError):
    """No regrade batch with that id."""

    code = "regrade_not_found"
    http_status = 404


class RegradeEmpty(DomainError):
    """The selection matches no submission that can be regraded (finished, and not in
    another open batch); `details` carries `busy`, the count left out for that reason."""

    code = "regrade_empty"
    http_status = 422


class RegradePending(DomainError):
    """Some gradings of the batch have not finished; apply once they have (`details`:
    `pending`)."""

    code = "regrade_pending"
    http_status = 409


class RegradeDecided(DomainError):
    """The batch was already applied or discarded (`details`: `state`)."""

    code = "regrade_already_decided"
    http_status = 409


class FinalRunNotAllowed(DomainError):
    """A final ranking run cannot start now (the subclass's code says why)."""

    code = "final_run_not_allowed"
    http_status = 409


class NoDueDate(FinalRunNotAllowed):
    """The assignment has no due date, so there is no "after the due date" yet."""

    code = "no_due_date"


class BeforeDueDate(FinalRunNotAllowed):
    """The due date has not passed (`details`: `due_at`)."""

    code = "before_due_date"


class FinalRunInProgress(FinalRunNotAllowed):
    """The previous final run still has gradings queued or running."""

    code = "final_run_in_progress"


class FinalRunEmpty(FinalRunNotAllowed):
    """No student has a passing, on-time, not disqualified submission to re-run."""

    code = "final_run_empty"


class FinalRunNotFound(DomainError):
    """The assignment has no final ranking run yet."""

    code = "final_run_not_found"
    http_status = 404


class Overloaded(DomainError):
    """The API has as many requests in flight as it has threads and database connections
    for (or a database connection could not be had in time): retry after `retry_after_s`
    seconds (sent as ``Retry-After``). Nothing was done."""

    code = "overloaded"
    http_status = 503

    def __init__(self, message: str, *, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class DatabaseUnavailable(DomainError):
    """The database could not be reached (a long-poll learns it from the status query that
    all the waiters share: api/longpoll.py): retry after `retry_after_s` seconds (sent as
    ``Retry-After``). The same code as the 503 of a failed query in any route."""

    code = "database_unavailable"
    http_status = 503

    def __init__(self, message: str, *, retry_after_s: int, **details: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


class BodyTooLarge(DomainError):
    """A JSON (or other non-upload) request body exceeds ``max_json_body_bytes``
    (`details`: `max_bytes`)."""

    code = "body_too_large"
    http_status = 413


class UploadTruncated(DomainError):
    """A multipart body that ends before its closing boundary (a cut-off upload): nothing is
    stored, send the whole file again."""

    code = "upload_truncated"
    http_status = 400


class IdempotencyKeyReused(DomainError):
    """An ``Idempotency-Key`` that this caller already used, within its lifetime, for a
    different request (another body, file or route)."""

    code = "idempotency_key_reused"
    http_status = 422


class TextNotStorable(DomainError):
    """A form field holds text the database cannot store (a NUL character; `details`:
    `field`). JSON fields and query parameters get a 422 ``validation_error`` naming the field
    instead (api/schemas.py `StoredText`)."""

    code = "text_not_storable"
    http_status = 422


class RequestTimeout(DomainError):
    """The request's body did not arrive within ``api_body_timeout_s`` (api/edge.py): the
    connection is closed after this answer (`details`: `timeout_s`)."""

    code = "request_timeout"
    http_status = 408


class ExtensionInvalid(DomainError):
    """An extension that cannot be granted: neither or both of a new due date and extra
    days, a naive time, a blank reason, or extra days on an assignment without a due date."""

    code = "extension_invalid"
    http_status = 422


class ExtensionNotFound(DomainError):
    """The student has no extension of this assignment."""

    code = "extension_not_found"
    http_status = 404


class ExtensionsCsvInvalid(DomainError):
    """An extensions CSV could not be imported; nothing changed. `details` carries `errors`:
    ``[{"line": n, "message": ...}]`` (every problem of the file, line 1 is the header)."""

    code = "extensions_csv_invalid"
    http_status = 422


class DueDateInPast(DomainError):
    """A new due date before now was sent without confirming it (`details`: `due_at`);
    send it again confirmed (``confirm_past_due``) if it is meant: every upload after it
    becomes late at once."""

    code = "due_date_in_past"
    http_status = 409


class SimilarityRunInProgress(DomainError):
    """A similarity review of this assignment is already queued or running; `details`
    carries its `run_id`."""

    code = "similarity_run_in_progress"
    http_status = 409


class SimilarityThresholdInvalid(DomainError):
    """A similarity threshold outside (0, 1]."""

    code = "similarity_threshold_invalid"
    http_status = 422


class SimilarityRunNotFound(DomainError):
    """No similarity review of this assignment has run yet."""

    code = "similarity_run_not_found"
    http_status = 404


class SimilarityPairNotFound(DomainError):
    """No such pair (in this assignment's reviews)."""

    code = "similarity_pair_not_found"
    http_status = 404


class SimilaritySourceNotFound(DomainError):
    """No such known source of this assignment."""

    code = "similarity_source_not_found"
    http_status = 404


class SimilaritySourceInvalid(DomainError):
    """A known source with an empty or too long name, empty or too large text, or text
    that is not Python."""

    code = "similarity_source_invalid"
    http_status = 422


class SimilaritySourceNameTaken(DomainError):
    """The assignment already has a known source of this name."""

    code = "similarity_source_name_taken"
    http_status = 409
