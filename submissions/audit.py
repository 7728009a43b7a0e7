"""Who acts, and the audit log of what staff did.

Every staff action (settings, accounts, tokens, roster imports, regrades, disqualifications,
final runs, grade exports) calls `record` in the same transaction as the action, so the
log has an event exactly for the actions that were committed.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from submissions import repository


@dataclass(frozen=True)
class Actor:
    """Who performs an action.

    Attributes:
        kind: ``instructor`` or ``ta`` (a staff account), ``bootstrap`` (the instructor of
            ``GRADER_INSTRUCTOR_TOKEN``), ``cli`` (local database access through `grader
            students` / `grader staff`), or ``student``.
        name: shown in the log and in ``*_by`` columns.
        staff_id: the staff account's id, when there is one.
    """

    kind: str
    name: str
    staff_id: int | None = None

    @property
    def label(self) -> str:
        """``name (kind)``, e.g. ``Grace (ta)``: what ``created_by``-style columns store."""
        return f"{self.name} ({self.kind})"


BOOTSTRAP_INSTRUCTOR = Actor(kind="bootstrap", name="GRADER_INSTRUCTOR_TOKEN")


def cli_actor() -> Actor:
    """The operator of a local command (`grader students ...`): ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return Actor(kind="cli", name=f"{user}@{socket.gethostname()}")


def record(
    session: Session,
    *,
    actor: Actor,
    action: str,
    now: dt.datetime,
    target_type: str | None = None,
    target_id: int | str | None = None,
    assignment: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append an audit event for `action` (dotted, e.g. ``submission.disqualify``) by
    `actor`. Never store secrets in `details` (tokens, seeds)."""
    repository.insert_audit_event(
        session, now=now, actor_kind=actor.kind, actor_staff_id=actor.staff_id,
        actor_name=actor.name, action=action, target_type=target_type,
        target_id=None if target_id is None else str(target_id), assignment=assignment,
        details=details,
    )
