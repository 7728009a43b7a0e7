"""Sign-in for the web pages: the session cookie, CSRF tokens, and who is looking.

The pages share the API's authentication: a person pastes their personal token (a
student's ``gst_...``, a TA's or an instructor's ``gsf_...``, or the bootstrap instructor
token) once on the sign-in page; it is checked exactly as a bearer token is
(`api.deps.principal_for_token`) and kept in a cookie:

- ``HttpOnly`` (no script, ours or an injected one, can read it), ``Path=/``;
- ``SameSite=Lax``: the browser sends it on top-level navigations from other sites, so a
  link to a submission from the course's LMS or an e-mail opens the page signed in (with
  ``Strict`` it would show the sign-in page although the person is signed in). Lax is safe
  here because no GET changes anything (every change is a POST form) and Lax withholds the
  cookie from cross-site POSTs; the CSRF token below is the second, independent defence;
- ``Secure`` outside development (``GRADER_ENVIRONMENT=production``), where the service sits
  behind HTTPS; in development the cookies also work over plain http://127.0.0.1;
- ``Max-Age`` SESSION_MAX_AGE_S. The cookie holds the token itself, so the token's own life
  rules: rotating a token (``POST /api/v1/me/token``, or staff) signs out every browser that
  holds the old one at its next request. Sign-out deletes the cookie.

The API never reads the cookie (only ``Authorization: Bearer``), so a cross-site request to
``/api/...`` carries no authority even when the browser attaches the cookie.

CSRF: the synchroniser token pattern, keyed by the session (OWASP CSRF cheat sheet, "HMAC
based token"): every form carries ``csrf_token = HMAC-SHA256(key=session token,
"kernel-grader pages csrf v1")``, which only a page rendered for that session contains; a POST
without the matching value is refused (403 ``csrf_failed``) before it changes anything. The
sign-in form, before any session exists, uses a double-submit cookie instead (a random value
in an HttpOnly, SameSite=Strict cookie and in the form; ``__Host-`` prefixed when Secure), so
that another site cannot sign a visitor in as someone else.

Why not a library: of the CSRF packages on PyPI, starlette-csrf checks a header only (plain
HTML forms, which must work without JavaScript, cannot send one); fastapi-csrf-protect reads
tokens from the body through ``request.form()``, which would parse the upload form outside
the streamed, size-capped multipart parser (api/uploads.py); asgi-csrf (Datasette's) is an
app-wide middleware that buffers whole url-encoded bodies before any authentication (what
issue #10 removes from the API) and must be told to skip every API route. The pattern itself
is a few lines of `hmac`; form bodies here are read with a cap after the cookie is checked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import Depends, Request
from fastapi.responses import Response

from api.bodies import read_capped
from api.deps import (
    Principal,
    SessionDep,
    SettingsDep,
    principal_for_token,
    require_instructor,
    require_staff,
)
from api.schemas import storable_text_problem
from submissions.errors import (
    DomainError,
    NotAuthenticated,
    StudentRequired,
    TextNotStorable,
    UploadMalformed,
)
from submissions.settings import Settings

SESSION_COOKIE = "grader_session"
SIGNIN_COOKIE = "grader_signin_csrf"
#: How long a browser stays signed in without signing in again (the token may die sooner).
SESSION_MAX_AGE_S = 14 * 24 * 3600
#: Largest url-encoded form body a page accepts (a disqualification reason, settings, ids).
MAX_FORM_BYTES = 64 * 1024
CSRF_FIELD = "csrf_token"
_CSRF_MESSAGE = b"kernel-grader pages csrf v1"


class SignInRequired(Exception):
    """No valid session cookie: the page answers with a redirect to the sign-in page."""

    def __init__(self, *, stale: bool = False) -> None:
        super().__init__("sign in first")
        self.stale = stale  # a cookie was sent but its token no longer works


class CsrfFailed(DomainError):
    """A form without the CSRF token of the signed-in session (or of the sign-in page)."""

    code = "csrf_failed"
    http_status = 403


def cookie_secure(settings: Settings) -> bool:
    """Secure cookies everywhere but development (which serves plain http on loopback)."""
    return settings.environment != "development"


def signin_cookie_name(settings: Settings) -> str:
    """``__Host-`` prefixed when Secure: such a cookie cannot be set by a sibling domain."""
    return f"__Host-{SIGNIN_COOKIE}" if cookie_secure(settings) else SIGNIN_COOKIE


def csrf_token_for(session_token: str) -> str:
    """The CSRF token of every form of the session whose cookie holds `session_token`."""
    digest = hmac.new(session_token.encode("utf-8"), _CSRF_MESSAGE, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def set_session_cookie(response: Response, token: str, settings: Settings) -> None:
    response.set_cookie(SESSION_COOKIE, token, max_age=SESSION_MAX_AGE_S, path="/",
                        httponly=True, samesite="lax", secure=cookie_secure(settings))


def clear_session_cookie(response: Response, settings: Settings) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax",
                           secure=cookie_secure(settings))


def new_signin_nonce() -> str:
    return secrets.token_urlsafe(32)


def set_signin_cookie(response: Response, nonce: str, settings: Settings) -> None:
    response.set_cookie(signin_cookie_name(settings), nonce, max_age=3600, path="/",
                        httponly=True, samesite="strict", secure=cookie_secure(settings))


def clear_signin_cookie(response: Response, settings: Settings) -> None:
    response.delete_cookie(signin_cookie_name(settings), path="/", httponly=True,
                           samesite="strict", secure=cookie_secure(settings))


def check_signin_csrf(request: Request, form_value: str | None, settings: Settings) -> None:
    """The sign-in form's double-submit check. Raises CsrfFailed."""
    cookie = request.cookies.get(signin_cookie_name(settings))
    if not cookie or not form_value or not hmac.compare_digest(cookie, form_value):
        raise CsrfFailed("the sign-in form expired or came from another site; "
                         "load the sign-in page again")


# ------------------------------------------------------------------------------- viewer


@dataclass(frozen=True)
class Viewer:
    """The signed-in person looking at a page, and the CSRF token of their forms."""

    principal: Principal
    csrf_token: str

    @property
    def name(self) -> str:
        if self.principal.student is not None:
            return self.principal.student.name
        if self.principal.staff is not None:
            return self.principal.staff.name
        return "instructor (bootstrap token)"

    @property
    def role(self) -> str:
        return self.principal.role

    @property
    def is_staff(self) -> bool:
        return self.principal.is_staff

    @property
    def is_instructor(self) -> bool:
        return self.principal.is_instructor


def get_viewer(request: Request, session: SessionDep, settings: SettingsDep) -> Viewer:
    """Who holds the session cookie. Raises SignInRequired (the page redirects)."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise SignInRequired()
    try:
        principal = principal_for_token(session, token=token, settings=settings)
    except NotAuthenticated:
        raise SignInRequired(stale=True) from None
    return Viewer(principal=principal, csrf_token=csrf_token_for(token))


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def get_staff_viewer(viewer: ViewerDep) -> Viewer:
    """A TA or an instructor (the API's rule, api.deps.require_staff). 403 otherwise."""
    require_staff(viewer.principal)
    return viewer


def get_instructor_viewer(viewer: ViewerDep) -> Viewer:
    """An instructor (api.deps.require_instructor). 403 otherwise."""
    require_instructor(viewer.principal)
    return viewer


def get_student_viewer(viewer: ViewerDep) -> Viewer:
    """A student (uploads are students'; api.deps.get_current_student's rule). 403 otherwise."""
    if viewer.principal.student is None:
        raise StudentRequired("uploading is for students; staff grade with a student's token "
                              "or `grader check`")
    return viewer


StaffViewer = Annotated[Viewer, Depends(get_staff_viewer)]
InstructorViewer = Annotated[Viewer, Depends(get_instructor_viewer)]
StudentViewer = Annotated[Viewer, Depends(get_student_viewer)]


# -------------------------------------------------------------------------------- forms


class FormFields(dict[str, list[str]]):
    """A url-encoded form: name -> every value sent."""

    def first(self, name: str, default: str = "") -> str:
        values = self.get(name)
        return values[0] if values else default


async def read_form(request: Request) -> FormFields:
    """The url-encoded body of a page form, at most MAX_FORM_BYTES (checked as it streams
    in). Only awaits network reads. Raises UploadMalformed, UploadTooLarge, and
    TextNotStorable for a field the database could not store (a NUL character)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise UploadMalformed("send the form as application/x-www-form-urlencoded")
    body = await read_capped(request, max_bytes=MAX_FORM_BYTES, what="the form")
    text = body.decode("utf-8", "replace")
    fields = FormFields(parse_qs(text, keep_blank_values=True, max_num_fields=200))
    for name, values in fields.items():
        problem = next(filter(None, map(storable_text_problem, [name, *values])), None)
        if problem is not None:
            raise TextNotStorable(f"the form field {name!r} {problem}", field=name)
    return fields


def check_csrf(viewer: Viewer, value: str | None) -> None:
    """Raises CsrfFailed unless `value` is the viewer's session CSRF token."""
    if not value or not hmac.compare_digest(value, viewer.csrf_token):
        raise CsrfFailed("this form is not from your current session (it expired, you "
                         "signed in again, or it came from another site); reload the page")


async def _signed_in_form(request: Request, viewer: ViewerDep) -> tuple[Viewer, FormFields]:
    # The cookie is checked (ViewerDep, resolved first) before any of the body is read.
    form = await read_form(request)
    check_csrf(viewer, form.first(CSRF_FIELD))
    return viewer, form


CheckedForm = Annotated[tuple[Viewer, FormFields], Depends(_signed_in_form)]
