"""submissions/lateness.py: the due date in force (class-wide, an extension's date, extra
days) and the on-time edge."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from submissions.lateness import due_in_force, is_late

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)


@dataclass
class Terms:
    due_at: dt.datetime | None = None
    extra_days: float | None = None


def test_due_date_in_force() -> None:
    assert due_in_force(DUE, None) == DUE
    assert due_in_force(None, None) is None
    later = DUE + dt.timedelta(days=3)
    assert due_in_force(DUE, Terms(due_at=later)) == later
    # An extension never shortens the class-wide deadline.
    assert due_in_force(DUE, Terms(due_at=DUE - dt.timedelta(days=1))) == DUE
    assert due_in_force(None, Terms(due_at=later)) == later
    assert due_in_force(DUE, Terms(extra_days=1.5)) == DUE + dt.timedelta(hours=36)
    assert due_in_force(None, Terms(extra_days=2)) is None  # nothing to extend


def test_on_time_up_to_the_due_date_inclusive() -> None:
    assert not is_late(DUE, DUE)
    assert is_late(DUE + dt.timedelta(microseconds=1), DUE)
    assert not is_late(DUE + dt.timedelta(days=400), None)
