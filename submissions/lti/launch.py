"""OIDC third-party login initiation and the resource-link (or Deep Linking) launch
(LTI 1.3 sections 5.1 and 5.3; IMS Security Framework 5.1.1).

1. The platform sends the browser to ``/lti/login`` with ``iss``, ``login_hint``,
   ``target_link_uri`` (and ``client_id``, ``lti_message_hint``, ``lti_deployment_id``).
   `initiate_login` stores a fresh ``state`` and ``nonce`` (LOGIN_STATE_TTL_S, used once)
   and returns the platform's authorisation URL to redirect to, with the state; the route
   also gives the browser a cookie holding the state (api/pages/routes/lti.py).
2. The platform posts ``id_token`` and ``state`` to ``/lti/launch``. `verify_launch`
   checks, in order: a registration for the token's issuer and audience; the signature
   against the platform's JWKS (the ``kid`` must be one it publishes); ``exp``, ``iat``
   (LEEWAY_S of clock skew), ``iss``, ``aud`` (and ``azp`` when there are several
   audiences); the nonce, never used before; the state, issued for this registration and
   this nonce, not expired, used once; the state's cookie, sent back by the browser that
   posts the launch (so the launch ends in the browser that started the login: without
   it, a state issued to an attacker's browser could sign a victim into the attacker's
   account, login CSRF: IMS Security Framework 5.1.1.2); the deployment id, one staff
   registered; the message type and version. Each refusal is its own error code with a
   sentence.
3. `complete_launch` records the context, its NRPS and AGS endpoints and the resource link,
   provisions the person (submissions/lti/people.py) and opens a browser session.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from sqlalchemy.orm import Session

from grader.manifest import MANIFESTS
from submissions import repository, service
from submissions.lti import people
from submissions.lti.errors import (
    LtiNonceReplayed,
    LtiPlatformError,
    LtiRoleUnsupported,
    LtiStateInvalid,
    LtiStateNotFromThisBrowser,
    LtiTokenInvalid,
    LtiUnknownKey,
    LtiUnknownPlatform,
)
from submissions.lti.platform import platform_key
from submissions.models import LtiContext, LtiRegistration, LtiResourceLink
from submissions.settings import Settings

#: How long a login initiation waits for its launch (the state's row and its cookie).
LOGIN_STATE_TTL_S = 600
#: Clock skew allowed between the platform and this service when checking exp and iat.
LEEWAY_S = 60
#: How long a browser stays signed in by a launch (then the LMS launches again).
SESSION_TTL_S = 8 * 3600
SESSION_TOKEN_PREFIX = "gls_"

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
CLAIM_MESSAGE_TYPE = CLAIM + "message_type"
CLAIM_VERSION = CLAIM + "version"
CLAIM_DEPLOYMENT = CLAIM + "deployment_id"
CLAIM_ROLES = CLAIM + "roles"
CLAIM_CONTEXT = CLAIM + "context"
CLAIM_RESOURCE_LINK = CLAIM + "resource_link"
CLAIM_CUSTOM = CLAIM + "custom"
CLAIM_TARGET = CLAIM + "target_link_uri"
CLAIM_NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
CLAIM_AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
CLAIM_DEEP_LINKING = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"


@dataclass(frozen=True)
class LoginStart:
    """Where step 1 sends the browser (`url`, the platform's authorisation endpoint) and
    the `state` the browser must hold (in a cookie) when the launch comes back."""

    url: str
    state: str


def initiate_login(session: Session, *, params: Mapping[str, str], redirect_uri: str,
                   now: dt.datetime) -> LoginStart:
    """Step 1: the platform's authorisation URL to send the browser to, and the state.

    Raises:
        LtiUnknownPlatform: no registration for ``iss`` (and ``client_id``), or several
            and the platform did not say which.
        LtiStateInvalid: ``login_hint`` or ``iss`` missing.
    """
    issuer, login_hint = params.get("iss", ""), params.get("login_hint", "")
    if not issuer or not login_hint:
        raise LtiStateInvalid("the LMS's login request has no issuer (iss) or login_hint")
    registration = _registration(session, issuer=issuer, client_id=params.get("client_id"))
    state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    repository.insert_lti_login_state(
        session, state=state, nonce=nonce, registration_id=registration.id,
        expires_at=now + dt.timedelta(seconds=LOGIN_STATE_TTL_S))
    query = {"scope": "openid", "response_type": "id_token", "response_mode": "form_post",
             "prompt": "none", "client_id": registration.client_id, "redirect_uri": redirect_uri,
             "login_hint": login_hint, "state": state, "nonce": nonce}
    if params.get("lti_message_hint"):
        query["lti_message_hint"] = params["lti_message_hint"]
    separator = "&" if urlsplit(registration.auth_login_url).query else "?"
    return LoginStart(url=f"{registration.auth_login_url}{separator}{urlencode(query)}",
                      state=state)


def _registration(session: Session, *, issuer: str, client_id: str | None) -> LtiRegistration:
    found = repository.find_lti_registrations(session, issuer=issuer, client_id=client_id)
    if not found:
        raise LtiUnknownPlatform(
            f"this LMS ({issuer}{', client id ' + client_id if client_id else ''}) is not "
            "registered with the grader; ask the course staff to register it (docs/lms.md)")
    if len(found) > 1:
        raise LtiUnknownPlatform(f"{issuer} has several registrations and did not say which "
                                 "client id it launches")
    return found[0]


@dataclass(frozen=True)
class VerifiedLaunch:
    """A launch whose id_token passed every check."""

    registration: LtiRegistration
    claims: dict[str, Any]

    @property
    def message_type(self) -> str:
        return str(self.claims.get(CLAIM_MESSAGE_TYPE))

    @property
    def deployment_id(self) -> str:
        return str(self.claims.get(CLAIM_DEPLOYMENT))


def verify_launch(session: Session, *, id_token: str, state: str, browser_state: str | None,
                  settings: Settings, now: dt.datetime) -> VerifiedLaunch:
    """Step 2 (module docstring). `browser_state`: the value of the state's cookie that the
    browser posting the launch sent (None when it sent none). Raises an LtiLaunchRefused
    subclass."""
    if not id_token or not state:
        raise LtiStateInvalid("the launch has no id_token or state; start it again from the LMS")
    try:
        header = jwt.get_unverified_header(id_token)
        unverified = jwt.decode(id_token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise LtiTokenInvalid(f"the launch's id_token is not a JWT ({exc})") from exc
    audiences = unverified.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else list(audiences or [])
    issuer = str(unverified.get("iss") or "")
    candidates = [r for r in repository.find_lti_registrations(session, issuer=issuer,
                                                               client_id=None)]
    if not candidates:
        raise LtiUnknownPlatform(f"this LMS ({issuer or 'no issuer'}) is not registered with "
                                 "the grader; ask the course staff to register it")
    registration = next((r for r in candidates if r.client_id in audiences), None)
    if registration is None:
        raise LtiTokenInvalid(
            f"the launch's id_token is for another tool (audience {', '.join(audiences) or '-'}"
            f", this tool's client id at {issuer} is {candidates[0].client_id})")
    if header.get("alg") != "RS256":
        raise LtiTokenInvalid(f"the launch's id_token is signed with {header.get('alg')}, "
                              "not RS256")
    try:
        key = platform_key(registration.keyset_url, header.get("kid"),
                           timeout_s=settings.lti_http_timeout_s)
    except LtiPlatformError as exc:
        raise LtiUnknownKey(f"the LMS's signing keys could not be read: {exc}") from exc
    if key is None:
        raise LtiUnknownKey(f"the launch's id_token is signed by a key the LMS does not publish "
                            f"(kid {header.get('kid')!r} is not in {registration.keyset_url})")
    try:
        claims = jwt.decode(
            id_token, key, algorithms=["RS256"], audience=registration.client_id,
            issuer=registration.issuer, leeway=LEEWAY_S,
            options={"require": ["exp", "iat", "iss", "aud", "sub", "nonce"]})
    except jwt.ExpiredSignatureError as exc:
        raise LtiTokenInvalid("the launch's id_token has expired; open the link in the LMS "
                              "again") from exc
    except jwt.InvalidSignatureError as exc:
        raise LtiUnknownKey("the launch's id_token signature does not match the LMS's key "
                            f"{header.get('kid')!r}") from exc
    except jwt.PyJWTError as exc:
        raise LtiTokenInvalid(f"the launch's id_token was refused: {exc}") from exc
    if len(audiences) > 1 and claims.get("azp") != registration.client_id:
        raise LtiTokenInvalid("the launch's id_token names several audiences and another "
                              "authorised party (azp)")
    iat = claims.get("iat")
    if isinstance(iat, int | float) and iat > now.timestamp() + LEEWAY_S:
        raise LtiTokenInvalid("the launch's id_token is issued in the future")
    nonce = str(claims["nonce"])
    expires = dt.datetime.fromtimestamp(float(claims["exp"]), dt.UTC) + \
        dt.timedelta(seconds=LEEWAY_S)
    if not repository.use_lti_nonce(session, nonce_sha256=hashlib.sha256(
            nonce.encode()).hexdigest(), expires_at=max(expires, now), now=now):
        raise LtiNonceReplayed("this launch was already used (its nonce was seen before); "
                               "open the link in the LMS again")
    login = repository.take_lti_login_state(session, state=state, now=now)
    if login is None or login.registration_id != registration.id or login.nonce != nonce:
        raise LtiStateInvalid("this launch does not match a login started here (its state is "
                              "unknown, expired or used); open the link in the LMS again")
    if browser_state is None or not hmac.compare_digest(browser_state.encode(), state.encode()):
        raise LtiStateNotFromThisBrowser(
            "this launch did not come back to the browser that started it: the cookie the "
            "grader set when the LMS began the login is missing. If you opened the link in "
            "the LMS, your browser may be blocking this site's cookies (some do when the LMS "
            "shows the tool inside its own page): open the link again in a new window or "
            "tab, or allow cookies for this site")
    deployment = str(claims.get(CLAIM_DEPLOYMENT) or "")
    if deployment not in registration.deployment_ids:
        raise LtiTokenInvalid(f"the LMS's deployment {deployment!r} is not registered with "
                              "the grader; ask the course staff to add it")
    if claims.get(CLAIM_VERSION) != "1.3.0" or claims.get(CLAIM_MESSAGE_TYPE) not in (
            RESOURCE_LINK_REQUEST, DEEP_LINKING_REQUEST):
        raise LtiTokenInvalid(f"unsupported LTI message {claims.get(CLAIM_MESSAGE_TYPE)!r} "
                              f"(version {claims.get(CLAIM_VERSION)!r})")
    return VerifiedLaunch(registration=registration, claims=claims)


@dataclass(frozen=True)
class CompletedLaunch:
    """Who a launch signed in and where they go."""

    role: str
    student_id: int | None
    staff_id: int | None
    session_token: str
    assignment: str | None
    context_row_id: int | None
    deep_linking: dict[str, Any] | None = field(default=None)


def _assignment(claims: Mapping[str, Any]) -> str | None:
    custom = claims.get(CLAIM_CUSTOM)
    if isinstance(custom, dict) and custom.get("assignment") in MANIFESTS:
        return str(custom["assignment"])
    target = str(claims.get(CLAIM_TARGET) or "")
    for value in parse_qs(urlsplit(target).query).get("assignment", []):
        if value in MANIFESTS:
            return value
    return None


def record_context(session: Session, *, launch: VerifiedLaunch,
                   now: dt.datetime) -> LtiContext | None:
    """The launch's context with the NRPS and AGS endpoints it carries (None without a
    context claim)."""
    claims = launch.claims
    context_claim = claims.get(CLAIM_CONTEXT)
    if not isinstance(context_claim, dict) or not context_claim.get("id"):
        return None
    context_id = str(context_claim["id"])[:255]
    registration_id = launch.registration.id
    context = repository.find_lti_context(session, registration_id=registration_id,
                                          context_id=context_id)
    if context is None:
        context, _ = repository.insert_or_get(
            session, LtiContext(registration_id=registration_id, context_id=context_id,
                                deployment_id=launch.deployment_id, ags_scopes=[]),
            lambda: repository.find_lti_context(session, registration_id=registration_id,
                                                context_id=context_id))
    context.deployment_id = launch.deployment_id
    if context_claim.get("title"):
        context.title = str(context_claim["title"])[:500]
    nrps = claims.get(CLAIM_NRPS)
    if isinstance(nrps, dict) and nrps.get("context_memberships_url"):
        context.memberships_url = str(nrps["context_memberships_url"])[:1000]
    ags = claims.get(CLAIM_AGS)
    if isinstance(ags, dict):
        if ags.get("lineitems"):
            context.lineitems_url = str(ags["lineitems"])[:1000]
        context.ags_scopes = sorted(str(s) for s in ags.get("scope") or [])
    session.flush()
    return context


def complete_launch(session: Session, *, launch: VerifiedLaunch, settings: Settings,
                    now: dt.datetime) -> CompletedLaunch:
    """Step 3 (module docstring).

    Raises:
        LtiRoleUnsupported: the launch's roles hold no learner, TA or instructor role, or a
            learner opened a Deep Linking request (which is staff's).
    """
    claims = launch.claims
    role = people.role_of(claims.get(CLAIM_ROLES) or [])
    if role is None:
        raise LtiRoleUnsupported("the LMS gave this person no role the grader knows "
                                 "(learner, teaching assistant or instructor)")
    if launch.message_type == DEEP_LINKING_REQUEST and role == people.STUDENT:
        raise LtiRoleUnsupported("only course staff can place grader assignments in the LMS")
    context = record_context(session, launch=launch, now=now)
    identity, _ = people.provision(
        session, registration=launch.registration, sub=str(claims["sub"]), role=role,
        name=claims.get("name") or " ".join(
            filter(None, [claims.get("given_name"), claims.get("family_name")])) or None,
        email=claims.get("email"), now=now)
    if context is not None:
        people.set_membership(session, context=context, identity=identity, role=role,
                              status=people.ACTIVE, now=now)
    assignment = _assignment(claims)
    link = claims.get(CLAIM_RESOURCE_LINK)
    if context is not None and isinstance(link, dict) and link.get("id"):
        row = repository.find_lti_resource_link(session, context_row_id=context.id,
                                                resource_link_id=str(link["id"])[:255])
        ags_claim = claims.get(CLAIM_AGS)
        ags = ags_claim if isinstance(ags_claim, dict) else {}
        if row is not None:
            assignment = assignment or row.assignment
            if ags.get("lineitem"):
                row.lineitem_url = str(ags["lineitem"])[:1000]
        elif assignment is not None:
            session.add(LtiResourceLink(context_row_id=context.id,
                                        resource_link_id=str(link["id"])[:255],
                                        assignment=assignment, created_at=now,
                                        lineitem_url=(str(ags["lineitem"])[:1000]
                                                      if ags.get("lineitem") else None)))
            session.flush()
    token = service.new_token(SESSION_TOKEN_PREFIX)
    repository.insert_lti_session(
        session, token_sha256=service.hash_token(token), student_id=identity.student_id
        if role == people.STUDENT else None,
        staff_id=identity.staff_id if role != people.STUDENT else None, now=now,
        expires_at=now + dt.timedelta(seconds=SESSION_TTL_S))
    deep = claims.get(CLAIM_DEEP_LINKING) if launch.message_type == DEEP_LINKING_REQUEST \
        else None
    return CompletedLaunch(role=role, student_id=identity.student_id, staff_id=identity.staff_id,
                           session_token=token, assignment=assignment,
                           context_row_id=None if context is None else context.id,
                           deep_linking=deep if isinstance(deep, dict) else None)
