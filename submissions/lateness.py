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

Late curves and slip days (docs/course.md, "Late penalties", "Slip days"):

    late by      = upload time - due date in force              (0 when on time)
    slip days    = whole days that cover `late by` (ceil), at most what the student has left,
                   spent only on the submission that counts (submissions/slip_days.py)
    charged late = late by - slip days * 24 h                    (0: covered)
    units        = whole hours or days started of `charged late` (ceil; 1 s late is 1 unit)
    penalty      = min(100, percent * units) %                   policy ``penalty``
    past cap     = units > cap                                   the curve's cap: the upload
                   earns 0 (``zero``) or is refused at upload (``refuse``)

Lateness is written to the second in the reader's units: "12 s late", "1 day 2 h late"
(`describe_duration`), never rounded to a minute that would hide it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Protocol

DAY = dt.timedelta(days=1)
#: The length of each curve unit.
UNITS = {"hour": dt.timedelta(hours=1), "day": DAY}


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


def late_by(uploaded_at: dt.datetime, due_at: dt.datetime | None) -> dt.timedelta:
    """How long after `due_at` the upload was (zero when on time or without a due date)."""
    if due_at is None or uploaded_at <= due_at:
        return dt.timedelta(0)
    return uploaded_at - due_at


def slip_days_to_cover(delay: dt.timedelta) -> int:
    """Whole days needed to cover `delay` (1 s late needs 1 day; 0 when on time)."""
    if delay <= dt.timedelta(0):
        return 0
    return math.ceil(delay / DAY)


def describe_duration(delay: dt.timedelta) -> str:
    """`delay` to the second, largest unit first, zero parts left out: ``12 s``,
    ``3 min 4 s``, ``1 day 2 h``, ``2 days``. A fraction of a second counts as a whole
    one (an upload 0.2 s late is ``1 s`` late, not ``0 s``)."""
    seconds = math.ceil(delay.total_seconds())
    if seconds <= 0:
        return "0 s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if days:
        parts.append(f"{days} day" + ("" if days == 1 else "s"))
    if hours:
        parts.append(f"{hours} h")
    if minutes:
        parts.append(f"{minutes} min")
    if secs:
        parts.append(f"{secs} s")
    return " ".join(parts)


@dataclass(frozen=True)
class LateCurve:
    """A late penalty curve: `percent` off per `unit` (``hour`` or ``day``) started; past
    `cap` units (None: no cap) the upload earns 0 (`after_cap` ``zero``) or is refused
    (``refuse``)."""

    percent: float
    unit: str
    cap: float | None
    after_cap: str


@dataclass(frozen=True)
class LateCharge:
    """How late one submission was and what it costs.

    Attributes:
        late_by: after the due date in force (zero: on time).
        slip_days: slip days spent on it (each covers 24 h of `late_by`).
        charged: `late_by` left after the slip days.
        percent: the penalty in percent (0 with no curve or when covered).
        past_cap: beyond the curve's cap (it earns 0).
        curve: the curve it was charged under (None: no curve).
    """

    late_by: dt.timedelta
    slip_days: int
    charged: dt.timedelta
    percent: float
    past_cap: bool
    curve: LateCurve | None

    @property
    def late(self) -> bool:
        """Late after its slip days."""
        return self.charged > dt.timedelta(0)

    def describe(self) -> str:
        """``1 day 2 h late`` (before slip days, to the second)."""
        return f"{describe_duration(self.late_by)} late"

    def cap_text(self) -> str:
        """``3-day`` (the curve's cap)."""
        if self.curve is None or self.curve.cap is None:
            return ""
        return f"{self.curve.cap:g}-{self.curve.unit}"


def late_charge(uploaded_at: dt.datetime, due_at: dt.datetime | None, *,
                curve: LateCurve | None, slip_days: int = 0) -> LateCharge:
    """What an upload at `uploaded_at` owes under `curve` (None: no curve, no percent)
    with `slip_days` spent on it (module docstring)."""
    delay = late_by(uploaded_at, due_at)
    charged = max(dt.timedelta(0), delay - slip_days * DAY)
    if curve is None or charged <= dt.timedelta(0):
        return LateCharge(late_by=delay, slip_days=slip_days, charged=charged, percent=0.0,
                          past_cap=False, curve=curve)
    units = math.ceil(charged / UNITS[curve.unit])
    past_cap = curve.cap is not None and units > curve.cap
    percent = 100.0 if past_cap else min(100.0, round(curve.percent * units, 6))
    return LateCharge(late_by=delay, slip_days=slip_days, charged=charged, percent=percent,
                      past_cap=past_cap, curve=curve)
