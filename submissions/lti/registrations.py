"""Platform registrations, managed by instructors (CLI `grader lti`, API ``/api/v1/lti``,
the ``/lti`` page). Each change is audited."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from submissions import audit, repository
from submissions.lti.errors import (
    LtiRegistrationInvalid,
    LtiRegistrationNotFound,
    LtiRegistrationTaken,
)
from submissions.lti.platform import forget_tokens
from submissions.models import LtiRegistration


def _url(value: str, field: str) -> str:
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc or len(value) > 1000:
        raise LtiRegistrationInvalid(f"{field} must be an http(s) URL, got {value!r}",
                                     field=field)
    return value


def register(session: Session, *, issuer: str, client_id: str, deployment_ids: Sequence[str],
             auth_login_url: str, auth_token_url: str, keyset_url: str,
             auth_audience: str | None = None, actor: audit.Actor,
             now: dt.datetime) -> LtiRegistration:
    """Register a platform.

    Raises:
        LtiRegistrationInvalid: a blank field or a URL that is not http(s).
        LtiRegistrationTaken: the issuer already has this client id.
    """
    issuer, client_id = issuer.strip(), client_id.strip()
    deployments = sorted({d.strip() for d in deployment_ids if d.strip()})
    if not issuer or not client_id or not deployments:
        raise LtiRegistrationInvalid("issuer, client id and at least one deployment id are needed")
    row = repository.insert_lti_registration(
        session, issuer=issuer, client_id=client_id, deployment_ids=deployments,
        auth_login_url=_url(auth_login_url, "auth_login_url"),
        auth_token_url=_url(auth_token_url, "auth_token_url"),
        keyset_url=_url(keyset_url, "keyset_url"),
        auth_audience=(auth_audience or "").strip() or None, created_at=now,
        created_by=actor.label)
    if row is None:
        raise LtiRegistrationTaken(f"{issuer} already has a registration with client id "
                                   f"{client_id}")
    audit.record(session, actor=actor, action="lti.register", now=now,
                 target_type="lti_registration", target_id=row.id,
                 details={"issuer": issuer, "client_id": client_id, "deployment_ids": deployments})
    return row


def unregister(session: Session, *, registration_id: int, actor: audit.Actor,
               now: dt.datetime) -> None:
    """Remove a registration and what was learned through it (its people stay students).

    Raises:
        LtiRegistrationNotFound: no such registration.
    """
    if not repository.delete_lti_registration(session, registration_id=registration_id):
        raise LtiRegistrationNotFound(f"no LTI registration {registration_id}")
    forget_tokens()
    audit.record(session, actor=actor, action="lti.unregister", now=now,
                 target_type="lti_registration", target_id=registration_id)
