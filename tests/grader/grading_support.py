"""Shared helpers of the grader tests: the grading pool, test settings, result-document readers.

A grading runs its submission in a separate sandboxed child process and takes ~5-15 s on the
CPU interpreter, so the suites submit all their files up front to one pool of two threads
(each thread waits on its own child process) and the tests read the cached result documents.
Imported by tests/grader/conftest.py (the session fixture ``gradings``) and the test modules.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.runner import grade_file
from grader.settings import GraderSettings

TESTS_DIR = Path(__file__).resolve().parents[1]
CORPUS = TESTS_DIR / "corpus" / "softmax_backward"
REFERENCE = TESTS_DIR.parent / "grader" / "assignments" / "softmax_backward" / "reference.py"
GRADING_WORKERS = 2  # the CI machine has 2 cores; every grading is one child process
GRADING_TIMEOUT_S = 900  # a hung grading fails its test instead of hanging the session

#: For tests that run a sandboxed child: they fail at once, with the reason and the fix, where no
#: bwrap works (tests/grader/conftest.py ``working_sandbox``); never skipped, since the grader
#: extra brings bubblewrap's wheel.
requires_bwrap = pytest.mark.usefixtures("working_sandbox")


def settings(**overrides) -> GraderSettings:
    """Grader settings for tests: always the bubblewrap sandbox, whatever GRADER_* says, and no
    fail fast (``fail_fast_s`` 0) unless a test asks for it: the corpus tests assert every
    check's outcome, which a run stopped after its first failure does not have
    (tests/grader/test_fail_fast.py tests the stop itself)."""
    return GraderSettings(**{"sandbox": "bwrap", "fail_fast_s": 0, **overrides})


# CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so two
# threads in ast.parse at once can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905; pytest-dev/pytest#10763). The grader parses the submission
# (runner.static_problem) in a pool thread while pytest parses sources for tracebacks in the main
# thread, so while the pool exists every ast.parse in this process takes one lock.
_AST_LOCK = threading.RLock()
_UNLOCKED_AST_PARSE = ast.parse


def _locked_ast_parse(*args, **kwargs):
    with _AST_LOCK:
        return _UNLOCKED_AST_PARSE(*args, **kwargs)


def strict_json(text: str):
    """``json.loads`` that refuses the non-JSON constants NaN, Infinity and -Infinity."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)


def grade_document(path: Path, *, seed: int, grader_settings: GraderSettings, assignment: str) -> dict:
    """``grade_file`` on the CPU interpreter, as the JSON object the worker stores (parsed from
    the document's strict JSON, so non-finite numbers arrive as the strings "Infinity"/"NaN")."""
    document = grade_file(Path(path), assignment=assignment, device="cpu", seed=seed, settings=grader_settings)
    return strict_json(document.to_json())


class Gradings:
    """Result documents of ``grade_file`` on the CPU interpreter, each computed once, in parallel."""

    def __init__(self, workers: int = GRADING_WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grading")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        ast.parse = _locked_ast_parse

    def submit(self, key: str, path: Path, *, seed: int = 0, grader_settings: GraderSettings | None = None,
               assignment: str = "softmax_backward") -> Future:
        """Queue one grading under ``key`` (a second submit of the same key is a no-op)."""
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._pool.submit(
                    grade_document, Path(path), seed=seed, grader_settings=grader_settings or settings(),
                    assignment=assignment,
                )
            return self._futures[key]

    def submit_call(self, key: str, function, *args, **kwargs) -> Future:
        """Queue ``function(*args, **kwargs)`` under ``key`` (e.g. a grading through the
        ``grader check`` command rather than in this process); a second submit is a no-op."""
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._pool.submit(function, *args, **kwargs)
            return self._futures[key]

    def result(self, key: str) -> dict:
        """The result document for ``key``; re-raises whatever the grading raised."""
        return self._futures[key].result(timeout=GRADING_TIMEOUT_S)

    def wait_all(self) -> None:
        for future in list(self._futures.values()):
            try:
                future.result(timeout=GRADING_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the test that reads it reports the failure
                pass

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        ast.parse = _UNLOCKED_AST_PARSE



# ---- helpers for reading result documents ----------------------------------------------------
def failed_checks(document: dict) -> set[str]:
    """Checks that ran and failed (a skipped check is neither failed nor passed)."""
    return {c["name"] for c in document["checks"] if not c["passed"] and not c["skipped"]}


def skipped_checks(document: dict) -> set[str]:
    return {c["name"] for c in document["checks"] if c["skipped"]}


def passed_checks(document: dict) -> set[str]:
    return {c["name"] for c in document["checks"] if c["passed"] and not c["skipped"]}


def check(document: dict, name: str) -> dict:
    matches = [c for c in document["checks"] if c["name"] == name]
    assert len(matches) == 1, f"check {name!r} appears {len(matches)} times in {[c['name'] for c in document['checks']]}"
    return matches[0]


def expected_failed_from_docstring(path: Path) -> set[str]:
    """Check names listed after 'Expected failed checks:' in a corpus file's module docstring."""
    text = path.read_text(encoding="utf-8")
    match = re.search(r"Expected failed checks:(.*?)(?:\n\s*\n|\"\"\")", text, re.S)
    assert match, f"{path.name}: no 'Expected failed checks:' line in its docstring"
    return {name.strip() for name in match.group(1).replace("\n", " ").split(",") if name.strip()}


def expected_hint_from_docstring(path: Path) -> str | None:
    """The phrase after 'Expected hint:' in a corpus file's module docstring: what the first
    hint of its report must name (its bug), or None for 'none' (no hint can tell its bug)."""
    match = re.search(r"^Expected hint: (.+)$", path.read_text(encoding="utf-8"), re.M)
    assert match, f"{path.name}: no 'Expected hint:' line in its docstring"
    phrase = match.group(1).strip()
    return None if phrase == "none" else phrase


def summary(document: dict) -> str:
    """A short description of a result document for assertion messages."""
    lines = [f"verdict={document.get('verdict')} error={document.get('error')}"]
    for c in document.get("checks", []):
        lines.append(f"  {'PASS' if c['passed'] else 'FAIL'} {c['name']}: {c['message'][:300]}")
    log = (document.get("log") or {}).get("text", "")
    if log:
        lines.append(f"  log tail: {log[-500:]!r}")
    return "\n".join(lines)
