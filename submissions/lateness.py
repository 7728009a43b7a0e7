"""Lateness (docs/course.md, "Due dates and extensions"): the one place it is computed.
Pure functions, no database.

Lateness is never stored: it is derived each time from the upload time and the due date in
force for that student now, so moving a due date or granting or revoking an extension
re-derives it on every page, answer and export at once.

    due date in force = None                              without a class-wide due date
                                                          and without an extension date
                      = max(class due, extension due)     extension with a new due date
                      = class due + extra days            extension with extra days
                      = class due                         otherwise
    late              = upload time > due date in force   (on time up to it, inclusive)

An extension never moves a student's due date earlier than the class's (max above): it is an
accommodation, and a later change of the class-wide date must not shorten it.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol


class ExtensionTerms(Protocol):
    """What lateness reads of an extension (submissions.models.Extension): exactly one of
    ``due_at`` (an aware time) and ``extra_days`` (a positive number of days) is set."""

    due_at: dt.datetime | None
    extra_days: float | None


def due_in_force(class_due_at: dt.datetime | None,
                 extension: ExtensionTerms | None) -> dt.datetime | None:
    """The due date that applies to one student (module docstring); None: no due date."""
    if extension is None:
        return class_due_at
    if extension.due_at is not None:
        return extension.due_at if class_due_at is None else max(class_due_at, extension.due_at)
    if class_due_at is None or extension.extra_days is None:
        return class_due_at
    return class_due_at + dt.timedelta(days=extension.extra_days)


def is_late(uploaded_at: dt.datetime, due_at: dt.datetime | None) -> bool:
    """True when `uploaded_at` is after `due_at` (an upload stamped exactly at the due date
    is on time; without a due date nothing is late)."""
    return due_at is not None and uploaded_at > due_at
