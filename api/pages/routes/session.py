"""Signing in and out, and the home page (``/``): a student's assignments and latest
submissions, or staff's course overview."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from api.deps import NowDep, SessionDep, SettingsDep, principal_for_token
from api.pages.rendering import PageRoute, redirect, render, safe_next
from api.pages.security import (
    CSRF_FIELD,
    CheckedForm,
    FormFields,
    ViewerDep,
    check_signin_csrf,
    clear_session_cookie,
    clear_signin_cookie,
    new_signin_nonce,
    read_form,
    set_session_cookie,
    set_signin_cookie,
    signin_cookie_name,
)
from api.views import assignment_view, submission_summaries
from grader.manifest import MANIFESTS
from submissions import repository
from submissions.errors import NotAuthenticated

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])


@router.get("/")
def read_home(request: Request, viewer: ViewerDep, session: SessionDep, settings: SettingsDep,
              now: NowDep) -> Response:
    """A student's assignments (due dates, late policy, submissions left) and latest
    submissions; staff's assignments with links to everything they run."""
    course = [assignment_view(session, name=name, principal=viewer.principal, settings=settings,
                              now=now) for name in MANIFESTS]
    latest = submission_summaries(session, student_id=viewer.principal.student_id,
                                  assignment=None, status=None, limit=10, offset=0, now=now)
    names = {s.id: s.name for s in repository.list_students(session)} if viewer.is_staff else {}
    return render(request, "home.html", viewer=viewer, assignments=course, latest=latest,
                  names=names)


#: Why a browser was sent to sign in (``?why=``), as the sign-in page says it.
SIGN_IN_REASONS = {
    "token_replaced": "You were signed out: the token this browser held no longer works. "
                      "Staff replaced (rotated) it, or you did with a new one. Sign in with "
                      "your new token; if you do not have it, ask your course staff. "
                      "An upload in progress was not sent: choose the file again.",
}


@router.get("/sign-in")
def read_sign_in(request: Request, settings: SettingsDep, next: str | None = None,  # noqa: A002
                 why: str | None = None) -> Response:
    """The sign-in form: paste your token once (with why this browser was signed out, when
    it was: ``?why=token_replaced``)."""
    nonce = request.cookies.get(signin_cookie_name(settings)) or new_signin_nonce()
    response = render(request, "sign_in.html", viewer=None, csrf_token=nonce,
                      next=safe_next(next), error=None,
                      reason=SIGN_IN_REASONS.get(why or ""))
    set_signin_cookie(response, nonce, settings)
    return response


@router.post("/sign-in")
def sign_in(request: Request, session: SessionDep, settings: SettingsDep,
            form: Annotated[FormFields, Depends(read_form)]) -> Response:
    """Check the token as the API checks a bearer token; keep it in the session cookie."""
    check_signin_csrf(request, form.first(CSRF_FIELD), settings)
    token = form.first("token").strip()
    target = safe_next(form.first("next"))
    try:
        if not token:
            raise NotAuthenticated("paste your token")
        principal_for_token(session, token=token, settings=settings)
    except NotAuthenticated as exc:
        message = "that token is not valid (ask your course staff for a new one)" if token \
            else exc.message
        return render(request, "sign_in.html", viewer=None, status_code=401,
                      csrf_token=form.first(CSRF_FIELD), next=target, error=message,
                      reason=None)
    response = redirect(target)
    set_session_cookie(response, token, settings)
    clear_signin_cookie(response, settings)
    return response


@router.post("/sign-out")
def sign_out(checked: CheckedForm, settings: SettingsDep) -> Response:
    """Forget the session cookie in this browser (the token itself stays valid)."""
    response = redirect("/sign-in")
    clear_session_cookie(response, settings)
    return response
