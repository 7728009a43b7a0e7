"""The score formula (docs/course.md, "Points"): the one place a score is computed. Pure
functions, no database.

    grade   = 0       if the submission is disqualified or late (its due date in force:
                      submissions/lateness.py); the points it would earn stay shown beside
                      it ("0 (60 before the late policy)")
            = score   otherwise
    written "60 of 100", "0 of 100 (60 before the late policy)", "0 of 100 (disqualified;
    60 before)" on every page, command and export (`Grade.text`)
    score   = correctness + speed
    correctness = correctness_points          if the grading passed (every check that ran
                                              passed; the grader's verdict), else 0
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedThreshold:
    """``points`` for a headline speedup of at least ``min_speedup``."""

    min_speedup: float
    points: float


@dataclass(frozen=True)
class PointsPolicy:
    """An assignment's points: all-or-nothing correctness points plus speed thresholds."""

    correctness_points: float
    thresholds: tuple[SpeedThreshold, ...]

    @property
    def max_speed_points(self) -> float:
        """The points of the highest threshold (0 without thresholds)."""
        return max((t.points for t in self.thresholds), default=0.0)

    @property
    def max_total(self) -> float:
        """The best possible score."""
        return self.correctness_points + self.max_speed_points

    @classmethod
    def from_stored(cls, correctness_points: float, speed_points: Iterable[dict]) -> PointsPolicy:
        """From the ``assignments`` columns (``speed_points`` as stored: a JSON list)."""
        return cls(
            correctness_points=float(correctness_points),
            thresholds=tuple(SpeedThreshold(float(t["min_speedup"]), float(t["points"]))
                             for t in speed_points),
        )


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


def score(policy: PointsPolicy, *, passed: bool, headline: float | None) -> Score:
    """The score of one grading: correctness points if it `passed`, plus the speed points
    of its `headline` speedup (only when it passed)."""
    if not passed:
        return ZERO
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
    """

    earned: Score
    counted: Score
    withheld: str | None
    max_total: float

    @property
    def total(self) -> float:
        """The grade (counted points)."""
        return self.counted.total

    def text(self) -> str:
        """The one way a grade is written: ``60 of 100``, ``0 of 100 (60 before the late
        policy)``, ``0 of 100 (disqualified; 60 before)``."""
        counted = f"{self.counted.total:g} of {self.max_total:g}"
        if self.withheld == WITHHELD_LATE:
            return f"{counted} ({self.earned.total:g} before the late policy)"
        if self.withheld == WITHHELD_DISQUALIFIED:
            return f"{counted} (disqualified; {self.earned.total:g} before)"
        return counted


def grade(policy: PointsPolicy, *, passed: bool, headline: float | None, late: bool,
          disqualified: bool) -> Grade:
    """The grade of one submission (module docstring): `score` of its grading (`passed`:
    every check that ran passed; `headline`: the benchmark's headline speedup, None without
    a GPU benchmark), withheld (0) when it is `disqualified` or `late` (the caller derives
    `late` with submissions/lateness.py)."""
    earned = score(policy, passed=passed, headline=headline)
    withheld = (WITHHELD_DISQUALIFIED if disqualified else WITHHELD_LATE if late else None)
    return Grade(earned=earned, counted=ZERO if withheld else earned, withheld=withheld,
                 max_total=policy.max_total)
