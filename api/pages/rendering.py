"""Rendering pages: one Jinja2 environment (autoescaping every template, undefined names an
error), the filters the templates share, security headers, and `PageRoute`, which turns the
errors a page meets into pages (a redirect to sign in, or an error page) where the API's
handler (api/errors.py) would answer JSON.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from api.deps import REQUEST_FAILED
from api.pages.charts import format_time
from api.pages.security import SESSION_COOKIE, SignInRequired, Viewer, clear_session_cookie
from grader.report.speed import format_ceiling, format_fraction, format_rate
from submissions.errors import DomainError, UploadTooLarge, describe_size

logger = logging.getLogger("api.pages")

TEMPLATES = Path(__file__).parent / "templates"

#: Pages load only this origin's scripts and styles (the vendored htmx, pages.js/css): an
#: injected <script> would not run even if something escaped escaping.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # Pages show one person's data: a shared lab machine's back button after sign-out, or a
    # proxy, must not show them to the next person.
    "Cache-Control": "no-store",
}


def utc(moment: dt.datetime | None) -> str:
    """``2026-12-01 03:47 UTC`` (as `grader submit` prints times), with the seconds when
    they are not zero (``03:47:12 UTC``: lateness is decided to the second); ``-`` for none."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    moment = moment.astimezone(dt.UTC)
    exact = moment.second == 0 and moment.microsecond == 0
    return moment.strftime("%Y-%m-%d %H:%M UTC" if exact else "%Y-%m-%d %H:%M:%S UTC")


def iso(moment: dt.datetime | None) -> str:
    """Machine-readable time for <time datetime=...>."""
    if moment is None:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def number(value: float | None, digits: int = 3) -> str:
    """A float with `digits` significant digits; ``NaN``/``inf``/``-inf`` as such; ``-``
    for none."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def speedup(value: float | None) -> str:
    return "-" if value is None else f"{number(value)}×"


def points(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def duration(seconds: float | None) -> str:
    """A time per call as the charts write it (``49.3 µs``); ``-`` for none."""
    return "-" if seconds is None else format_time(seconds)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name: student strings are escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(utc=utc, iso=iso, number=number, speedup=speedup, points=points,
                       urlquote=lambda text: quote(str(text), safe=""), duration=duration,
                       fraction=format_fraction, rate=format_rate, ceiling=format_ceiling, size=describe_size)
    return env


ENVIRONMENT = _environment()


def render(request: Request, template: str, *, viewer: Viewer | None, status_code: int = 200,
           headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
    """The page `template` for `viewer` (None on the sign-in and error pages)."""
    html = ENVIRONMENT.get_template(template).render(
        request=request, viewer=viewer, path=request.url.path, **context)
    return HTMLResponse(html, status_code=status_code, headers={**PAGE_HEADERS, **(headers or {})})


#: The form field that confirms an irreversible action: its first POST (without it) answers
#: the confirmation page, which posts the same form again with ``confirm=yes``. A page, not
#: a script's confirm(): it works without JavaScript and says what changes, for how many.
CONFIRM_FIELD = "confirm"


def confirm_page(request: Request, viewer: Viewer, *, title: str, changes: list[str],
                 students: int, action: str, button: str, back: str,
                 fields: dict[str, str] | None = None,
                 count_label: str = "Students affected") -> HTMLResponse:
    """The page asking before `action` (a POST path) runs: what it `changes`, how many
    `students` it affects (or what `count_label` counts), the button that does it and the
    way back (`back`)."""
    return render(request, "confirm.html", viewer=viewer, title=title, changes=changes,
                  students=students, action=action, button=button, back=back,
                  fields=fields or {}, count_label=count_label)


def redirect(url: str) -> RedirectResponse:
    """After a form: 303 See Other, so the browser follows with a GET (Post/Redirect/Get)."""
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


def safe_next(target: str | None) -> str:
    """A local path to go to after signing in; anything else (another site: ``//x``,
    ``https://x``, ``/\\x``, or ``/<tab>/x``, which browsers read as ``//x``) becomes ``/``."""
    if (not target or not target.startswith("/") or target.startswith("//") or "\\" in target
            or any(ord(c) < 32 or ord(c) == 127 for c in target)):
        return "/"
    return target


def sign_in_redirect(request: Request, *, stale: bool) -> Response:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = "/sign-in" if request.method != "GET" or here == "/" else (
        f"/sign-in?next={quote(here, safe='')}")
    if stale:  # the sign-in page says why (a rotated token), not just "sign in"
        target = _with_reason(target, "token_replaced")
    if request.headers.get("HX-Request"):
        response: Response = Response(status_code=204, headers={"HX-Redirect": target})
    else:
        response = redirect(target)
    if stale:
        clear_session_cookie(response, request.app.state.settings)
    return response


def _with_reason(target: str, reason: str) -> str:
    return f"{target}{'&' if '?' in target else '?'}why={reason}"


#: Where a refused form came from, when the browser does not say: the page whose form
#: posts to that path (a POST-only path has no page of its own).
FORM_PAGES = {"/submit": "/submit", "/staff/students/import": "/staff/students"}


def way_back(request: Request) -> str:
    """The page to go back to after an error: the same site's page that sent the request
    (``Referer``: pages send it to their own origin only), else the form's page, else home."""
    referer = urlsplit(request.headers.get("referer", ""))
    here = request.url
    if referer.netloc == here.netloc and referer.scheme == here.scheme and referer.path:
        target = referer.path + (f"?{referer.query}" if referer.query else "")
        if safe_next(target) == target:
            return target
    return FORM_PAGES.get(request.url.path, "/")


def error_page(request: Request, *, status_code: int, code: str, message: str,
               headers: dict[str, str] | None = None, limit: str | None = None
               ) -> HTMLResponse:
    """The site's error page: what happened (`message`, `code`), the limit broken if one
    was (`limit`, in the README's units) and the way back to where the request came from.

    It is drawn without a viewer (it may answer before any route looked at the session, e.g.
    the guard's 413 for a body over its cap), so a browser that holds a session cookie gets a
    neutral header (Home, no "Sign in" that would suggest it was signed out)."""
    holds_session = SESSION_COOKIE in request.cookies
    return render(request, "error.html", viewer=None, status_code=status_code, headers=headers,
                  code=code, message=message, limit=limit, back=way_back(request), holds_session=holds_session)


def too_large_page(scope: dict[str, Any], *, code: str, message: str, limit_bytes: int,
                   sent_bytes: int | None, headers: dict[str, str]) -> HTMLResponse:
    """The 413 page a form gets when its body is over the route's cap (api/guard.py answers
    before the route runs, so this builds its own request from the ASGI scope)."""
    request = Request(scope)
    sent = f"; this one was about {describe_size(sent_bytes)}" if sent_bytes else ""
    return error_page(request, status_code=413, code=code, message=message, headers=headers,
                      limit=f"The limit is {describe_size(limit_bytes)}{sent}.")


class PageRoute(APIRoute):
    """A page's route: errors become pages. Not signed in (or a dead token): 303 to the
    sign-in page (which returns here afterwards). A domain error (403 staff_required, 404
    submission_not_found, 409 regrade_pending, ...): an error page with the same status and
    code as the API's answer. A malformed path or query: 422 page."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except (SignInRequired, DomainError, RequestValidationError) as exc:
                # The request's session closes after this handler returns (FastAPI's function
                # scope), so it sees no exception: say that the request failed, and what the
                # route wrote before the error is rolled back (api/deps.py REQUEST_FAILED).
                request.scope[REQUEST_FAILED] = True
                return self._failure_page(request, exc)

        return page_handler

    @staticmethod
    def _failure_page(request: Request, exc: Exception) -> Response:
        """The answer to a page's failure (the class docstring)."""
        if isinstance(exc, SignInRequired):
            return sign_in_redirect(request, stale=exc.stale)
        if isinstance(exc, DomainError):
            retry = getattr(exc, "retry_after_s", None)
            limit = exc.details.get("max_bytes") if isinstance(exc, UploadTooLarge) else None
            return error_page(request, status_code=exc.http_status, code=exc.code,
                              message=exc.message,
                              headers={"Retry-After": str(retry)} if retry else None,
                              limit=f"The limit is {describe_size(limit)}."
                              if isinstance(limit, int) else None)
        assert isinstance(exc, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
            for e in exc.errors())
        return error_page(request, status_code=422, code="validation_error",
                          message=problems or "invalid request")
