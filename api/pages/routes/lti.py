"""The LTI 1.3 endpoints a platform and a browser reach (docs/lms.md), and the staff's
``/lti`` page.

- ``GET|POST /lti/login``: OIDC third-party login initiation (redirect to the platform, with
  the state's cookie; inside a frame, a page that reopens it in a new window instead);
- ``POST /lti/launch``: the id_token's verification (with the state's cookie), the sign-in
  (a ``gls_`` session in the pages' cookie), then the assignment the link points to; a Deep
  Linking request shows the assignments to place;
- ``POST /lti/deep-link``: the chosen assignment, sent back to the LMS as a signed
  LtiDeepLinkingResponse;
- ``GET /lti/jwks.json``: the tool's public keys; ``GET /lti/config.json``: Canvas's
  developer key JSON;
- ``/lti`` (staff): registrations, the tool's URLs, each course's roster sync and every
  student's score sync state; sync now, rotate the key (instructors);
- ``/me/token``: a student's own CLI token, shown by rotating it (a student who came
  through the LMS never saw one).

A refused launch is an error page naming why (api/pages/rendering.py, PageRoute).

The state's cookie binds a launch to the browser that started its login (login CSRF: IMS
Security Framework 5.1.1.2, as pylti1p3 and ltijs do it): one cookie per login, named after
its state (two logins at once, e.g. two tabs, do not overwrite each other's), holding the
state, for LOGIN_STATE_TTL_S, deleted by the launch that uses it. ``HttpOnly``;
``SameSite=None; Secure`` outside development, because the launch is a cross-site POST
from the LMS (Lax would withhold it; None is refused without Secure); and there, prefixed
``__Host-``, which means ``Path=/`` and no ``Domain``: a sibling host under the university's
domain cannot plant one (cookie tossing would let it replay its own state in a victim's
browser), which a narrower path cannot give. In development (plain http) it is ``Lax``
without Secure: that works when the LMS is on the same site (a local test platform).

Browsers that block third-party cookies drop such a cookie when the LMS shows the tool in
an iframe; the pages refuse to be framed anyway (``frame-ancestors 'none'``). So a login
initiation the browser says is for a frame (``Sec-Fetch-Dest``) answers a page that opens
the same login in a new window (top level, where the cookie is first-party) instead of
starting it; the 1EdTech platform-storage postMessage flow (``lti_storage_target``) would
only save the state while the rest of the tool still could not run in the frame.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

import jwt
from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, Response

from api.deps import LTI_SESSION_PREFIX, NowDep, SessionDep, SettingsDep
from api.lti_schemas import LtiRegistrationCreate, dropped_student_ids, lti_status
from api.pages.rendering import CONTENT_SECURITY_POLICY, PageRoute, redirect, render
from api.pages.routes.staff import FormInvalid, validated
from api.pages.security import (
    SESSION_COOKIE,
    CheckedForm,
    FormFields,
    StaffViewer,
    ViewerDep,
    cookie_secure,
    csrf_token_for,
    read_form,
    set_session_cookie,
)
from grader.manifest import MANIFESTS
from submissions import assignments, audit, repository, service
from submissions.errors import InstructorRequired, StudentRequired
from submissions.lti import keys, launch, people, registrations, sync
from submissions.lti.errors import LtiLaunchRefused, LtiStateInvalid
from submissions.lti.launch import LOGIN_STATE_TTL_S
from submissions.lti.platform import TOOL_SCOPES
from submissions.settings import Settings

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])
NO_STORE = {"Cache-Control": "no-store"}
_DEEP_LINK_MESSAGE = b"kernel-grader lti deep link v1"


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


@router.get("/lti/jwks.json")
def read_tool_jwks(session: SessionDep, settings: SettingsDep, now: NowDep) -> JSONResponse:
    """The tool's public keys (the platform verifies the tool's signed messages with them)."""
    return JSONResponse(keys.jwks(session, settings=settings, now=now),
                        headers={"Cache-Control": "max-age=300"})


def tool_configuration(base: str) -> dict[str, Any]:
    """Canvas's developer key JSON ("Paste JSON"); Moodle's form takes the same URLs."""
    launch_url = f"{base}/lti/launch"
    # A new tab: the pages refuse to be framed (frame-ancestors 'none', api/pages/rendering.py).
    deep = {"message_type": "LtiDeepLinkingRequest", "target_link_uri": launch_url,
            "windowTarget": "_blank"}
    return {
        "title": "Kernel grader",
        "description": "Upload a Triton kernel; a GPU worker grades it; the score comes back.",
        "oidc_initiation_url": f"{base}/lti/login",
        "target_link_uri": launch_url,
        "public_jwk_url": f"{base}/lti/jwks.json",
        "scopes": list(TOOL_SCOPES),
        "extensions": [{
            "platform": "canvas.instructure.com",
            "privacy_level": "public",
            "settings": {"placements": [
                {"placement": "link_selection", **deep},
                {"placement": "assignment_selection", **deep},
            ]},
        }],
        "custom_fields": {},
    }


@router.get("/lti/config.json")
def read_tool_configuration(request: Request) -> JSONResponse:
    """The configuration JSON to paste into Canvas (docs/lms.md)."""
    return JSONResponse(tool_configuration(_base(request)))


STATE_COOKIE_PREFIX = "grader_lti_state_"
#: The ``Sec-Fetch-Dest`` values of a request made to fill a frame, not a window.
_FRAME_DESTINATIONS = frozenset({"iframe", "frame", "embed", "object", "fencedframe"})
#: The login initiation's fields a new window's login repeats (LTI 1.3 section 4.1).
_LOGIN_FIELDS = ("iss", "login_hint", "target_link_uri", "lti_message_hint",
                 "lti_deployment_id", "client_id")


def state_cookie_name(state: str, settings: Settings) -> str:
    """The cookie that holds `state` (module docstring): ``__Host-`` prefixed when Secure."""
    prefix = "__Host-" if cookie_secure(settings) else ""
    return f"{prefix}{STATE_COOKIE_PREFIX}{state}"


def _state_cookie_options(settings: Settings) -> dict[str, Any]:
    secure = cookie_secure(settings)
    return {"path": "/", "httponly": True, "secure": secure,
            "samesite": "none" if secure else "lax"}


def _login(request: Request, session: Any, params: dict[str, str], now: Any,
           settings: Settings) -> Response:
    if request.headers.get("sec-fetch-dest", "").lower() in _FRAME_DESTINATIONS:
        # The pages cannot run in a frame: this page (which may be framed: it only holds
        # a button that repeats the LMS's own login request) reopens the login on top.
        headers = {**NO_STORE, "Content-Security-Policy": CONTENT_SECURITY_POLICY.replace(
            "frame-ancestors 'none'", "frame-ancestors *")}
        return render(request, "lti_new_window.html", viewer=None, headers=headers,
                      method=request.method.lower(),
                      fields={k: params[k] for k in _LOGIN_FIELDS if params.get(k)})
    start = launch.initiate_login(session, params=params, now=now,
                                  redirect_uri=f"{_base(request)}/lti/launch")
    response = Response(status_code=302, headers={"Location": start.url, **NO_STORE})
    response.set_cookie(state_cookie_name(start.state, settings), start.state,
                        max_age=LOGIN_STATE_TTL_S, **_state_cookie_options(settings))
    return response


@router.get("/lti/login")
def start_login(request: Request, session: SessionDep, settings: SettingsDep,
                now: NowDep) -> Response:
    """OIDC login initiation sent as a GET."""
    return _login(request, session, dict(request.query_params), now, settings)


@router.post("/lti/login")
def start_login_form(request: Request, session: SessionDep, settings: SettingsDep,
                     now: NowDep, form: Annotated[FormFields, Depends(read_form)]) -> Response:
    """OIDC login initiation sent as a form POST."""
    return _login(request, session, {k: v[0] for k, v in form.items() if v}, now, settings)


def _seal(payload: dict[str, Any], settings: Settings) -> str:
    body = base64.urlsafe_b64encode(json.dumps(payload, sort_keys=True).encode()).decode()
    mac = hmac.new(settings.deployment_seed.get_secret_value().encode(),
                   _DEEP_LINK_MESSAGE + body.encode(), hashlib.sha256).hexdigest()
    return f"{body}.{mac}"


def _unseal(value: str, settings: Settings) -> dict[str, Any]:
    body, _, mac = value.partition(".")
    expected = hmac.new(settings.deployment_seed.get_secret_value().encode(),
                        _DEEP_LINK_MESSAGE + body.encode(), hashlib.sha256).hexdigest()
    if not mac or not hmac.compare_digest(mac, expected):
        raise LtiStateInvalid("this placement form did not come from a launch here; start it "
                              "again from the LMS")
    return json.loads(base64.urlsafe_b64decode(body.encode()))


@router.post("/lti/launch")
def receive_launch(request: Request, session: SessionDep, settings: SettingsDep, now: NowDep,
                   form: Annotated[FormFields, Depends(read_form)]) -> Response:
    """The platform's launch: verify, sign the person in, land on the assignment (students:
    the upload form; staff: the leaderboard), or show the Deep Linking picker."""
    if form.first("error"):
        raise LtiLaunchRefused(f"the LMS refused the login: {form.first('error')} "
                               f"{form.first('error_description')}".strip())
    state = form.first("state")
    cookie = state_cookie_name(state, settings) if state else None
    verified = launch.verify_launch(session, id_token=form.first("id_token"), state=state,
                                    browser_state=request.cookies.get(cookie) if cookie
                                    else None, settings=settings, now=now)
    done = launch.complete_launch(session, launch=verified, settings=settings, now=now)
    if done.deep_linking is not None:
        sealed = _seal({"registration_id": verified.registration.id,
                        "deployment_id": verified.deployment_id,
                        "return_url": str(done.deep_linking.get("deep_link_return_url") or ""),
                        "data": done.deep_linking.get("data"), "exp": time.time() + 3600},
                       settings)
        response: Response = render(
            request, "lti_deep_link.html", viewer=None, headers=NO_STORE,
            assignment_names=list(MANIFESTS), titles={n: m.title for n, m in MANIFESTS.items()},
            sealed=sealed, csrf_token=csrf_token_for(done.session_token))
    elif done.role == people.STUDENT:
        response = redirect(f"/submit?assignment={done.assignment}" if done.assignment
                            else "/")
    else:
        response = redirect(f"/leaderboard?assignment={done.assignment}" if done.assignment
                            else "/lti")
    set_session_cookie(response, done.session_token, settings)
    if cookie is not None:  # always: verify_launch refuses a launch without a state
        response.delete_cookie(cookie, **_state_cookie_options(settings))
    return response


@router.post("/lti/deep-link")
def return_deep_link(request: Request, checked: CheckedForm, session: SessionDep,
                     settings: SettingsDep, now: NowDep) -> Response:
    """The chosen assignment as a signed LtiDeepLinkingResponse, posted back to the LMS."""
    viewer, form = checked
    if not viewer.is_staff:
        raise InstructorRequired("only course staff can place grader assignments in the LMS")
    context = _unseal(form.first("sealed"), settings)
    if context.get("exp", 0) < time.time() or not context.get("return_url"):
        raise LtiStateInvalid("this placement form expired; start it again from the LMS")
    name = form.first("assignment")
    if name not in MANIFESTS:
        raise FormInvalid(f"no assignment {name!r}")
    registration = repository.get_lti_registration(session,
                                                   registration_id=context["registration_id"])
    if registration is None:
        raise LtiStateInvalid("this LMS is no longer registered")
    key = keys.signing_key(session, settings=settings, now=now)
    policy = assignments.points_policy(assignments.load(session, name=name, now=now))
    item = {"type": "ltiResourceLink", "title": MANIFESTS[name].title[:200],
            "url": f"{_base(request)}/lti/launch?assignment={name}",
            "custom": {"assignment": name},
            "lineItem": {"scoreMaximum": policy.max_total, "label": MANIFESTS[name].title[:200],
                         "resourceId": name, "tag": "kernel-grader"}}
    issued = int(time.time())
    claims = {"iss": registration.client_id, "aud": [registration.issuer], "iat": issued,
              "exp": issued + 300, "nonce": secrets.token_urlsafe(16),
              launch.CLAIM_DEPLOYMENT: context["deployment_id"],
              launch.CLAIM_MESSAGE_TYPE: "LtiDeepLinkingResponse",
              launch.CLAIM_VERSION: "1.3.0",
              "https://purl.imsglobal.org/spec/lti-dl/claim/content_items": [item]}
    if context.get("data") is not None:
        claims["https://purl.imsglobal.org/spec/lti-dl/claim/data"] = context["data"]
    token = jwt.encode(claims, key.private_key, algorithm="RS256", headers={"kid": key.kid})
    parts = urlsplit(context["return_url"])
    origin = f"{parts.scheme}://{parts.netloc}"
    csp = CONTENT_SECURITY_POLICY.replace("form-action 'self'", f"form-action 'self' {origin}")
    audit.record(session, actor=viewer.principal.actor, action="lti.deep_link", now=now,
                 target_type="assignment", target_id=name, assignment=name)
    return render(request, "lti_deep_link_return.html", viewer=viewer,
                  headers={**NO_STORE, "Content-Security-Policy": csp},
                  return_url=context["return_url"], jwt=token, assignment=name)


# ----------------------------------------------------------------------- staff page


@router.get("/lti")
def read_lti_page(request: Request, viewer: StaffViewer, session: SessionDep) -> Response:
    """The LMS integration as staff see it."""
    base = _base(request)
    return render(request, "lti.html", viewer=viewer, status=lti_status(session), base=base,
                  configuration=json.dumps(tool_configuration(base), indent=2),
                  dropped=dropped_student_ids(session), error=None)


def _instructor(viewer: Any) -> None:
    if not viewer.is_instructor:
        raise InstructorRequired("only an instructor can change the LMS registrations and keys")


@router.post("/lti/registrations")
def create_registration(request: Request, checked: CheckedForm, session: SessionDep,
                        now: NowDep) -> Response:
    """Register an LMS from the page's form."""
    viewer, form = checked
    _instructor(viewer)
    body = validated(LtiRegistrationCreate, {
        "issuer": form.first("issuer"), "client_id": form.first("client_id"),
        "deployment_ids": [d for d in form.first("deployment_ids").replace(",", " ").split() if d],
        "auth_login_url": form.first("auth_login_url"),
        "auth_token_url": form.first("auth_token_url"), "keyset_url": form.first("keyset_url"),
        "auth_audience": form.first("auth_audience") or None})
    registrations.register(session, **body.model_dump(), actor=viewer.principal.actor, now=now)
    return redirect("/lti")


@router.post("/lti/registrations/{registration_id}/delete")
def delete_registration(registration_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
                        checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    viewer, _form = checked
    _instructor(viewer)
    registrations.unregister(session, registration_id=registration_id,
                             actor=viewer.principal.actor, now=now)
    return redirect("/lti")


@router.post("/lti/sync")
def sync_now(request: Request, checked: CheckedForm, session: SessionDep,
             settings: SettingsDep, now: NowDep) -> Response:
    """Sync every roster and every due score now (staff)."""
    viewer, _form = checked
    if not viewer.is_staff:
        raise InstructorRequired("only course staff can sync with the LMS")
    # The sync writes in its own transactions: end this request's (on SQLite it holds the
    # write lock from its first statement, BEGIN IMMEDIATE: submissions/db.py).
    session.commit()
    sync.run_sync_exclusive(request.app.state.session_factory, settings=settings, now=now, rosters=True)
    return redirect("/lti")


@router.post("/lti/keys/rotate")
def rotate_key(checked: CheckedForm, session: SessionDep, settings: SettingsDep,
               now: NowDep) -> Response:
    viewer, _form = checked
    _instructor(viewer)
    kid = keys.rotate(session, settings=settings, now=now)
    audit.record(session, actor=viewer.principal.actor, action="lti.rotate_key", now=now,
                 target_type="lti_key", target_id=kid)
    return redirect("/lti")


# ------------------------------------------------------------------ a student's token


@router.get("/me/token")
def read_own_token(request: Request, viewer: ViewerDep) -> Response:
    """Where a student gets a CLI token (by rotating: only its hash is stored)."""
    if viewer.principal.student is None:
        raise StudentRequired("this page is a student's own")
    return render(request, "lti_token.html", viewer=viewer, headers=NO_STORE, token=None,
                  server=_base(request))


@router.post("/me/token")
def rotate_own_token(request: Request, checked: CheckedForm, session: SessionDep,
                     settings: SettingsDep, now: NowDep) -> Response:
    """A new CLI token for the signed-in student, shown once (the old one stops working)."""
    viewer, _form = checked
    student = viewer.principal.student
    if student is None:
        raise StudentRequired("this page is a student's own")
    created = service.rotate_student_token(session, student_id=student.id,
                                           actor=viewer.principal.actor, now=now)
    response = render(request, "lti_token.html", viewer=viewer, headers=NO_STORE,
                      token=created.token, server=_base(request))
    if not request.cookies.get(SESSION_COOKIE, "").startswith(LTI_SESSION_PREFIX):
        # Signed in with the old token: the browser follows the new one.
        set_session_cookie(response, created.token, settings)
    return response

