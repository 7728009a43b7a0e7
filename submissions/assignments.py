"""Per-assignment settings: what staff set (dates, late policy, limits, leaderboard
visibility, points) and what they mean for an upload.

A settings row exists for an assignment of the manifest (grader/manifest.py) from the first
time the service touches it (a read or update by staff, an upload, the leaderboard, an
export): `load` inserts it with the defaults (no dates, `mark_late`, no maximum, the
service's rate limit, leaderboard visible, 100 correctness points, no speed points). A
migration cannot create the rows: the manifest is code that grows with the course, and
migrations never import the application.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from grader.manifest import AssignmentManifest, get_manifest
from grader.manifest import UnknownAssignment as UnknownManifest
from submissions import audit, lateness, repository
from submissions.check_points import default_check_points
from submissions.errors import (
    AssignmentClosed,
    AssignmentNotOpen,
    AssignmentSettingsInvalid,
    DueDateInPast,
    UnknownAssignment,
)
from submissions.models import Assignment, Counting, LatePolicy
from submissions.scoring import PointsPolicy, SpeedThreshold, validate_thresholds
from submissions.settings import Settings

#: The columns staff may change (PATCH /api/v1/assignments/{name}).
EDITABLE = frozenset({
    "opens_at", "due_at", "late_policy", "max_submissions", "rate_limit_submissions",
    "rate_limit_window_s", "leaderboard_visible", "correctness_points", "speed_points",
    "check_points", "counting", "late_percent", "late_unit", "late_cap", "late_after_cap",
})


#: The settings whose change can move what slip days are spent on (submissions/slip_days.py).
RULES_OF_SLIP_DAYS = frozenset({
    "due_at", "late_policy", "late_percent", "late_unit", "late_cap", "late_after_cap",
    "counting", "check_points", "correctness_points", "speed_points",
})


def resolve_manifest(name: str) -> AssignmentManifest:
    """The manifest entry for `name`. Raises UnknownAssignment."""
    try:
        return get_manifest(name)
    except UnknownManifest as exc:
        raise UnknownAssignment(str(exc)) from None


def load(session: Session, *, name: str, now: dt.datetime) -> Assignment:
    """The settings row of assignment `name` (created with the defaults on first use).

    Raises:
        UnknownAssignment: `name` is not in the manifest.
    """
    manifest = resolve_manifest(name)
    return repository.ensure_assignment(session, name=manifest.name, now=now)


def check_weights(row: Assignment) -> dict[str, float]:
    """The points per check in force before scaling: staff's ``check_points``, else the
    assignment folder's points.toml ({}: all-or-nothing correctness)."""
    if row.check_points:
        return {name: float(points) for name, points in row.check_points.items()}
    return default_check_points(resolve_manifest(row.name))


def points_policy(row: Assignment) -> PointsPolicy:
    """The assignment's points (submissions/scoring.py)."""
    return PointsPolicy.from_stored(row.correctness_points, row.speed_points or [],
                                    check_weights(row))


def late_curve(row: Assignment) -> lateness.LateCurve | None:
    """The assignment's late curve (late policy ``penalty``), else None."""
    if row.late_policy != LatePolicy.PENALTY or row.late_percent is None or row.late_unit is None:
        return None
    return lateness.LateCurve(percent=row.late_percent, unit=row.late_unit, cap=row.late_cap,
                              after_cap=row.late_after_cap or "zero")


@dataclass(frozen=True)
class RateLimit:
    """At most `submissions` uploads per student and assignment in any `window_s` seconds."""

    submissions: int
    window_s: float


def rate_limit(row: Assignment, settings: Settings) -> RateLimit:
    """The assignment's own rate limit, or the service-wide one where it sets none."""
    return RateLimit(
        submissions=row.rate_limit_submissions or settings.rate_limit_submissions,
        window_s=row.rate_limit_window_s or settings.rate_limit_window_s,
    )


def check_upload_window(row: Assignment, *, due_at: dt.datetime | None, now: dt.datetime,
                        slip_days_left: int = 0) -> bool:
    """Whether an upload at `now` is allowed, and if so whether it is late.

    `due_at` is the uploader's due date in force (submissions/lateness.py: the class-wide
    one or their extension's). Edges: open from ``opens_at`` inclusive; on time up to
    `due_at` inclusive (an upload stamped exactly at the due date is on time). Slip days
    the student has left (`slip_days_left`) are counted as if spent on this upload: what
    they cover is never refused.

    Raises:
        AssignmentNotOpen: `now` is before ``opens_at``.
        AssignmentClosed: `now` is after `due_at` and the late policy is ``refuse``, or
            past the late curve's cap with ``refuse`` after it.
    Returns:
        True when the upload is late now (after `due_at`, policy ``mark_late``). Nothing
        stores this: lateness is derived again whenever it is read.
    """
    if row.opens_at is not None and now < row.opens_at:
        raise AssignmentNotOpen(
            f"{row.name} opens at {iso_utc(row.opens_at)} (UTC); it is {iso_utc(now)} now",
            opens_at=iso_utc(row.opens_at),
        )
    if not lateness.is_late(now, due_at):
        return False
    delay = lateness.late_by(now, due_at)
    slip = min(slip_days_left, lateness.slip_days_to_cover(delay))
    charge = lateness.late_charge(now, due_at, curve=late_curve(row), slip_days=slip)
    if not charge.late:
        return True
    if row.late_policy == LatePolicy.REFUSE:
        raise AssignmentClosed(
            f"{row.name} was due at {iso_utc(due_at)} (UTC); late submissions are refused",
            due_at=iso_utc(due_at),
        )
    if charge.past_cap and charge.curve is not None and charge.curve.after_cap == "refuse":
        raise AssignmentClosed(
            f"{row.name} was due at {iso_utc(due_at)} (UTC); an upload now would be "
            f"{charge.describe()}, past the {charge.cap_text()} cap of its late curve: refused",
            due_at=iso_utc(due_at),
        )
    return True


def iso_utc(moment: dt.datetime) -> str:
    """``2026-12-15T23:59:00Z``: how times appear in messages and error details."""
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class SettingsChanged:
    """What ``update`` changed: the assignment's row (refreshed) and the names of the settings
    whose stored value differs from before."""

    row: Assignment
    fields: frozenset[str]


def update(
    session: Session,
    *,
    name: str,
    changes: Mapping[str, Any],
    actor: audit.Actor,
    now: dt.datetime,
    confirm_past_due: bool = False,
) -> SettingsChanged:
    """Apply `changes` (column -> new value; only keys of EDITABLE) to the settings of
    `name`, check that the result is consistent, and record the change in the audit log
    (old and new values). Grades that follow from the settings are not re-derived here:
    ``service.update_assignment`` does that (slip days read grades, which read this module).

    ``speed_points`` is a sequence of `SpeedThreshold` (or of mappings with
    ``min_speedup`` and ``points``). Times must be aware (stored in UTC).

    Raises:
        UnknownAssignment: `name` is not in the manifest.
        AssignmentSettingsInvalid: an unknown field, a naive time, ``opens_at`` not before
            ``due_at``, or thresholds that are not ascending.
        DueDateInPast: a new ``due_at`` before `now` without `confirm_past_due`.
    """
    row = load(session, name=name, now=now)
    unknown = set(changes) - EDITABLE
    if unknown:
        raise AssignmentSettingsInvalid(f"not an assignment setting: {', '.join(sorted(unknown))}")
    values = dict(changes)
    for field in ("opens_at", "due_at"):
        moment = values.get(field)
        if moment is not None:
            if moment.tzinfo is None:
                raise AssignmentSettingsInvalid(f"{field} needs a time zone (e.g. a trailing Z)")
            values[field] = moment.astimezone(dt.UTC)
    if "late_policy" in values:
        try:
            values["late_policy"] = LatePolicy(values["late_policy"]).value
        except ValueError:
            raise AssignmentSettingsInvalid(
                f"late_policy must be one of {', '.join(p.value for p in LatePolicy)}"
            ) from None
    if "counting" in values:
        try:
            values["counting"] = Counting(values["counting"]).value
        except ValueError:
            raise AssignmentSettingsInvalid(
                f"counting must be one of {', '.join(c.value for c in Counting)}") from None
    if "late_unit" in values and values["late_unit"] not in (None, *lateness.UNITS):
        raise AssignmentSettingsInvalid("late_unit must be hour or day")
    if "late_after_cap" in values and values["late_after_cap"] not in ("zero", "refuse"):
        raise AssignmentSettingsInvalid("late_after_cap must be zero or refuse")
    percent = values.get("late_percent")
    if percent is not None and not (0 <= percent <= 100):
        raise AssignmentSettingsInvalid("late_percent must be between 0 and 100")
    cap = values.get("late_cap")
    if cap is not None and not cap > 0:
        raise AssignmentSettingsInvalid("late_cap must be a positive number of units")
    if "check_points" in values and values["check_points"] is not None:
        values["check_points"] = _valid_check_points(row, values["check_points"])
        if "correctness_points" not in values:
            values["correctness_points"] = round(sum(values["check_points"].values()), 6)
    if values.get("late_policy", row.late_policy) == LatePolicy.PENALTY and (
            values.get("late_percent", row.late_percent) is None
            or values.get("late_unit", row.late_unit) is None):
        raise AssignmentSettingsInvalid(
            "late_policy penalty needs a late curve: late_percent and late_unit")
    if "speed_points" in values:
        thresholds = [
            t if isinstance(t, SpeedThreshold)
            else SpeedThreshold(float(t["min_speedup"]), float(t["points"]))
            for t in values["speed_points"] or []
        ]
        problem = validate_thresholds(thresholds)
        if problem:
            raise AssignmentSettingsInvalid(f"speed_points: {problem}")
        values["speed_points"] = [
            {"min_speedup": t.min_speedup, "points": t.points} for t in thresholds
        ]
    opens_at = values.get("opens_at", row.opens_at)
    due_at = values.get("due_at", row.due_at)
    if (values.get("due_at") is not None and values["due_at"] != row.due_at
            and lateness.is_late(now, values["due_at"]) and not confirm_past_due):
        raise DueDateInPast(
            f"the new due date {iso_utc(values['due_at'])} is in the past; every upload after "
            "it becomes late at once. Confirm to set it anyway", due_at=iso_utc(values["due_at"]))
    if opens_at is not None and due_at is not None and opens_at >= due_at:
        raise AssignmentSettingsInvalid("opens_at must be before due_at",
                                        opens_at=opens_at, due_at=due_at)
    before = {field: _jsonable(getattr(row, field)) for field in values}
    repository.update_assignment(session, name=row.name, values=values, now=now, by=actor.label)
    session.refresh(row)
    after = {field: _jsonable(getattr(row, field)) for field in values}
    audit.record(session, actor=actor, action="assignment.update", now=now,
                 target_type="assignment", target_id=row.name, assignment=row.name,
                 details={"before": before, "after": after})
    return SettingsChanged(row=row, fields=frozenset(f for f in values if before[f] != after[f]))


def _valid_check_points(row: Assignment, points: Mapping[str, Any]) -> dict[str, float]:
    """Staff's points per check, checked against the assignment's checks (those of its
    points.toml, in their order) and made plain floats.

    Raises:
        AssignmentSettingsInvalid: an unknown or missing check, a negative or non-finite
            number, or every check at 0.
    """
    known = list(default_check_points(resolve_manifest(row.name)))
    if known:
        unknown = sorted(set(points) - set(known))
        missing = [name for name in known if name not in points]
        if unknown or missing:
            raise AssignmentSettingsInvalid(
                "check_points must give every check of the assignment its points"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else ""),
                checks=known)
    order = known or list(points)
    clean: dict[str, float] = {}
    for name in order:
        value = points[name]
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or value != value or value in (float("inf"), float("-inf")) or value < 0:
            raise AssignmentSettingsInvalid(f"check_points: {name} must be a non-negative number")
        clean[name] = float(value)
    if sum(clean.values()) <= 0:
        raise AssignmentSettingsInvalid("check_points: at least one check needs points")
    return clean


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def submissions_used(session: Session, *, row: Assignment, student_id: int) -> tuple[int, int | None]:
    """How many submissions of the assignment the student has used (infrastructure errors
    do not count), and how many are left (None: no maximum)."""
    used = repository.count_counted_submissions(session, student_id=student_id,
                                                assignment=row.name)
    left = None if row.max_submissions is None else max(0, row.max_submissions - used)
    return used, left
