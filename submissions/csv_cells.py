"""Spreadsheet-safe CSV cells for every export the service offers.

Names, e-mails, roster ids, file names and any text a submission produced (an exception's
message, a hint built from it) reach the CSV files staff open in Excel, LibreOffice, Google
Sheets or an LMS's gradebook import. A cell whose text starts with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return is read there as a formula (``=HYPERLINK(...)``,
``=cmd|' /C calc'!A0``, DDE), so every text cell goes through ``safe_cell``: the OWASP rule
("CSV Injection", owasp.org/www-community/attacks/CSV_Injection) of prefixing such a cell
with a single quote, which every one of those programs shows as text and does not evaluate.
Quoting of commas, quotes and newlines stays the csv module's job.

Numbers (``int``, ``float``) are written as they are: a negative score is a number, not a
formula, and no export writes one as text. Done by hand rather than with a library: the
rule is one line, and the packages that offer it (defusedcsv) wrap the same line around the
csv module.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any, Protocol

#: The first characters that make a spreadsheet evaluate a cell (OWASP's list).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """`value` as a CSV cell no spreadsheet evaluates: text starting with a formula trigger
    (``FORMULA_TRIGGERS``) gets a leading ``'``; ``None`` becomes ``""``; numbers and other
    text are returned unchanged."""
    if value is None:
        return ""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


class SafeCsvWriter:
    """``csv.writer`` whose every row's text cells pass through ``safe_cell``.

    Args:
        buffer: where the CSV goes (``io.StringIO``, an open file).
        lineterminator: as ``csv.writer``'s (default ``"\\n"``, what every export writes).
    """

    def __init__(self, buffer: _Writable, *, lineterminator: str = "\n") -> None:
        self._writer = csv.writer(buffer, lineterminator=lineterminator)

    def writerow(self, row: Iterable[Any]) -> None:
        """Write one row, each cell neutralised."""
        self._writer.writerow([safe_cell(cell) for cell in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        """Write each row of `rows` (``writerow``)."""
        for row in rows:
            self.writerow(row)
