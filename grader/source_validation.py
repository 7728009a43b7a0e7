"""The one validator of a student's source file, shared by the upload API and ``grader check``.

Torch-free (the API imports it). It decides, without running anything, whether a file can be
graded: UTF-8 text, not empty, valid Python, and the assignment's function bound at module
level. Both entry points apply exactly these rules, so a file ``grader check`` accepts is never
refused by the service, and the reverse.

Parsing is serialised by a process-wide lock: CPython 3.11 can raise ``SystemError: AST
constructor recursion depth mismatch`` when two threads convert syntax trees at once (CPython
issue 106905; the recursion counter of the AST converter is shared by all threads), and the
API parses uploads in a thread pool. Parsing a 256 KiB file takes milliseconds, so the lock
costs little; tests/grader/test_source_validation.py shows 0 errors in 300 concurrent parses.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field
from typing import Literal

from grader.manifest import AssignmentManifest

ProblemKind = Literal["not_utf8", "empty", "syntax", "missing_function"]

_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class SourceProblem:
    """Why a file cannot be graded.

    Attributes:
        kind: ``not_utf8``, ``empty``, ``syntax`` or ``missing_function``.
        message: one sentence for the student.
        details: machine-readable extras (``line``/``column`` for syntax errors,
            ``byte_offset`` for bad UTF-8, ``function`` for a missing function, ``bytes``).
    """

    kind: ProblemKind
    message: str
    details: dict[str, object] = field(default_factory=dict)


class SourceRejected(ValueError):
    """The file cannot be graded; ``problem`` says why."""

    def __init__(self, problem: SourceProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def parse_module(source: str, filename: str) -> ast.Module:
    """``ast.parse`` under the process-wide lock (see the module docstring).

    Raises:
        SyntaxError: not valid Python.
        ValueError: NUL bytes in the source.
        RecursionError, MemoryError: pathologically deep nesting.
    """
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def _bound_names(statements: list[ast.stmt]) -> set[str]:
    """Names bound at module level by these statements, looking into compound statements that
    run at import time (if/else, try/except/finally, with, for, while, match) but not into
    function or class bodies."""
    names: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            for target in ([node.target] if isinstance(node, (ast.For, ast.AsyncFor))
                           else [item.optional_vars for item in node.items if item.optional_vars]):
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for block in ("body", "orelse", "finalbody"):
            inner = getattr(node, block, None)
            if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names |= _bound_names(inner)
        for handler in getattr(node, "handlers", []) or []:
            names |= _bound_names(handler.body)
        for case in getattr(node, "cases", []) or []:
            names |= _bound_names(case.body)
    # Walrus assignments at module level (e.g. in an if condition) bind module names too.
    for node in statements:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.NamedExpr) and isinstance(inner.target, ast.Name):
                    names.add(inner.target.id)
    return names


def validate_source(upload: bytes | str, manifest: AssignmentManifest) -> str:
    """Check a submission before it is queued or graded and return it as text.

    Args:
        upload: the file as uploaded (bytes, which must be UTF-8) or already decoded text.
        manifest: the assignment the file is for (its ``function`` must be bound at module
            level: ``def``, an assignment such as ``<function> = make_vjp()``, or an
            import ``from helpers import <function>``; also inside a top-level
            if/try/with block).

    Returns:
        The source text (a leading byte-order mark is kept: Python accepts it).

    Raises:
        SourceRejected: with ``problem.kind`` ``not_utf8``, ``empty``, ``syntax`` or
            ``missing_function``.
    """
    if isinstance(upload, bytes):
        try:
            source = upload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceRejected(SourceProblem(
                "not_utf8", f"the file is not UTF-8 text (invalid byte at offset {exc.start})",
                {"byte_offset": exc.start},
            )) from None
        size = len(upload)
    else:
        source = upload
        size = len(upload.encode("utf-8", "surrogatepass"))
    if not source.lstrip("\ufeff").strip():
        what = "is empty (0 bytes)" if size == 0 else "contains only whitespace"
        raise SourceRejected(SourceProblem(
            "empty", f"the file {what}: send your kernel's Python source", {"bytes": size}))
    try:
        module = parse_module(source.removeprefix("\ufeff"), manifest.module_file)
    except SyntaxError as exc:
        raise SourceRejected(SourceProblem(
            "syntax", f"not valid Python: {exc.msg} (line {exc.lineno}, column {exc.offset})",
            {"line": exc.lineno, "column": exc.offset},
        )) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        # ValueError: NUL bytes (Python 3.11); the others: pathologically deep nesting.
        raise SourceRejected(SourceProblem(
            "syntax", f"not valid Python: {type(exc).__name__}: {exc}", {"line": None, "column": None},
        )) from None
    if manifest.function not in _bound_names(module.body):
        raise SourceRejected(SourceProblem(
            "missing_function",
            f"the file defines no top-level `{manifest.function}` (write `def {manifest.signature}: ...`; "
            f"required by assignment {manifest.name!r})",
            {"function": manifest.function},
        ))
    return source
