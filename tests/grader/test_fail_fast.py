"""Fail fast (issue #38; docs/checks.md, "Fail fast"): once a check has failed, the rest of the
run gets ``settings.fail_fast_s``; the verdict stays ``failed``, every check that ran keeps its
outcome, and the checks not reached say why.

The corpus tests run with fail fast off (grading_support.settings); here it is on.
"""

from __future__ import annotations

from grading_support import (
    CORPUS,
    TESTS_DIR,
    expected_failed_from_docstring,
    failed_checks,
    passed_checks,
    requires_bwrap,
    settings,
    skipped_checks,
    summary,
)

from grader.checks.plan import CheckEvidence, PlannedCheck
from grader.checks.verdicts import decide_verdict, evaluate_checks
from grader.children.check_children import PrestartedChild
from grader.report.document import CheckOutcome
from grader.runner import grade_source

PER_COLUMN = TESTS_DIR / "grader" / "fail_fast" / "wrong_axis_per_column.py"
WRONG_AXIS = CORPUS / "wrong" / "wrong_axis.py"


def _fail_fast(gradings, path):
    return gradings.submit(f"fail_fast/{path.name}", path, grader_settings=settings(fail_fast_s=10.0))


@requires_bwrap
def test_the_per_column_wrong_axis_kernel_gets_its_verdict_in_seconds(gradings):
    # 310 s on the CPU without fail fast (its later calls launch one program per column of the
    # long rows); the first check fails in seconds, then 10 s more.
    future = _fail_fast(gradings, PER_COLUMN)
    document = future.result(timeout=600)
    assert document["verdict"] == "failed" and document["error"] is None, summary(document)
    assert "example_two_element" in failed_checks(document), summary(document)
    not_run = [c for c in document["checks"] if c["skipped"] and "fail fast" in c["message"]]
    assert not_run and all("example_two_element failed" in c["message"] for c in not_run), summary(document)
    assert document["duration_s"] < 120, document["timings_s"]  # 22 s measured, loaded 2-core machine


@requires_bwrap
def test_a_check_that_failed_stays_failed_and_none_other_fails(gradings):
    # The corpus file's full run fails exactly its docstring's checks; stopped early, the checks
    # that ran have the outcomes they have in the full run, and the rest are not run.
    document = _fail_fast(gradings, WRONG_AXIS).result(timeout=600)
    expected = expected_failed_from_docstring(WRONG_AXIS)
    assert document["verdict"] == "failed", summary(document)
    assert failed_checks(document) and failed_checks(document) <= expected, summary(document)
    assert not passed_checks(document) & expected, summary(document)


@requires_bwrap
def test_the_child_started_ahead_of_its_job_is_stopped_too():
    # The worker's path: the checks run in a child started before the job came.
    limits = settings(fail_fast_s=10.0)
    prestarted = PrestartedChild(device="cpu", settings=limits)
    document = grade_source(PER_COLUMN.read_bytes(), assignment="softmax_backward", device="cpu", settings=limits,
                            prestarted=prestarted)
    assert "plan" in prestarted._outcome.progress.marks, "the checks ran in the child started ahead"
    assert document.verdict.value == "failed" and document.error is None, document.checks
    assert any(c.skipped and "fail fast" in c.message for c in document.checks), document.checks
    assert prestarted._outcome.cancelled and not prestarted.grading_dir.exists()


def _check(name: str, passed: bool) -> PlannedCheck:
    return PlannedCheck(name, calls=[object()], evaluate=lambda check, evidence: CheckOutcome(
        name=check.name, passed=passed, message="ran"))


class _Plan:
    def __init__(self, checks):
        self.checks = checks


def test_a_run_stopped_early_fails_its_unreached_checks_when_nothing_failed():
    # A forged "failed" report could stop a run whose checks all pass: it must not pass.
    plan = _Plan([_check("first", True), _check("second", True)])
    evidence = CheckEvidence(calls={}, bank=None)
    message = "not run: first failed, so the grading stopped 10 s later (fail fast)"
    outcomes = evaluate_checks(plan, evidence, {"first"}, None, stopped_early=message)
    assert [o.passed for o in outcomes] == [True, False] and not outcomes[1].skipped
    assert decide_verdict(outcomes, None, 2).value == "failed"
    real = evaluate_checks(_Plan([_check("first", False), _check("second", True)]), CheckEvidence(calls={}, bank=None),
                           {"first"}, None, stopped_early=message)
    assert real[1].skipped and real[1].message == message and not real[0].passed and not real[0].skipped
    assert skipped_checks({"checks": [o.model_dump() for o in real]}) == {"second"}
