"""docs/checks.md's table "What the CPU cannot judge", tested row by row: each row names a file
and what its CPU grading shows (`passed`, `not run: CHECK, ...`, `failed: CHECK, ...`,
`no benchmark`, separated by `;`); each file is graded on the CPU interpreter (the session's
pool, under test_corpora's keys and settings for corpus files, so each is graded once) and the
row's claim is asserted. A row without a file, or a file the table does not name, fails.

Also here: the libdevice row's words (the check names the function, a note says a GPU runs it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grading_support import TESTS_DIR, check, failed_checks, requires_bwrap, settings, skipped_checks, summary

from grader.harness.interpreter_compat import UNAVAILABLE_MARK

pytestmark = requires_bwrap

ROOT = TESTS_DIR.parent
DOC = ROOT / "docs" / "checks.md"
FIXTURES = TESTS_DIR / "grader" / "cpu_cannot_judge"


def _rows() -> list[tuple[str, Path, str, str]]:
    """(what, file, assignment, claim) of every row of the table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What the CPU cannot judge", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("What", "---"):
            continue
        found = re.fullmatch(r"`([^`]+)` \((\w+)\)", cells[2])
        assert found, f"a row's file cell must read `path` (assignment): {cells[2]!r}"
        rows.append((cells[0], ROOT / found.group(1), found.group(2), cells[3]))
    return rows


ROWS = _rows()


def _key(assignment: str, path: Path) -> str:
    return f"{assignment}/{path.parent.name}/{path.name}"  # test_corpora.key for corpus files


@pytest.fixture(scope="module")
def graded(gradings):
    for _, path, assignment, _ in ROWS:
        gradings.submit(_key(assignment, path), path, assignment=assignment,
                        grader_settings=settings(child_timeout_s=900))
    return gradings


def test_the_table_has_rows_and_every_fixture_is_in_it():
    assert len(ROWS) >= 5, ROWS
    named = {path for _, path, _, _ in ROWS}
    assert all(path.is_file() for path in named), [p for p in named if not p.is_file()]
    assert set(FIXTURES.glob("*.py")) <= named, "every file of tests/grader/cpu_cannot_judge shows a row"


@pytest.mark.parametrize("what, path, assignment, claim", [pytest.param(*row, id=row[1].stem) for row in ROWS])
def test_each_row_is_what_its_file_shows_on_the_cpu(what, path, assignment, claim, graded):
    document = graded.result(_key(assignment, path))
    assert document["error"] is None, summary(document)
    for part in (p.strip() for p in claim.split(";")):
        if part == "passed":
            assert document["verdict"] == "passed", summary(document)
        elif part == "no benchmark":
            assert document["benchmark"] is None and document["device"].startswith("cpu"), summary(document)
        elif part.startswith("not run:"):
            names = {n.strip() for n in part.removeprefix("not run:").split(",")}
            assert names <= skipped_checks(document), summary(document)
        elif part.startswith("failed:"):
            names = {n.strip() for n in part.removeprefix("failed:").split(",")}
            assert names <= failed_checks(document) and document["verdict"] == "failed", summary(document)
        else:
            raise AssertionError(f"unknown claim {part!r} in the row {what!r}")


def test_a_libdevice_function_the_cpu_cannot_evaluate_is_named_not_blamed(graded):
    path = FIXTURES / "libdevice_unavailable.py"
    document = graded.result(_key("gemm_epilogue", path))
    assert not failed_checks(document), summary(document)
    message = check(document, "float16_values")["message"]
    assert f"libdevice.jn {UNAVAILABLE_MARK}" in message, message
    assert any("libdevice.jn" in note and "GPU" in note for note in document["notes"]), document["notes"]
    # What ran judges the rest: the rejections still pass.
    assert check(document, "rejects_mismatch")["passed"], summary(document)
