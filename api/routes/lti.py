"""The LMS integration over HTTP (docs/lms.md): platform registrations (instructors), the
tool's key rotation (instructors), a sync run now and the sync states (staff).

The LTI protocol's own endpoints (``/lti/login``, ``/lti/launch``, ``/lti/jwks.json``,
``/lti/config.json``) are browser and platform facing: api/pages/routes/lti.py.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from api.deps import InstructorOnly, NowDep, SessionDep, SettingsDep, StaffOnly
from api.lti_schemas import (
    LtiRegistrationCreate,
    LtiRegistrationRead,
    LtiStatus,
    LtiSyncRead,
    lti_status,
)
from api.schemas import ErrorResponse
from submissions import audit
from submissions.lti import keys, registrations, sync

router = APIRouter(prefix="/api/v1/lti", tags=["lms"])

RegistrationId = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.get("/registrations", response_model=list[LtiRegistrationRead])
def list_registrations(principal: StaffOnly, session: SessionDep) -> list[LtiRegistrationRead]:
    """Every registered LMS."""
    return lti_status(session).registrations


@router.post("/registrations", response_model=LtiRegistrationRead, status_code=201,
             responses={409: {"model": ErrorResponse, "description": "lti_registration_taken"},
                        422: {"model": ErrorResponse, "description": "lti_registration_invalid "
                              "(a blank field, a URL that is not http(s))"}})
def create_registration(body: LtiRegistrationCreate, principal: InstructorOnly,
                        session: SessionDep, now: NowDep) -> LtiRegistrationRead:
    """Register an LMS (its issuer, the client id it gave the tool, its deployment ids and
    endpoints). Errors: 409 ``lti_registration_taken``, 422 ``lti_registration_invalid``."""
    row = registrations.register(session, **body.model_dump(), actor=principal.actor, now=now)
    return LtiRegistrationRead.of(row)


@router.delete("/registrations/{registration_id}", status_code=204,
               responses={404: {"model": ErrorResponse,
                                "description": "lti_registration_not_found"}})
def delete_registration(registration_id: RegistrationId, principal: InstructorOnly,
                        session: SessionDep, now: NowDep) -> None:
    """Remove a registration (its launches stop; the students it made stay). Errors: 404
    ``lti_registration_not_found``."""
    registrations.unregister(session, registration_id=registration_id, actor=principal.actor,
                             now=now)


@router.post("/keys/rotate")
def rotate_key(principal: InstructorOnly, session: SessionDep, settings: SettingsDep,
               now: NowDep) -> dict[str, str]:
    """A new signing key for the tool; the old one stays published for
    ``GRADER_LTI_KEY_GRACE_S``. Returns the new ``kid``."""
    kid = keys.rotate(session, settings=settings, now=now)
    audit.record(session, actor=principal.actor, action="lti.rotate_key", now=now,
                 target_type="lti_key", target_id=kid)
    return {"kid": kid}


@router.get("/status", response_model=LtiStatus)
def read_status(principal: StaffOnly, session: SessionDep) -> LtiStatus:
    """Registrations, each LMS course's roster (dropped students marked, what the last sync
    changed) and every student's score sync state (pending, synced, failed with its reason,
    no_identity) with attempts."""
    return lti_status(session)


@router.post("/sync", response_model=LtiSyncRead,
             responses={409: {"model": ErrorResponse, "description": "lti_sync_running"}})
def run_sync(request: Request, principal: StaffOnly, session: SessionDep,
             settings: SettingsDep, now: NowDep) -> LtiSyncRead:
    """Sync now: every course's roster from the LMS, then every due score to it (each step
    in its own transaction; none open while the LMS is asked). One sync runs at a time, in
    any process: 409 ``lti_sync_running`` while another (a scheduled round, another click)
    runs."""
    # End the request's transaction first: on SQLite it holds the write lock (BEGIN
    # IMMEDIATE, submissions/db.py) that the sync's own transactions need.
    session.commit()
    run = sync.run_sync_exclusive(request.app.state.session_factory, settings=settings, now=now,
                                  rosters=True)
    return LtiSyncRead(rosters={k: v.as_dict() for k, v in run.rosters.items()},
                       roster_errors=run.roster_errors, made_pending=run.made_pending,
                       sent=run.push.sent, failed=run.push.failed)
