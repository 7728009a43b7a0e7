"""The score formula (docs/course.md, "Points", "Late penalties", "Slip days"): the one
place a score is computed. Pure functions, no database.

    grade   = 0       if the submission is disqualified, or late under ``mark_late``, or
                      late past the cap of its late curve; the points it would earn stay
                      shown beside it ("0 (60 before the late policy)")
            = score * (1 - penalty)           late under a late curve (``penalty``), where
                      penalty = min(100%, percent per hour or day * whole hours or days
                      started), counted from the due date in force plus the slip days
                      spent on it (submissions/lateness.py)
            = score   otherwise
    written "60 of 100", "54 of 100 (60 before a 10% late penalty, 1 day late)",
    "0 of 100 (60 before the late policy)", "0 of 100 (disqualified; 60 before)" on every
    page, command and export (`Grade.text`)
    score   = correctness + speed
    correctness = correctness_points          if the grading passed (every check that ran
                                              passed; the grader's verdict)
                = sum of the points of the checks that passed
                                              otherwise; a check that did not run (the run
                                              ended early, or it needs a GPU) earns nothing
    check points = the assignment folder's ``points.toml`` (or staff's override), scaled so
                   that they sum to correctness_points
    speed       = max(points of every threshold with min_speedup <= headline)
                                              if the grading passed and has a headline
                                              speedup (GPU benchmark), else 0

Thresholds are instructor-set pairs (min_speedup, points), strictly ascending in speedup
and non-decreasing in points, so a faster kernel never earns fewer points. The headline
speedup is the benchmark's geometric mean of baseline time / student time (higher is
better); after a final ranking run, the speed points of the ranked submission come from
that run's headline instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from submissions.lateness import LateCharge


@dataclass(frozen=True)
class SpeedThreshold:
    """``points`` for a headline speedup of at least ``min_speedup``."""

    min_speedup: float
    points: float


@dataclass(frozen=True)
class PointsPolicy:
    """An assignment's points: correctness points (per check, or all or nothing where the
    assignment declares no check points) plus speed thresholds.

    Attributes:
        check_points: (check name, points) in force, in the assignment's check order,
            summing to `correctness_points`; () for all-or-nothing correctness.
    """

    correctness_points: float
    thresholds: tuple[SpeedThreshold, ...]
    check_points: tuple[tuple[str, float], ...] = ()

    @property
    def max_speed_points(self) -> float:
        """The points of the highest threshold (0 without thresholds)."""
        return max((t.points for t in self.thresholds), default=0.0)

    @property
    def max_total(self) -> float:
        """The best possible score."""
        return self.correctness_points + self.max_speed_points

    @classmethod
    def from_stored(cls, correctness_points: float, speed_points: Iterable[dict],
                    check_weights: Mapping[str, float] | None = None) -> PointsPolicy:
        """From the ``assignments`` columns (``speed_points`` as stored: a JSON list) and
        the check weights in force (staff's ``check_points``, else the folder's defaults;
        None or empty: all-or-nothing), scaled to `correctness_points` (`scale_checks`)."""
        correctness = float(correctness_points)
        return cls(
            correctness_points=correctness,
            thresholds=tuple(SpeedThreshold(float(t["min_speedup"]), float(t["points"]))
                             for t in speed_points),
            check_points=scale_checks(check_weights or {}, correctness),
        )


def scale_checks(weights: Mapping[str, float], total: float) -> tuple[tuple[str, float], ...]:
    """`weights` (check name -> non-negative number, in check order) scaled so that they sum
    to `total` points; () when they sum to 0. Rounded to 1e-6 points so that a sum of parts
    prints as a short number."""
    weight_sum = sum(weights.values())
    if not weights or weight_sum <= 0:
        return ()
    return tuple((name, round(total * weight / weight_sum, 6)) for name, weight in weights.items())


@dataclass(frozen=True)
class CheckOutcome:
    """What scoring reads of one stored check verdict (submissions.models.CheckVerdict)."""

    name: str
    passed: bool
    ran: bool


#: `CheckCredit.state` values.
CHECK_PASSED, CHECK_FAILED, CHECK_NOT_RUN = "passed", "failed", "not_run"


@dataclass(frozen=True)
class CheckCredit:
    """The points one check carries and what a grading earned from it.

    Attributes:
        state: ``passed``, ``failed`` or ``not_run`` (skipped, or never reached because the
            run ended early: earns nothing).
    """

    name: str
    points: float
    earned: float
    state: str


def check_credits(policy: PointsPolicy, *, passed: bool,
                  checks: Sequence[CheckOutcome] | None) -> tuple[CheckCredit, ...]:
    """Each check of `policy` with the points it earned in a grading with verdicts
    `checks` (`passed`: the grader's verdict, which earns every check's points, a check
    skipped for want of a GPU included); () for all-or-nothing correctness."""
    by_name = {c.name: c for c in checks or ()}
    credits = []
    for name, points in policy.check_points:
        outcome = by_name.get(name)
        if outcome is None or not outcome.ran:
            state = CHECK_NOT_RUN
        else:
            state = CHECK_PASSED if outcome.passed else CHECK_FAILED
        earned = points if passed or state == CHECK_PASSED else 0.0
        credits.append(CheckCredit(name=name, points=points, earned=earned, state=state))
    return tuple(credits)


@dataclass(frozen=True)
class Score:
    """A score and its parts (points)."""

    correctness: float
    speed: float

    @property
    def total(self) -> float:
        """correctness + speed."""
        return self.correctness + self.speed


ZERO = Score(correctness=0.0, speed=0.0)


def validate_thresholds(thresholds: Sequence[SpeedThreshold]) -> str | None:
    """None when the thresholds are usable, else what is wrong with them (a sentence)."""
    for threshold in thresholds:
        if not (math.isfinite(threshold.min_speedup) and threshold.min_speedup > 0):
            return f"min_speedup must be a positive number, got {threshold.min_speedup!r}"
        if not (math.isfinite(threshold.points) and threshold.points >= 0):
            return f"points must be a non-negative number, got {threshold.points!r}"
    for lower, higher in zip(thresholds, thresholds[1:]):
        if higher.min_speedup <= lower.min_speedup:
            return "thresholds must be in strictly ascending order of min_speedup"
        if higher.points < lower.points:
            return "points must not decrease as min_speedup grows (faster never earns less)"
    return None


def _speed_points(policy: PointsPolicy, headline: float | None) -> float:
    """The points of the highest threshold `headline` reaches (0 for None or none)."""
    if headline is None or not math.isfinite(headline):
        return 0.0
    return max((t.points for t in policy.thresholds if headline >= t.min_speedup), default=0.0)


def score(policy: PointsPolicy, *, passed: bool, headline: float | None,
          checks: Sequence[CheckOutcome] | None = None) -> Score:
    """The score of one grading: correctness points if it `passed`, else the points of
    its `checks` that passed (per-check points only), plus the speed points of its
    `headline` speedup (only when it passed)."""
    if not passed:
        if not policy.check_points or not checks:
            return ZERO
        earned = sum(c.earned for c in check_credits(policy, passed=False, checks=checks))
        return Score(correctness=round(earned, 6), speed=0.0)
    return Score(correctness=policy.correctness_points, speed=_speed_points(policy, headline))


#: Why a grade is 0 although its grading earned points.
WITHHELD_LATE, WITHHELD_DISQUALIFIED = "late", "disqualified"


@dataclass(frozen=True)
class Grade:
    """What one submission earns and what counts (points).

    Attributes:
        earned: the score of its grading (verdicts and benchmark under the policy).
        counted: the grade: `earned`, or 0 when `withheld` says why not.
        withheld: None, ``late`` or ``disqualified`` (disqualification wins when both).
        max_total: the assignment's best possible score.
        late: how late it was and what that cost (None: on time, or not known).
        credits: the points of each check (empty for all-or-nothing correctness).
    """

    earned: Score
    counted: Score
    withheld: str | None
    max_total: float
    late: LateCharge | None = None
    credits: tuple[CheckCredit, ...] = field(default=())

    @property
    def total(self) -> float:
        """The grade (counted points)."""
        return self.counted.total

    def text(self) -> str:
        """The one way a grade is written: ``60 of 100``, ``0 of 100 (60 before the late
        policy)``, ``0 of 100 (disqualified; 60 before)``."""
        counted = f"{self.counted.total:g} of {self.max_total:g}"
        late = self.late
        if self.withheld == WITHHELD_DISQUALIFIED:
            return f"{counted} (disqualified; {self.earned.total:g} before)"
        if self.withheld == WITHHELD_LATE:
            if late is not None and late.past_cap:
                return (f"{counted} ({self.earned.total:g} before the late penalty, "
                        f"{late.describe()}, past the {late.cap_text()} cap)")
            return f"{counted} ({self.earned.total:g} before the late policy)"
        if late is not None and late.percent > 0:
            return (f"{counted} ({self.earned.total:g} before a {late.percent:g}% late penalty, "
                    f"{late.describe()})")
        if late is not None and late.slip_days:
            return f"{counted} ({late.describe()}, covered by {_slip_days(late.slip_days)})"
        return counted


def _slip_days(days: int) -> str:
    return f"{days} slip day" + ("" if days == 1 else "s")


def grade(policy: PointsPolicy, *, passed: bool, headline: float | None, late: bool,
          disqualified: bool, charge: LateCharge | None = None,
          checks: Sequence[CheckOutcome] | None = None) -> Grade:
    """The grade of one submission (module docstring): `score` of its grading (`passed`:
    every check that ran passed; `headline`: the benchmark's headline speedup, None without
    a GPU benchmark; `checks`: its check verdicts, for per-check points), withheld (0) when
    it is `disqualified` or `late` (the caller derives `late` and the late `charge` with
    submissions/lateness.py: `late` is True when the charge withholds everything), and
    reduced by the charge's penalty percent otherwise."""
    earned = score(policy, passed=passed, headline=headline, checks=checks)
    credits = check_credits(policy, passed=passed, checks=checks) if checks is not None else ()
    withheld = (WITHHELD_DISQUALIFIED if disqualified else WITHHELD_LATE if late else None)
    if withheld:
        counted = ZERO
    elif charge is not None and charge.percent > 0:
        keep = max(0.0, 1.0 - charge.percent / 100.0)
        counted = Score(correctness=round(earned.correctness * keep, 6),
                        speed=round(earned.speed * keep, 6))
    else:
        counted = earned
    return Grade(earned=earned, counted=counted, withheld=withheld,
                 max_total=policy.max_total, late=charge, credits=credits)
