"""CSV cells that a spreadsheet never reads as a formula (CWE-1236)."""

from __future__ import annotations

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value):  # noqa: ANN001, ANN201 - any cell value in, its text out
    """`value` as text, prefixed with ``'`` when it starts with = + - @ tab or CR."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text
