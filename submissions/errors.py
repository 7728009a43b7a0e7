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
    """A student token was used on an instructor-only endpoint."""

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


class StudentRequired(DomainError):
    """An endpoint for students (uploading) was called with the instructor token."""

    code = "student_required"
    http_status = 403
