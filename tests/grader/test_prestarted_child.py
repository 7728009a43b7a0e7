"""The check child started ahead of its job (grader/runner.py ``PrestartedChild``), as the
worker's warm grader (``grader check --job-on-stdin``) starts it: real bubblewrap sandboxes, the
real reference under the Triton interpreter.

- It runs the grading's checks when handed its plan, and the time it waited is not on its
  wall clock (a wait longer than the child's whole limit does not time it out).
- Closed without a job, it ends and its folder is removed.
- Handed its plan at once (while it still loads torch), it runs it, once.
- One that ended before its job is replaced by a child started for the job, also when it
  ended in the moment between the grading's look at it and the hand-over.
"""

from __future__ import annotations

import time

from grading_support import REFERENCE, requires_bwrap, settings

from grader.children.check_children import PrestartedChild
from grader.runner import grade_source

pytestmark = requires_bwrap


def _wait_until_loaded(prestarted: PrestartedChild, seconds: float) -> None:
    time.sleep(seconds)
    assert prestarted.waiting(), "the child started ahead must still wait for its plan"


def test_a_prestarted_child_runs_the_checks_and_its_wait_is_off_its_clock():
    limits = settings(child_timeout_s=12.0)
    prestarted = PrestartedChild(device="cpu", settings=limits)
    _wait_until_loaded(prestarted, 14.0)  # longer than the child's whole limit
    document = grade_source(REFERENCE.read_bytes(), assignment="softmax_backward", device="cpu", settings=limits,
                            prestarted=prestarted)
    assert document.verdict == "passed", (document.error, [c for c in document.checks if not c.passed])
    assert "plan" in prestarted._outcome.progress.marks, "the checks ran in the child started ahead"
    assert not prestarted.grading_dir.exists()


def test_a_prestarted_child_closed_without_a_job_ends_and_leaves_nothing():
    prestarted = PrestartedChild(device="cpu", settings=settings())
    _wait_until_loaded(prestarted, 3.0)
    prestarted.close()
    assert not prestarted._thread.is_alive() and not prestarted.grading_dir.exists()
    assert not prestarted._outcome.timed_out and prestarted._outcome.progress.first is None  # it never ran a plan


def test_a_prestarted_child_that_ended_before_its_job_is_replaced():
    prestarted = PrestartedChild(device="cpu", settings=settings())
    prestarted._cancel.set()  # killed while it waited (as if its sandbox died)
    prestarted._thread.join(timeout=30)
    assert not prestarted.waiting()
    document = grade_source(REFERENCE.read_bytes(), assignment="softmax_backward", device="cpu", settings=settings(),
                            prestarted=prestarted)
    assert document.verdict == "passed", document.error
    assert not prestarted.grading_dir.exists()


def test_a_prestarted_child_that_ends_just_before_the_hand_over_is_replaced(monkeypatch):
    prestarted = PrestartedChild(device="cpu", settings=settings())
    prestarted._cancel.set()
    prestarted._thread.join(timeout=30)
    # The grading looked while it still waited; it died before the plan was renamed into place.
    monkeypatch.setattr(prestarted, "waiting", lambda: True)
    document = grade_source(REFERENCE.read_bytes(), assignment="softmax_backward", device="cpu", settings=settings(),
                            prestarted=prestarted)
    assert document.verdict == "passed", document.error
    assert "plan" not in prestarted._outcome.progress.marks and not prestarted.grading_dir.exists()


def test_a_prestarted_child_handed_its_plan_while_still_loading_runs_it_once():
    prestarted = PrestartedChild(device="cpu", settings=settings())
    document = grade_source(REFERENCE.read_bytes(), assignment="softmax_backward", device="cpu", settings=settings(),
                            prestarted=prestarted)
    assert document.verdict == "passed", document.error
    marks = prestarted._outcome.progress.marks
    assert "plan" in marks and prestarted._outcome.progress.started, "the child started ahead ran the checks"


def test_a_prestarted_child_that_ends_while_the_plan_is_built_is_replaced(monkeypatch):
    prestarted = PrestartedChild(device="cpu", settings=settings())
    looks = []

    def waiting() -> bool:  # alive when the grading looks first, gone when the child is handed its run
        looks.append(True)
        if len(looks) > 1:
            prestarted._cancel.set()
            prestarted._thread.join(timeout=30)
            return False
        return True

    monkeypatch.setattr(prestarted, "waiting", waiting)
    document = grade_source(REFERENCE.read_bytes(), assignment="softmax_backward", device="cpu", settings=settings(),
                            prestarted=prestarted)
    assert document.verdict == "passed", document.error
    assert len(looks) == 2 and not prestarted.grading_dir.exists()

