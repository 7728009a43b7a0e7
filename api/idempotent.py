"""The HTTP side of idempotent creation (submissions/idempotency.py): claim the request's
``Idempotency-Key`` or answer with the stored first answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api.deps import Principal
from submissions import idempotency
from submissions.settings import Settings

#: Header set on an answer replayed from an earlier request with the same key.
REPLAYED_HEADER = "Idempotent-Replayed"


def begin(session: Session, *, principal: Principal, key: str | None, request_sha256: str,
          settings: Settings, now: dt.datetime) -> idempotency.Claim | JSONResponse | None:
    """None without a key; the stored answer (a JSONResponse to return as it is) for a
    retry; else the claim to pass to `finish`.

    Raises:
        IdempotencyKeyReused: the key was used for another request (422).
    """
    if key is None:
        return None
    outcome = idempotency.claim(session, scope=principal.idempotency_scope, key=key,
                                request_sha256=request_sha256, now=now,
                                ttl_s=settings.idempotency_ttl_s)
    if isinstance(outcome, idempotency.StoredAnswer):
        return JSONResponse(outcome.body, status_code=outcome.status_code,
                            headers={REPLAYED_HEADER: "true"})
    return outcome


def finish(session: Session, claim: idempotency.Claim | None, *, status_code: int,
           body: Any) -> None:
    """Record the answer of a claimed key (nothing without one)."""
    if claim is not None:
        idempotency.record(session, claim_=claim, status_code=status_code, body=body)
