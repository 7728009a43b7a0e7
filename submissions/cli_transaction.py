"""One database transaction for a command of ``grader`` (submissions/cli.py and the LMS's
commands in submissions/lti/cli.py), and how a domain error ends it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The exit code of a command that could do nothing (a domain error; nothing was written).
EXIT_ERROR = 2


@contextmanager
def transaction() -> Iterator[Any]:
    """One migrated database session for a command: committed if the block succeeds."""
    from submissions.db import create_session_factory, engine_from_settings
    from submissions.migrations import upgrade_to_head
    from submissions.settings import get_settings

    settings = get_settings()
    upgrade_to_head(database_url=settings.database_url)
    engine = engine_from_settings(settings)
    try:
        with create_session_factory(engine).begin() as session:
            yield session
    finally:
        engine.dispose()


def run_in_transaction(action: Callable[[Any], int]) -> int:
    """Run `action(session)` in one transaction and return its exit code; a domain error
    (nothing is written) is printed with its code and gives ``EXIT_ERROR``."""
    from submissions.errors import DomainError

    try:
        with transaction() as session:
            return action(session)
    except DomainError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        for problem in exc.details.get("errors", []) if isinstance(exc.details, dict) else []:
            print(f"  line {problem.get('line')}: {problem.get('message')}", file=sys.stderr)
        return EXIT_ERROR
