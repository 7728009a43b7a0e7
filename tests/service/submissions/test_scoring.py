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


def test_points_per_check_and_the_late_penalty() -> None:
    import datetime as dt

    from submissions.lateness import LateCurve, late_charge
    from submissions.scoring import CheckOutcome

    policy = PointsPolicy.from_stored(60, [], {"a": 1, "b": 2, "c": 3})
    assert policy.check_points == (("a", 10), ("b", 20), ("c", 30))
    checks = [CheckOutcome("a", passed=True, ran=True), CheckOutcome("b", passed=False, ran=True),
              CheckOutcome("c", passed=False, ran=False)]
    partial = grade(policy, passed=False, headline=None, late=False, disqualified=False,
                    checks=checks)
    assert (partial.total, partial.text()) == (10, "10 of 60")
    assert [(c.name, c.earned, c.state) for c in partial.credits] == [
        ("a", 10, "passed"), ("b", 0, "failed"), ("c", 0, "not_run")]
    # A pass earns every check's points, a skipped one included.
    assert grade(policy, passed=True, headline=None, late=False, disqualified=False,
                 checks=checks).total == 60
    due = dt.datetime(2026, 12, 15, tzinfo=dt.UTC)
    charge = late_charge(due + dt.timedelta(days=1), due,
                         curve=LateCurve(percent=10, unit="day", cap=3, after_cap="zero"))
    late = grade(policy, passed=True, headline=None, late=False, disqualified=False,
                 charge=charge)
    assert late.text() == "54 of 60 (60 before a 10% late penalty, 1 day late)"
