"""A submission's report as a page shows it: the same content `grader check` and `grader
submit` print (grader/report/render.py): the summary first (grader.report.document.summarize: verdict,
first check to fix, its smallest failing input with got and expected, the hint), then the
per-check table (mark, name linked to its row of /checks, err/tol, tolerance bound, details;
each tolerance's derivation once, under the table), the
error with the end of its traceback, notes, the benchmark line, the verdict line, the captured
output; plus, on a GPU, each row's speed against its floor (grader.report.speed: achieved GB/s and
TFLOP/s, fraction of the floor; a table and a roofline-style chart, api/pages/charts.py
``speed_chart``) and one chart per benchmark row (api/pages/charts.py).

Built from the API's `SubmissionRead` (its stored result document, validated with the
grader's own `ResultDocument`); a grading that broke on our side has no document, and its
checks and error come from the submission's fields, as the command-line client does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import ValidationError

from api.pages.charts import Chart, SpeedChart, benchmark_charts, speed_chart
from api.pages.checks_doc import check_url
from api.schemas import SubmissionRead
from grader.manifest import MANIFESTS
from grader.report.document import CheckOutcome, ReportSummary, ResultDocument
from grader.report.render import error_vs_tolerance, failing_input
from grader.report.speed import RowSpeed, row_speeds

#: The end of a traceback that is shown (as `grader check` prints it).
TRACEBACK_CHARS = 2000


@dataclass(frozen=True)
class ToleranceNote:
    """One tolerance's derivation, shown once under the checks (rows link to ``#anchor``)."""

    anchor: str
    bound: str
    why: str


@dataclass(frozen=True)
class CheckRow:
    state: str  # passed | failed | skipped
    name: str
    err_tol: str
    max_abs_err: str
    tolerance: str  # the bound(s) only; the derivations are in Report.tolerances
    cases: int | None
    message: str
    docs_url: str = ""
    tolerance_notes: tuple[ToleranceNote, ...] = ()

    @property
    def mark(self) -> str:
        return {"passed": "✓", "failed": "✗"}.get(self.state, "–")


@dataclass(frozen=True)
class TracebackLine:
    text: str
    relevant: bool  # a frame in the submitted file, or the exception line


@dataclass(frozen=True)
class ErrorView:
    kind: str
    message: str
    line: int | None = None
    column: int | None = None
    traceback: list[TracebackLine] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    finished: bool
    title: str
    checks: list[CheckRow]
    error: ErrorView | None
    notes: list[str]
    benchmark_line: str | None
    verdict: str
    verdict_line: str
    log_text: str
    log_total_bytes: int
    log_omitted_bytes: int
    log_truncated: bool
    charts: list[Chart]
    #: What the report leads with (grader.report.document.summarize), None while there is no verdict.
    summary: ReportSummary | None = None
    summary_input: str | None = None  # grader.report.render.failing_input of the summary
    summary_url: str | None = None  # the first check to fix in /checks
    tolerances: list[ToleranceNote] = field(default_factory=list)
    #: Each benchmark row's speed against its floor (grader.report.speed.row_speeds), in row order.
    speeds: list[RowSpeed] = field(default_factory=list)
    speed_chart: SpeedChart | None = None
    speed_chart_compact: SpeedChart | None = None  # the same for phones


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.2g}"


def _tolerance_parts(check: CheckOutcome) -> list[tuple[str, str]]:
    """(bound, derivation) of each tolerance the check compared against: from
    ``details["tolerances"]`` (grader/checks/evaluate.py), else the ``tolerance`` text whole."""
    listed = check.details.get("tolerances")
    if isinstance(listed, list):
        parts = [(str(t.get("bound", "")), str(t.get("why", ""))) for t in listed if isinstance(t, dict)]
        if parts:
            return parts
    return [(check.tolerance, "")] if check.tolerance else []


def check_row(check: CheckOutcome, assignment: str = "",
              notes: dict[str, ToleranceNote] | None = None) -> CheckRow:
    """A table row of `check`; each derivation of its tolerances is added to `notes` once
    (keyed by the derivation: a row sum's bound is derived as its elements' is) and the row
    links to it."""
    state = "skipped" if check.skipped else ("passed" if check.passed else "failed")
    notes = {} if notes is None else notes
    linked = []
    for bound, why in _tolerance_parts(check):
        if why and why not in notes:
            notes[why] = ToleranceNote(anchor=f"tolerance-{len(notes) + 1}", bound=bound, why=why)
        if why and notes[why] not in linked:
            linked.append(notes[why])
    bounds = "; ".join(dict.fromkeys(bound for bound, _ in _tolerance_parts(check)))
    return CheckRow(state=state, name=check.name, err_tol=error_vs_tolerance(check),
                    max_abs_err=_fmt(check.max_abs_err), tolerance=bounds,
                    cases=check.cases, message=check.message,
                    docs_url=check_url(assignment, check.name) if assignment else "",
                    tolerance_notes=tuple(linked))


def traceback_lines(traceback: str | None, module_file: str | None) -> list[TracebackLine]:
    """The end of a traceback, each line marked relevant when it is in the submitted file's
    frames (the ``File ".../<module_file>"`` line and its source line) or is the final
    exception line."""
    if not traceback:
        return []
    lines = traceback[-TRACEBACK_CHARS:].rstrip("\n").split("\n")
    marked: list[TracebackLine] = []
    in_submission = False
    for index, text in enumerate(lines):
        stripped = text.strip()
        if stripped.startswith("File "):
            in_submission = bool(module_file) and f"{module_file}\"" in stripped
            relevant = in_submission
        else:
            relevant = in_submission or index == len(lines) - 1
        marked.append(TracebackLine(text=text, relevant=relevant))
    return marked


def build_report(submission: SubmissionRead) -> Report:
    """The report of `submission` (``finished`` False while queued or running)."""
    graded = f"{submission.filename}: " if submission.filename else ""
    manifest = MANIFESTS.get(submission.assignment)
    module_file = manifest.module_file if manifest else None
    document = submission.result_document()
    if document is None:
        return Report(finished=False, title=f"{graded}{submission.assignment}", checks=[],
                      error=None, notes=[], benchmark_line=None, verdict=submission.status,
                      verdict_line=f"no verdict yet ({submission.status})", log_text="",
                      log_total_bytes=0, log_omitted_bytes=0, log_truncated=False, charts=[])
    try:
        result = ResultDocument.model_validate(document)
    except ValidationError:
        return _basic_report(submission, graded)
    error = None
    if result.error is not None:
        error = ErrorView(kind=result.error.kind.value, message=result.error.message,
                          line=result.error.line, column=result.error.column,
                          traceback=traceback_lines(result.error.traceback, module_file))
    benchmark_line = None
    bench = result.benchmark
    if bench is not None and bench.headline is not None and bench.headline.value is not None:
        benchmark_line = f"benchmark: {bench.headline.name} = {bench.headline.value:.3f}"
    elif bench is not None and (bench.error or (bench.headline and bench.headline.reason)):
        benchmark_line = f"benchmark: no score: {bench.error or bench.headline.reason}"
    passed = sum(1 for c in result.checks if c.passed)
    not_run = sum(1 for c in result.checks if c.skipped)
    seed = f"seed {result.seed}, " if "seed" in result.model_fields_set else ""
    sandbox = f", sandbox: {result.sandbox}" if result.sandbox else ""
    verdict_line = (f"{result.verdict.value}: {passed}/{len(result.checks)} checks passed"
                    + (f", {not_run} not run" if not_run else "")
                    + f" ({seed}{result.duration_s:.1f} s{sandbox})")
    notes: dict[str, ToleranceNote] = {}
    rows = [check_row(c, result.assignment, notes) for c in result.checks]
    summary = result.summary
    speeds = row_speeds(result.benchmark)
    return Report(
        finished=True, title=f"{graded}{result.assignment} on {result.device or 'no device'}",
        checks=rows, error=error, notes=list(result.notes),
        benchmark_line=benchmark_line, verdict=result.verdict.value, verdict_line=verdict_line,
        log_text=result.log.text, log_total_bytes=result.log.total_bytes,
        log_omitted_bytes=result.log.omitted_bytes, log_truncated=result.log.truncated,
        charts=benchmark_charts(submission.benchmark),
        summary=summary, summary_input=failing_input(summary),
        summary_url=check_url(result.assignment, summary.check) if summary.check else None,
        tolerances=list(notes.values()),
        speeds=speeds, speed_chart=speed_chart(speeds, summary.furthest_from_floor),
        speed_chart_compact=speed_chart(speeds, summary.furthest_from_floor, compact=True),
    )


def _basic_report(submission: SubmissionRead, graded: str) -> Report:
    """A document this version cannot read (a newer grader): the stored checks and error."""
    checks = [CheckRow(state="skipped" if c.skipped else ("passed" if c.passed else "failed"),
                       name=c.name, err_tol="", max_abs_err="", tolerance="", cases=None,
                       message=c.message or "") for c in submission.checks]
    error = (ErrorView(kind=submission.error.kind, message=submission.error.message or "")
             if submission.error else None)
    log = submission.log
    return Report(finished=True, title=f"{graded}{submission.assignment}", checks=checks,
                  error=error, notes=[], benchmark_line=None, verdict=submission.status,
                  verdict_line=submission.status, log_text=(log.text or "") if log else "",
                  log_total_bytes=0, log_omitted_bytes=0,
                  log_truncated=bool(log and log.truncated),
                  charts=benchmark_charts(submission.benchmark))
