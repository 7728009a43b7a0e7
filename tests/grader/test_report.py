"""The summary a report leads with (grader.report.document.summarize), as `grader check` prints it
(grader/report/render.py), from documents the real grader wrote (tests/service/fakes/documents)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from rich.console import Console

from grader.report.document import CheckOutcome, ErrorKind, GradingError, ResultDocument, Verdict, summarize
from grader.report.render import render_result

DOCUMENTS = Path(__file__).resolve().parents[1] / "service" / "fakes" / "documents"


def _document(name: str) -> ResultDocument:
    return ResultDocument.model_validate_json((DOCUMENTS / f"{name}.json").read_text())


def _printed(document: ResultDocument, **options) -> str:
    buffer = io.StringIO()
    render_result(document, Console(file=buffer, width=200), **options)
    return buffer.getvalue()


def test_the_sign_bug_leads_with_its_first_check_smallest_input_values_and_hint() -> None:
    summary = summarize(_document("flipped_sign"))
    assert summary.line == "failed: fix example_two_element first; 4/13 checks passed, 2 not run"
    assert (summary.check, summary.input, summary.index) == ("example_two_element", "y=[0.25,0.75], g=[2,-1]", [0, 0])
    assert (summary.got, summary.expected) == (-0.5625, 0.5625)
    assert summary.hint == "Your output matches y*(sum(y*g) - g): the sign of the subtraction is flipped."
    assert summary.hint not in summary.problem  # the diagnosis is said once, as the hint


def test_the_summary_is_written_with_the_document_and_derived_again_when_read() -> None:
    document = _document("flipped_sign")
    written = json.loads(document.to_json())
    assert written["summary"]["check"] == "example_two_element"
    forged = {**written, "summary": {**written["summary"], "check": "nothing", "line": "passed"}}
    assert ResultDocument.model_validate(forged).summary == document.summary


def test_cli_prints_the_summary_first_and_quiet_prints_one_line() -> None:
    document = _document("flipped_sign")
    text = _printed(document)
    lines = text.splitlines()
    assert lines[0] == "failed: fix example_two_element first; 4/13 checks passed, 2 not run"
    assert "smallest failing input: y=[0.25,0.75], g=[2,-1] at [0, 0]: got -0.5625, expected 0.5625" in text
    assert text.index("hint: Your output matches") < text.index("┏")  # above the table
    assert _printed(document, quiet=True) == document.summary.line + "\n"


def test_a_nan_output_reads_the_same_in_the_summary_and_the_table() -> None:
    """Issue 38: the GEMM tanh-overflow bug's stored report said `got ?` in its summary where
    the table said `nan` (a stored NaN in `details` reads back as the text "NaN").
    unstable_tanh.json: tests/corpus/gemm_epilogue/wrong/unstable_tanh.py as `grader check
    --device cpu --json` wrote it."""
    stored = ResultDocument.model_validate_json((DOCUMENTS / "unstable_tanh.json").read_text())
    first = next(c for c in stored.checks if c.name == stored.summary.check)
    assert first.details["failure"]["got"] == "NaN"  # as stored
    assert math.isnan(stored.summary.got)
    text = _printed(stored)
    assert "got nan, expected 63.8516" in text and "got ?" not in text
    assert "got nan" in first.message  # the table's row writes it the same way

    # half_precision compares (4,1000), (3,4097), (4,65536), (4,4096), (1,65536) in fp16 and bf16.
    summary = summarize(_document("half_precision_dot"))
    assert (summary.check, summary.input) == ("half_precision", "(4, 1000) float16")
    assert abs(summary.got - summary.expected) > summary.allowed and math.isfinite(summary.allowed)


def test_an_error_without_failures_and_a_check_without_details_are_summarised() -> None:
    timeout = ResultDocument(assignment="a", verdict=Verdict.ERROR, checks=[], error=GradingError(
        kind=ErrorKind.TIMEOUT, message="did not return on a 1x2 input: an infinite loop? More words."))
    assert summarize(timeout).line == "error (timeout): did not return on a 1x2 input: an infinite loop?"
    assert summarize(timeout).check is None and summarize(timeout).problem.startswith("did not return")
    plain = ResultDocument(assignment="a", verdict=Verdict.FAILED, checks=[
        CheckOutcome(name="ok", passed=True, message="fine"),
        CheckOutcome(name="raises", passed=False, message="(3, 4) float32: raised ValueError: x. Hint: check shapes")])
    summary = summarize(plain)
    # No structured hint: the message is not split (its "Hint:" may be the student's own text).
    assert (summary.check, summary.input, summary.problem, summary.hint) == (
        "raises", None, "(3, 4) float32: raised ValueError: x. Hint: check shapes", None)
    hinted = ResultDocument(assignment="a", verdict=Verdict.FAILED, checks=[CheckOutcome(
        name="raises", passed=False, message="(3, 4) float32: raised ValueError: x. Hint: check shapes",
        details={"hint": "check shapes"})])
    summary = summarize(hinted)
    assert (summary.problem, summary.hint) == ("(3, 4) float32: raised ValueError: x.", "check shapes")
    assert summarize(ResultDocument(assignment="a", verdict=Verdict.PASSED, checks=plain.checks[:1])).line == \
        "passed: 1/1 checks passed"


MARKUP = "[/] [bold red]x[/bold red] [link=https://evil.example]y[/link] \\"


def test_child_text_with_rich_markup_is_printed_as_data_everywhere_in_the_report() -> None:
    # Every text a submission can put into its result document (an exception's message, a
    # progress or autotuner name inside an error, a note, its captured output, the file name)
    # holds markup that would raise MarkupError or style the report if it were interpreted.
    document = _document("flipped_sign").model_copy(deep=True)
    first = next(c for c in document.checks if not c.passed)
    first.message = f"raised ValueError: {MARKUP}"
    first.details = {**first.details, "hint": f"hint {MARKUP}"}
    document.error = GradingError(kind=ErrorKind.IMPORT, message=f"importing raised {MARKUP}",
                                  traceback=f"Traceback {MARKUP}")
    document.notes = [f"note {MARKUP}"]
    document.log.text = f"printed {MARKUP}"
    printed = _printed(document, source_name=f"sub{MARKUP}.py")
    for text in (f"raised ValueError: {MARKUP}", f"importing raised {MARKUP}", f"note {MARKUP}",
                 f"printed {MARKUP}", f"hint {MARKUP}"):
        assert text.replace(" ", "") in printed.replace(" ", "").replace("\n", ""), text
    # The error's summary line and a timeout whose message names a compilation: same.
    error_only = ResultDocument(assignment="a", verdict=Verdict.ERROR, checks=[], error=GradingError(
        kind=ErrorKind.TIMEOUT, message=f"compiling then: kernel_{MARKUP} for 3 s"))
    assert f"kernel_{MARKUP}" in _printed(error_only)


def test_the_client_renders_markup_in_names_reasons_and_messages_as_data() -> None:
    from client.cli import print_api_error
    from client.http import ApiError

    buffer = io.StringIO()
    print_api_error(Console(file=buffer, width=300), ApiError(status=422, code="x", message=f"bad {MARKUP}", details={}))
    assert f"bad {MARKUP}" in buffer.getvalue()
