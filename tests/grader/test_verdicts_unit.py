"""Unit tests of how verdicts and diagnoses are worded and stored (no child process, no Triton):
the verdict when a run ends after failures, hints only where the evidence supports them, the
coverage diagnosis, the err/tol cell for NaN outputs, strict JSON on every path, and inputs
without a degenerate first row."""

from __future__ import annotations

import math

import pytest
import torch
from grading_support import REFERENCE, strict_json

from grader import cli, runner
from grader.assignments.softmax_backward.inputs import UPSTREAM_MEANS, make_upstream
from grader.checks.evaluate import COVERAGE_MIN_RATIO, diagnose_coverage, hint_for
from grader.checks.plan import CheckEvidence, InputBank
from grader.checks.tolerance import Tolerance, compare
from grader.checks.verdicts import decide_verdict
from grader.report.benchmark_result import BenchmarkResult, Headline
from grader.report.document import CheckOutcome, ErrorKind, GradingError, ResultDocument, Verdict
from grader.report.render import error_vs_tolerance
from grader.runner import grade_source

TIMEOUT = GradingError(kind=ErrorKind.TIMEOUT, message="did not finish within 20 s")


def _outcome(name: str, passed: bool, skipped: bool = False) -> CheckOutcome:
    return CheckOutcome(name=name, passed=passed, skipped=skipped, message="m")


# ---- the verdict when a run ends early ---------------------------------------------------------
def test_failures_before_an_error_make_the_verdict_failed():
    outcomes = [_outcome("a", True), _outcome("b", False), _outcome("c", False, skipped=True)]
    assert decide_verdict(outcomes, TIMEOUT, 3, failures_before_error=True) is Verdict.FAILED
    # A run that ended at the import, or hit a resource limit that broke the calls after it:
    # what "failed" there is not evidence of the submission's arithmetic.
    assert decide_verdict(outcomes, TIMEOUT, 3, failures_before_error=False) is Verdict.ERROR
    document = ResultDocument(assignment="x", verdict=Verdict.FAILED, error=TIMEOUT, checks=outcomes)
    assert document.exit_code == 1  # failed, with the timeout beside the failures


def test_an_error_before_any_failure_stays_an_error():
    outcomes = [_outcome("a", True), _outcome("b", False, skipped=True)]
    assert decide_verdict(outcomes, TIMEOUT, 2) is Verdict.ERROR
    assert decide_verdict([_outcome("a", True), _outcome("b", True)], None, 2) is Verdict.PASSED


# ---- hints -------------------------------------------------------------------------------------
def test_hint_is_given_when_the_simpler_checks_passed():
    evidence = CheckEvidence(calls={}, bank=InputBank(), earlier={"autograd_fp32": _outcome("autograd_fp32", True)})
    assert hint_for(evidence, "load with strides", ("autograd_fp32",)) == " Hint: load with strides"


def test_hint_points_at_the_simpler_check_that_failed_instead():
    evidence = CheckEvidence(calls={}, bank=InputBank(), earlier={
        "autograd_fp32": _outcome("autograd_fp32", False), "half_precision": _outcome("half_precision", False)})
    text = hint_for(evidence, "load with strides", ("autograd_fp32", "half_precision"))
    assert text == " autograd_fp32 and half_precision fail too, on simpler inputs: fix that first."
    skipped = CheckEvidence(calls={}, bank=InputBank(), earlier={"autograd_fp32": _outcome("autograd_fp32", False, True)})
    assert hint_for(skipped, "h", ("autograd_fp32",)) == " Hint: h"  # a check that did not run says nothing


# ---- the coverage diagnosis --------------------------------------------------------------------
def _rows_wrong_from(row: int, factor: float):
    expected = torch.ones(4, 8, dtype=torch.float64)
    got = expected.clone()
    got[row:] *= 1 + factor
    tolerance = Tolerance(rtol=0.0, atol=1e-3, why="test")
    ratio = (got - expected).abs() / tolerance.allowed(expected, torch.zeros_like(expected))
    return got, ratio, expected


def test_rows_left_unwritten_are_called_a_short_grid():
    got, ratio, expected = _rows_wrong_from(1, factor=1.0)  # 1000x the allowed error
    text = diagnose_coverage(got, ratio > 1, expected, ratio)
    assert "Every row from row 1 on is wrong" in text and "too few programs" in text


def test_a_precision_error_a_little_over_the_tolerance_is_not_a_short_grid():
    # Row 0 right and rows 1.. a few times the tolerance off: what a precision error looks like
    # when row 0's error happens to be small (e.g. its dot is ~0); not a grid that stops short.
    got, ratio, expected = _rows_wrong_from(1, factor=3e-3)
    assert 1 < float(ratio.max()) < COVERAGE_MIN_RATIO
    assert diagnose_coverage(got, ratio > 1, expected, ratio) == ""


def test_upstream_gradient_has_a_large_mean_on_row_0():
    assert UPSTREAM_MEANS[0] != 0 and 0.0 in UPSTREAM_MEANS[1:]
    g = make_upstream(torch.Generator().manual_seed(0), 4, 4096)
    assert abs(float(g[0].mean()) - UPSTREAM_MEANS[0]) < 0.1 and abs(float(g[3].mean())) < 0.1


# ---- err/tol with NaN outputs -----------------------------------------------------------------
def test_err_over_tol_shows_nan_count_and_the_worst_finite_case():
    expected = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    got = torch.tensor([[float("nan"), 2.0, 3.5, 4.0]], dtype=torch.float64)
    result = compare(got, expected, torch.zeros_like(expected), Tolerance(rtol=0.0, atol=0.1, why="test"))
    assert math.isinf(result.max_ratio) and result.nan_count == 1
    assert result.max_finite_ratio == pytest.approx(5.0) and result.finite_worst_index == (0, 2)
    assert "worst finite output 5x the allowed error at [0,2]" in result.describe()
    cell = error_vs_tolerance(CheckOutcome(
        name="c", passed=False, message="m", max_err_over_tolerance=math.inf, max_abs_err=0.5,
        details={"non_finite_outputs": 1, "worst_finite_err_over_tolerance": 5.0}))
    assert cell == "NaN/inf x1; finite 5"


def test_err_over_tol_of_a_finite_failure_is_the_ratio_and_the_error():
    cell = error_vs_tolerance(CheckOutcome(name="c", passed=False, message="m", max_err_over_tolerance=3.25,
                                           max_abs_err=1e-4))
    assert cell == "3.25 (0.0001)"


# ---- strict JSON on every path -----------------------------------------------------------------
def test_non_finite_numbers_anywhere_in_a_document_are_strings():
    check = CheckOutcome(name="c", passed=False, message="m", max_abs_err=math.inf, max_err_over_tolerance=math.nan,
                         details={"x": -math.inf, "nested": {"y": [math.nan, 1.0]}})
    document = ResultDocument(
        assignment="softmax_backward", verdict=Verdict.FAILED, error=TIMEOUT, checks=[check],
        benchmark=BenchmarkResult(headline=Headline(name="h", value=math.nan), rows=[{"t": math.inf}]),
        timings_s={"compile": math.inf}, limits={"z": math.nan})
    parsed = strict_json(document.to_json())
    assert parsed["checks"][0]["max_err_over_tolerance"] == "NaN"
    assert parsed["checks"][0]["details"] == {"x": "-Infinity", "nested": {"y": ["NaN", 1.0]}}
    assert parsed["benchmark"]["rows"][0]["t"] == "Infinity" and parsed["timings_s"] == {"compile": "Infinity"}
    again = ResultDocument.model_validate(parsed)
    assert math.isnan(again.checks[0].max_err_over_tolerance) and again.verdict is Verdict.FAILED


def test_a_refused_source_is_strict_json():
    document = grade_source(b"def softmax_backward(y, g):\n    return (\n", assignment="softmax_backward", device="cpu")
    assert strict_json(document.to_json())["error"]["kind"] == "syntax"


def test_the_infrastructure_document_is_strict_json(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(runner, "grade_file", broken)
    assert cli.main(["check", str(REFERENCE), "--device", "cpu", "--json", "-", "--quiet"]) == 3
    assert strict_json(capsys.readouterr().out)["error"]["kind"] == "infrastructure"
