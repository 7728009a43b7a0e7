"""Assignment settings rows (one per entry of grader/manifest.py, created on first use)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from submissions.models import Assignment

__all__ = ["ensure_assignment", "get_assignment", "list_assignments", "update_assignment"]


def get_assignment(session: Session, *, name: str) -> Assignment | None:
    """The settings row of assignment `name`, or None if it was never touched."""
    return session.get(Assignment, name)


def ensure_assignment(session: Session, *, name: str, now: dt.datetime) -> Assignment:
    """The settings row of `name`, inserted with the defaults if missing.

    Concurrency: ``INSERT ... ON CONFLICT DO NOTHING`` on the primary key, so two requests
    that touch a new assignment at once both succeed and see one row. The caller checks
    that `name` is in the manifest.
    """
    row = session.get(Assignment, name)
    if row is not None:
        return row
    dialect_insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(
        dialect_insert(Assignment)
        .values(name=name, created_at=now)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    return session.get(Assignment, name, populate_existing=True)


def list_assignments(session: Session, *, names: Sequence[str]) -> dict[str, Assignment]:
    """The existing settings rows among `names`, by name."""
    rows = session.scalars(select(Assignment).where(Assignment.name.in_(list(names)))).all()
    return {row.name: row for row in rows}


def update_assignment(
    session: Session, *, name: str, values: dict[str, Any], now: dt.datetime, by: str
) -> None:
    """Write `values` (column -> value) to the row of `name` (which must exist), stamping
    ``updated_at`` and ``updated_by``."""
    session.execute(
        update(Assignment)
        .where(Assignment.name == name)
        .values(**values, updated_at=now, updated_by=by)
        .execution_options(synchronize_session="fetch")
    )
