"""Human-readable rendering of a result document (rich tables), shared by ``grader check`` and
``grader submit``. Takes the document only (grader/report/document.py), so it works on results fetched
over HTTP as well as on local gradings; needs only rich and pydantic."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from grader.report.benchmark_result import BenchmarkResult
from grader.report.document import CheckOutcome, ReportSummary, ResultDocument, summarize
from grader.report.speed import format_ceiling, format_fraction, format_rate, row_speeds

#: Where the checks and their tolerances are explained (the service serves it at /checks).
CHECKS_DOCUMENT = "docs/checks.md"


def error_vs_tolerance(check: CheckOutcome) -> str:
    """The ``err/tol`` cell: the worst error as a fraction of the tolerance, with the absolute
    error when it is known; "" for checks that do not compare values.

    When outputs were NaN or inf the cell says how many, and the worst ratio over the finite
    outputs (``details.worst_finite_err_over_tolerance``), so a NaN never hides how far off the
    rest is: e.g. ``NaN/inf x12; finite 3.1e+04``.
    """
    ratio = check.max_err_over_tolerance
    if ratio is None:
        return ""
    if math.isfinite(ratio):
        text = f"{ratio:.3g}"
        if check.max_abs_err is not None and math.isfinite(check.max_abs_err):
            text += f" ({check.max_abs_err:.2g})"
        return text
    count = check.details.get("non_finite_outputs")
    text = "NaN/inf" + (f" x{count}" if count else "")
    finite = check.details.get("worst_finite_err_over_tolerance")
    if isinstance(finite, (int, float)) and finite > 0:
        text += f"; finite {finite:.3g}"
    return text


def format_value(value: float | None) -> str:
    """A got/expected value as the summary shows it: 6 significant digits; NaN/inf as the
    check's message in the table writes them (``nan``, ``inf``, ``-inf``)."""
    if value is None:
        return "?"
    return f"{value:.6g}"


def failing_input(summary: ReportSummary) -> str | None:
    """``(4, 1000) float16 at [2, 17]: got 0.25, expected -0.25 (allowed 1e-06)``, or None
    when the summary has no compared input."""
    if summary.input is None:
        return None
    where = f" at [{', '.join(str(i) for i in summary.index)}]" if summary.index is not None else ""
    text = f"{summary.input}{where}"
    if summary.got is not None or summary.expected is not None:
        text += f": got {format_value(summary.got)}, expected {format_value(summary.expected)}"
        if summary.allowed is not None:
            text += f" (allowed |err| {summary.allowed:.3g})"
    return text


def render_summary(summary: ReportSummary, console: Console, docs: str = CHECKS_DOCUMENT) -> None:
    """The lines a report leads with (grader.report.document.summarize): verdict, the first check to
    fix (with `docs`, where it is explained), its smallest failing input with got and expected,
    the hint."""
    colour = {"passed": "green", "failed": "red"}.get(summary.verdict.value, "yellow")
    # Every interpolated text is escaped: a summary carries the submission's own words (an
    # exception's message), and Rich markup in them would style the report or raise
    # MarkupError after the result document was written.
    console.print(f"[bold {colour}]{escape(summary.line)}[/]", highlight=False)
    if summary.check is not None:
        console.print(f"  first to fix: [bold]{escape(summary.check)}[/] (see {escape(docs)})", highlight=False)
        where = failing_input(summary)
        if where:
            console.print(f"  smallest failing input: {escape(where)}", highlight=False)
    if summary.problem and summary.check is None:
        console.print(f"  {escape(summary.problem)}", highlight=False)
    if summary.hint:
        console.print(f"  [bold]hint[/]: {escape(summary.hint)}", highlight=False)
    if summary.speed:
        console.print(f"  {escape(summary.speed)}", highlight=False)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.3g} us"


def render_speeds(benchmark: BenchmarkResult, console: Console) -> None:
    """One line per benchmark row of the student's speed against the row's floor
    (grader.report.speed.row_speed: CUDA-graph median, achieved GB/s and TFLOP/s, fraction of the
    floor, and what the floor is made of); nothing for a benchmark without rows."""
    speeds = row_speeds(benchmark)
    if not speeds:
        return
    table = Table(title="speed against the floor (CUDA-graph timing; 100% = the floor)")
    table.add_column("row")
    table.add_column("your time", justify="right")
    table.add_column("achieved", justify="right")
    table.add_column("of floor", justify="right")
    table.add_column("floor", justify="right")
    table.add_column("floor made of", overflow="fold")
    for speed in speeds:
        name = speed.row + ("" if speed.ranked else " (not ranked)")
        floor = _seconds(speed.floor_s) + (f" ({speed.floor_kind})" if speed.floor_kind else "")
        table.add_row(*(Text(cell) for cell in (name, _seconds(speed.student_s), format_rate(speed),
                                                format_fraction(speed.fraction_of_floor), floor,
                                                format_ceiling(speed))))
    console.print(table)


def render_result(document: ResultDocument | dict[str, Any], console: Console | None = None,
                  source_name: str | None = None, *, quiet: bool = False, server: str | None = None) -> None:
    """Print the summary (``render_summary``), then the per-check table, the error (if any),
    each benchmark row's speed against its floor (``render_speeds``), the captured output and
    the verdict line; with `quiet`, the summary's line only. With
    `server` (a result fetched from the service), the summary links the first check to fix
    to its row of the service's ``/checks`` page; else it names docs/checks.md.

    Args:
        document: a result document, as the model or as its JSON object.
        console: where to print (default: stdout).
        source_name: the graded file, named in the title.

    Raises:
        pydantic.ValidationError: ``document`` is a dict that is not a result document.
    """
    if not isinstance(document, ResultDocument):
        document = ResultDocument.model_validate(document)
    console = console or Console()
    summary = summarize(document)
    if quiet:
        console.print(summary.line, markup=False, highlight=False)
        return
    docs = (f"{server.rstrip('/')}/checks#{document.assignment}-{summary.check}"
            if server and summary.check else CHECKS_DOCUMENT)
    render_summary(summary, console, docs)
    graded = f"{source_name}: " if source_name else ""
    table = Table(title=Text(f"{graded}{document.assignment} on {document.device}"), show_lines=False)
    table.add_column("", width=2)
    table.add_column("check")
    table.add_column("err/tol", justify="right")
    table.add_column("details", overflow="fold")
    for check in document.checks:
        mark = "[yellow]-[/]" if check.skipped else ("[green]✓[/]" if check.passed else "[red]✗[/]")
        table.add_row(mark, Text(check.name), Text(error_vs_tolerance(check)), Text(check.message))
    if document.checks:
        console.print(table)
    elif source_name:
        console.print(f"{source_name}: no check ran", markup=False, highlight=False)
    if document.error is not None:
        console.print(f"[red]error ({document.error.kind.value})[/]: {escape(document.error.message)}", highlight=False)
        if document.error.traceback:
            console.print(document.error.traceback[-2000:], markup=False, highlight=False)
    for note in document.notes:
        console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
    benchmark = document.benchmark
    if benchmark is not None:
        render_speeds(benchmark, console)
    if benchmark is not None and benchmark.headline is not None and benchmark.headline.value is not None:
        console.print(f"benchmark: {benchmark.headline.name} = {benchmark.headline.value:.3f}", markup=False)
    elif benchmark is not None and (benchmark.error or (benchmark.headline and benchmark.headline.reason)):
        reason = benchmark.error or (benchmark.headline.reason if benchmark.headline else None)
        console.print(f"benchmark: no score: {reason}", markup=False)
    colour = {"passed": "green", "failed": "red"}.get(document.verdict.value, "yellow")
    # A result read from the service has no seed (students never see one): leave it out.
    seed = f"seed {document.seed}, " if "seed" in document.model_fields_set else ""
    sandbox = f", sandbox: {document.sandbox}" if document.sandbox else ""
    passed = sum(1 for c in document.checks if c.passed)
    not_run = sum(1 for c in document.checks if c.skipped)
    console.print(
        f"[bold {colour}]{document.verdict.value}[/]: {passed}/{len(document.checks)} checks passed"
        + (f", {not_run} not run" if not_run else "")
        + escape(f" ({seed}{document.duration_s:.1f} s{sandbox})")
    )
    log = document.log
    if log.text:
        # Shown for passing runs too: students debug with print.
        shown = log.text if document.verdict.value != "passed" else log.text[-1500:]
        dropped = f"; {log.omitted_bytes} bytes not kept" if log.omitted_bytes else ""
        console.print(f"[dim]captured output of the submission ({log.total_bytes} bytes{dropped}; head and tail):[/]")
        console.print(shown[-4000:], markup=False, highlight=False)
