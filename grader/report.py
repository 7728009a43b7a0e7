"""Human-readable rendering of a result document (rich tables), shared by `grader check` and
`grader submit`. Takes the JSON document only, so it works on results fetched over HTTP."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _error_cell(check: dict) -> str:
    ratio = check.get("max_err_over_tolerance")
    if ratio is None:
        return ""
    return f"{ratio:.2g}"


def render_result(document: dict, console: Console | None = None, source_name: str | None = None) -> None:
    """Print the per-check table, the error (if any), the captured output and the verdict line.

    Args:
        document: a result document (docs/architecture.md), e.g. from ``grade_source`` or
            ``GET /api/v1/submissions/{id}``'s ``result``.
        console: where to print (default: stdout).
        source_name: the graded file, named in the title.
    """
    console = console or Console()
    graded = f"{source_name}: " if source_name else ""
    table = Table(title=f"{graded}{document.get('assignment', '?')} on {document.get('device', '?')}", show_lines=False)
    table.add_column("", width=2)
    table.add_column("check")
    table.add_column("err/tol", justify="right")
    table.add_column("details", overflow="fold")
    for check in document.get("checks", []):
        mark = "[yellow]-[/]" if check.get("skipped") else ("[green]✓[/]" if check.get("passed") else "[red]✗[/]")
        table.add_row(mark, check.get("name", "?"), _error_cell(check), str(check.get("message", "")))
    if document.get("checks"):
        console.print(table)
    elif source_name:
        console.print(f"{source_name}: no check ran")
    error = document.get("error")
    if error:
        console.print(f"[red]error ({error.get('kind')})[/]: {error.get('message')}", markup=True, highlight=False)
    benchmark = document.get("benchmark")
    if benchmark and benchmark.get("headline"):
        headline = benchmark["headline"]
        console.print(f"benchmark: {headline.get('name')} = {headline.get('value')}")
    elif benchmark and benchmark.get("error"):
        console.print(f"benchmark: {benchmark['error']}")
    verdict = document.get("verdict", "?")
    colour = {"passed": "green", "failed": "red"}.get(verdict, "yellow")
    passed = sum(1 for c in document.get("checks", []) if c.get("passed"))
    total = len(document.get("checks", []))
    not_run = sum(1 for c in document.get("checks", []) if c.get("skipped"))
    console.print(
        f"[bold {colour}]{verdict}[/]: {passed}/{total} checks passed" + (f", {not_run} not run" if not_run else "") +
        f" (seed {document.get('seed')}, {document.get('duration_s', 0):.1f} s, sandbox: {document.get('sandbox')})"
    )
    log = document.get("log") or {}
    if log.get("text"):
        # Shown for passing runs too: students debug with print.
        shown = log["text"] if verdict != "passed" else log["text"][-1500:]
        console.print(f"[dim]captured output of the submission ({log.get('total_bytes', 0)} bytes; head and tail):[/]")
        console.print(shown[-4000:], markup=False, highlight=False)
