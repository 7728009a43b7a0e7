"""Spreadsheet-safe CSV cells: text from a submission or a person is data, never a formula."""

from __future__ import annotations

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value):  # noqa: ANN001, ANN201 - any cell value in, its text out
    """`value` as CSV cell text (None: empty), prefixed with ``'`` when it starts with
    ``= + - @`` tab or CR, which a spreadsheet would read as a formula (CSV injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text
