"""submissions/scoring.py: the score of a grading and the grade that counts (late and
disqualified work is 0, what it earned kept beside it), written one way."""

from __future__ import annotations

from submissions.scoring import PointsPolicy, SpeedThreshold, grade

POLICY = PointsPolicy(correctness_points=60,
                      thresholds=(SpeedThreshold(1.0, 10), SpeedThreshold(1.5, 40)))


def test_the_grade_and_how_it_is_written() -> None:
    on_time = grade(POLICY, passed=True, headline=1.2, late=False, disqualified=False)
    assert (on_time.total, on_time.earned.total, on_time.withheld) == (70, 70, None)
    assert on_time.text() == "70 of 100"
    late = grade(POLICY, passed=True, headline=1.6, late=True, disqualified=False)
    assert (late.total, late.earned.total, late.withheld) == (0, 100, "late")
    assert late.text() == "0 of 100 (100 before the late policy)"
    both = grade(POLICY, passed=True, headline=None, late=True, disqualified=True)
    assert both.text() == "0 of 100 (disqualified; 60 before)"
    failed = grade(POLICY, passed=False, headline=3.0, late=False, disqualified=False)
    assert (failed.total, failed.earned.total, failed.text()) == (0, 0, "0 of 100")
    assert grade(POLICY, passed=True, headline=0.9, late=False,
                 disqualified=False).text() == "60 of 100"
