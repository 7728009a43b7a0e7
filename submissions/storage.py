"""Where submission source goes for grading, and how captured output is capped.

The source of truth is the ``submissions.source_text`` column; a worker materialises it in a
fresh private temporary directory under a fixed name (never the client's file name).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TRUNCATION_MARKER = "\n[... {omitted} bytes omitted: output truncated, head and tail kept ...]\n"


@dataclass(frozen=True)
class CappedText:
    """Captured output reduced to at most a fixed number of bytes.

    `text` holds the head and the tail of the output, joined by a marker line that says how
    many bytes were omitted; `total_bytes` is the size of the full output.
    """

    text: str
    truncated: bool
    total_bytes: int
    omitted_bytes: int = 0  # cut here, bytes (not counting what was omitted before)


def cap_bytes(data: bytes, *, limit: int, omitted_before: int = 0) -> CappedText:
    """Keep the head and tail of `data` within `limit` bytes (plus the marker line).

    ``omitted_before``: bytes already left out of `data` by an earlier cap (the grader's
    CapturedLog.omitted_bytes), so that the marker states what is missing from the original
    output in all, not only what this cap removed.
    """
    if len(data) <= limit:
        return CappedText(data.decode("utf-8", "replace"), False, len(data))
    head = data[: limit // 2]
    tail = data[len(data) - (limit - limit // 2) :]
    cut = len(data) - len(head) - len(tail)
    marker = TRUNCATION_MARKER.format(omitted=cut + omitted_before)
    text = head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")
    return CappedText(text, True, len(data), cut)


def cap_text(text: str, *, limit: int, omitted_before: int = 0) -> CappedText:
    """`cap_bytes` for text (measured in UTF-8 bytes)."""
    return cap_bytes(text.encode("utf-8", "replace"), limit=limit, omitted_before=omitted_before)


def read_capped(path: Path, *, limit: int) -> CappedText:
    """Read a possibly huge file, holding only its head and tail (at most `limit` bytes)."""
    total = path.stat().st_size
    with path.open("rb") as stream:
        if total <= limit:
            return cap_bytes(stream.read(), limit=limit)
        head = stream.read(limit // 2)
        stream.seek(total - (limit - limit // 2))
        tail = stream.read()
    marker = TRUNCATION_MARKER.format(omitted=total - len(head) - len(tail))
    return CappedText(
        head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace"), True, total
    )


@dataclass(frozen=True)
class GradingWorkspace:
    """A private directory for one grading run.

    `source_path` is ``<root>/source/<assignment>.py``; the grader runs with ``cwd=root``,
    which holds no Python files, so the submission is never importable by accident.
    """

    root: Path
    source_path: Path
    stdout_path: Path
    stderr_path: Path


@contextlib.contextmanager
def grading_workspace(*, assignment: str, source_text: str) -> Iterator[GradingWorkspace]:
    """Create a fresh 0700 temporary directory holding the source; removed on exit.

    Raises:
        ValueError: if `assignment` is not a plain identifier (it becomes a file name).
    """
    if not assignment.isidentifier():
        raise ValueError(f"assignment name {assignment!r} is not an identifier")
    with tempfile.TemporaryDirectory(prefix="grading-") as directory:
        root = Path(directory)
        os.chmod(root, 0o700)
        source_dir = root / "source"
        source_dir.mkdir(mode=0o700)
        source_path = source_dir / f"{assignment}.py"
        source_path.write_text(source_text, encoding="utf-8")
        yield GradingWorkspace(
            root=root,
            source_path=source_path,
            stdout_path=root / "grader.stdout",
            stderr_path=root / "grader.stderr",
        )
