"""Fixtures for the grader tests: each corpus file is graded once per session, two at a time.

Nothing here is autouse: tests/grader/test_benchmark*.py share this folder.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from grading_support import Gradings

from grader.sandbox.bwrap import sandbox_problem
from grader.settings import GraderSettings


@pytest.fixture(scope="session")
def gradings() -> Iterator[Gradings]:
    """One pool for the session; every grading submitted to it runs once."""
    pool = Gradings()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def working_sandbox() -> None:
    """Fails (never skips) the tests that need bubblewrap where none works, with the reason
    and the fix (grader/sandbox/bwrap.py)."""
    problem = sandbox_problem(GraderSettings(sandbox="bwrap"))
    if problem is not None:
        pytest.fail(problem)
