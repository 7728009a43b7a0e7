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


def test_lateness_is_written_to_the_second_in_the_readers_units() -> None:
    from submissions.lateness import describe_duration

    assert describe_duration(dt.timedelta(seconds=12)) == "12 s"
    assert describe_duration(dt.timedelta(milliseconds=200)) == "1 s"  # late is never "0 s"
    assert describe_duration(dt.timedelta(days=1, hours=2)) == "1 day 2 h"
    assert describe_duration(dt.timedelta(days=2, minutes=3, seconds=4)) == "2 days 3 min 4 s"


def test_a_late_curve_counts_units_started_after_the_slip_days() -> None:
    from submissions.lateness import LateCurve, late_charge, slip_days_to_cover

    curve = LateCurve(percent=10, unit="day", cap=3, after_cap="zero")
    on_time = late_charge(DUE, DUE, curve=curve)
    assert (on_time.late, on_time.percent) == (False, 0)
    hour = late_charge(DUE + dt.timedelta(hours=1), DUE, curve=curve)
    assert (hour.late, hour.percent, hour.past_cap, hour.describe()) == (True, 10, False,
                                                                         "1 h late")
    two_days = late_charge(DUE + dt.timedelta(days=2), DUE, curve=curve)
    assert (two_days.percent, two_days.past_cap) == (20, False)
    past = late_charge(DUE + dt.timedelta(days=3, seconds=1), DUE, curve=curve)
    assert (past.percent, past.past_cap, past.cap_text()) == (100, True, "3-day")
    # A slip day takes 24 h off what is charged; two cover 1 day 2 h entirely.
    covered = late_charge(DUE + dt.timedelta(days=1, hours=2), DUE, curve=curve, slip_days=2)
    assert (covered.late, covered.percent, covered.slip_days) == (False, 0, 2)
    partly = late_charge(DUE + dt.timedelta(days=1, hours=2), DUE, curve=curve, slip_days=1)
    assert (partly.charged, partly.percent) == (dt.timedelta(hours=2), 10)
    hourly = LateCurve(percent=5, unit="hour", cap=None, after_cap="zero")
    assert late_charge(DUE + dt.timedelta(hours=30), DUE, curve=hourly).percent == 100
    assert [slip_days_to_cover(dt.timedelta(seconds=s)) for s in (0, 1, 86400, 86401)] == [
        0, 1, 1, 2]
