"""The web pages over HTTP (TestClient), on SQLite and PostgreSQL: sign-in and the session
cookie, CSRF, roles, what each page shows to whom, and every form's effect. The browser
tests (tests/pages) drive the same pages in Chromium."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from api.deps import NowDep, SessionDep
from api.pages.rendering import PageRoute
from api.pages.security import SESSION_COOKIE, csrf_token_for
from submissions import repository, service
from submissions.errors import StudentNotFound

from ..helpers import (
    INSTRUCTOR_TOKEN,
    bearer,
    create_staff,
    create_student,
    grade_next,
    kernel_source,
    make_outcome,
    make_settings,
    upload,
)

HTML_PAYLOAD = "<script>window.__pwned = 1</script>"


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; returns the session's CSRF token."""
    page = client.get("/sign-in")
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    response = client.post("/sign-in", data={"csrf_token": nonce, "token": token, "next": "/"},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    return csrf_token_for(token)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


# ---------------------------------------------------------------------- sign-in, cookies


def test_home_leads_to_sign_in_then_to_the_home_page(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/sign-in"
    _, token = create_student(client, "ada")
    page = client.get("/sign-in")
    assert page.status_code == 200
    signin_cookie = page.headers["set-cookie"]
    assert "HttpOnly" in signin_cookie and "SameSite=strict" in signin_cookie
    response = client.post("/sign-in", data={"csrf_token": csrf_of(page.text), "token": token,
                                             "next": "/leaderboard"}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/leaderboard"
    cookie = next(c for c in response.headers.get_list("set-cookie")
                  if c.startswith(f"{SESSION_COOKIE}="))
    assert f"{SESSION_COOKIE}={token}" in cookie
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # development serves plain http on loopback
    home = client.get("/")
    assert home.status_code == 200 and "Hello, ada" in home.text
    assert "Content-Security-Policy" in home.headers and home.headers["Cache-Control"] == "no-store"


def test_session_cookie_is_secure_outside_development(app_factory: Any, settings: Any) -> None:
    production = make_settings(settings.database_url, environment="production",
                               instructor_token=INSTRUCTOR_TOKEN,
                               deployment_seed="a-real-deployment-seed-0123456789")
    client = app_factory(production)
    page = client.get("/sign-in")
    assert "__Host-grader_signin_csrf=" in page.headers["set-cookie"]
    assert "Secure" in page.headers["set-cookie"]
    # A Secure cookie is not sent over the test client's plain http: hand it over.
    client.cookies.set("__Host-grader_signin_csrf", csrf_of(page.text))
    response = client.post("/sign-in", data={"csrf_token": csrf_of(page.text),
                                             "token": INSTRUCTOR_TOKEN},
                           follow_redirects=False)
    assert response.status_code == 303
    cookie = next(c for c in response.headers.get_list("set-cookie")
                  if c.startswith(f"{SESSION_COOKIE}="))
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_sign_in_refuses_a_bad_token_and_a_forged_form(client: TestClient) -> None:
    page = client.get("/sign-in")
    nonce = csrf_of(page.text)
    response = client.post("/sign-in", data={"csrf_token": nonce, "token": "gst_wrong"},
                           follow_redirects=False)
    assert response.status_code == 401 and "not valid" in response.text
    assert SESSION_COOKIE not in response.headers.get("set-cookie", "")
    # Another site's form: no sign-in cookie, or a value that does not match it.
    client.cookies.clear()
    response = client.post("/sign-in", data={"csrf_token": nonce, "token": INSTRUCTOR_TOKEN},
                           follow_redirects=False)
    assert response.status_code == 403 and "csrf_failed" in response.text
    client.get("/sign-in")
    response = client.post("/sign-in", data={"csrf_token": "forged", "token": INSTRUCTOR_TOKEN},
                           follow_redirects=False)
    assert response.status_code == 403 and SESSION_COOKIE not in response.headers.get("set-cookie", "")


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example",
                                    "/\t/evil.example"])
def test_sign_in_never_redirects_to_another_site(client: TestClient, target: str) -> None:
    page = client.get("/sign-in")
    response = client.post("/sign-in", data={"csrf_token": csrf_of(page.text),
                                             "token": INSTRUCTOR_TOKEN, "next": target},
                           follow_redirects=False)
    assert response.headers["location"] == "/"


def test_the_api_ignores_the_session_cookie(client: TestClient) -> None:
    _, token = create_student(client, "ada")
    sign_in(client, token)
    assert client.get("/api/v1/me").status_code == 401  # bearer tokens only
    assert client.get("/api/v1/me", headers=bearer(token)).status_code == 200


def test_a_rotated_token_signs_the_browser_out(client: TestClient) -> None:
    _, token = create_student(client, "ada")
    sign_in(client, token)
    assert client.post("/api/v1/me/token", headers=bearer(token)).status_code == 200
    response = client.get("/submissions", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in?next=%2Fsubmissions&why=token_replaced"
    assert f'{SESSION_COOKIE}=""' in response.headers["set-cookie"]  # the dead cookie is cleared
    # The sign-in page says why, and the next sign-in still returns to the page asked for.
    page = client.get(response.headers["location"])
    assert "You were signed out: the token this browser held no longer works" in page.text
    assert 'name="next" value="/submissions"' in page.text
    assert "You were signed out" not in client.get("/sign-in").text


def test_sign_out_needs_the_csrf_token_and_clears_the_cookie(client: TestClient) -> None:
    _, token = create_student(client, "ada")
    csrf = sign_in(client, token)
    assert client.post("/sign-out", data={"from": "elsewhere"},
                       follow_redirects=False).status_code == 403
    response = client.post("/sign-out", data={"csrf_token": csrf}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/sign-in"
    assert client.get("/", follow_redirects=False).status_code == 303


# ------------------------------------------------------------------------- student pages


def test_upload_through_the_form_queues_the_same_submission_as_the_api(
        client: TestClient, db_session: Any) -> None:
    student_id, token = create_student(client, "ada")
    csrf = sign_in(client, token)
    form = client.get("/submit")
    assert "no due date" in form.text and "accepted but marked late" in form.text
    response = client.post("/submit", data={"csrf_token": csrf, "assignment": "softmax_backward"},
                           files={"file": ("mine.py", kernel_source().encode(), "text/x-python")},
                           follow_redirects=False)
    assert response.status_code == 303
    submission_id = int(response.headers["location"].rsplit("/", 1)[1])
    listed = client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"]
    assert [s["id"] for s in listed] == [submission_id]
    report = client.get(f"/submissions/{submission_id}")
    assert "waiting for a worker" in report.text and 'hx-trigger="every 2s"' in report.text
    grade_next(db_session, make_outcome("passed"))
    report = client.get(f"/submissions/{submission_id}")
    assert "hx-trigger" not in report.text  # final: no more polling
    assert "autograd_fp32" in report.text and "score <strong>100 of 100</strong>" in report.text


def test_upload_without_the_csrf_token_is_refused(client: TestClient) -> None:
    _, token = create_student(client, "ada")
    sign_in(client, token)
    response = client.post("/submit", data={"assignment": "softmax_backward"},
                           files={"file": ("mine.py", kernel_source().encode(), "text/x-python")})
    assert response.status_code == 403 and "csrf_failed" in response.text
    assert client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"] == []


def test_an_upload_over_the_limit_is_a_page_with_the_limit_in_kib(client: TestClient) -> None:
    """Issue 38: a 1 MB web upload showed the API's JSON (with the body cap, 278528) where
    the README says 256 KiB. The form, the page and the API's message say the same."""
    _, token = create_student(client, "ada")
    csrf = sign_in(client, token)
    assert "Your Python file (at most 256 KiB)" in client.get("/submit").text
    big = kernel_source().encode() + b"#" * 1_000_000
    for size, source in (("1 MB", big), ("just over", kernel_source().encode()
                                          + b"#" * (256 * 1024))):
        response = client.post("/submit", data={"csrf_token": csrf,
                                                "assignment": "softmax_backward"},
                               files={"file": ("big.py", source, "text/x-python")},
                               headers={"Referer": "http://testserver/submit"})
        assert response.status_code == 413, size
        assert response.headers["content-type"].startswith("text/html"), size
        assert "the file is larger than the upload limit of 256 KiB" in response.text, size
        assert "The limit is 256 KiB" in response.text, size
        assert '<a href="/submit">Back to the page you came from</a>' in response.text, size
        header = response.text.split("</header>")[0]
        assert '<a href="/">Home</a>' in header and "Sign in" not in header, "the student is still signed in"
    client.cookies.clear()
    response = client.post("/submit", data={"assignment": "softmax_backward"},
                           files={"file": ("big.py", big, "text/x-python")})
    assert response.status_code == 413 and '<a href="/sign-in">Sign in</a>' in response.text.split("</header>")[0]
    api = upload(client, token, big.decode())
    assert api.status_code == 413 and api.json()["error"]["max_bytes"] == 256 * 1024
    assert "256 KiB" in api.json()["error"]["message"]
    assert client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"] == []


def test_a_refused_upload_shows_the_form_again_with_why(client: TestClient) -> None:
    _, token = create_student(client, "ada")
    csrf = sign_in(client, token)
    response = client.post("/submit", data={"csrf_token": csrf, "assignment": "softmax_backward"},
                           files={"file": ("bad.py", b"def softmax_backward(y, g):\n  return (\n",
                                           "text/x-python")})
    assert response.status_code == 422
    assert "source_syntax_error" in response.text and "Line 2" in response.text
    assert 'id="upload-form"' in response.text
    response = client.post("/submit", data={"csrf_token": csrf, "assignment": "no_such_thing"},
                           files={"file": ("k.py", kernel_source().encode(), "text/x-python")})
    assert response.status_code == 422 and "unknown_assignment" in response.text
    client.patch("/api/v1/assignments/softmax_backward", json={"max_submissions": 1},
                 headers=bearer(INSTRUCTOR_TOKEN))
    upload(client, token, kernel_source())
    response = client.post("/submit", data={"csrf_token": csrf, "assignment": "softmax_backward"},
                           files={"file": ("k.py", kernel_source().encode(), "text/x-python")})
    assert response.status_code == 403 and "submission_limit_reached" in response.text


def test_staff_cannot_upload_and_students_cannot_open_staff_pages(client: TestClient) -> None:
    _, ta = create_staff(client, "tara", "ta")
    sign_in(client, ta)
    assert client.get("/submit").status_code == 403
    client.cookies.clear()
    _, token = create_student(client, "ada")
    sign_in(client, token)
    for path in ["/staff/students", "/staff/regrades", "/staff/audit", "/staff/exports",
                 "/staff/assignments/softmax_backward"]:
        response = client.get(path)
        assert response.status_code == 403 and "staff_required" in response.text, path


def test_another_students_submission_is_not_found(client: TestClient) -> None:
    _, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    submission_id = upload(client, bob, kernel_source()).json()["id"]
    sign_in(client, ada)
    for path in [f"/submissions/{submission_id}", f"/submissions/{submission_id}/source",
                 f"/submissions/{submission_id}/download"]:
        response = client.get(path)
        assert response.status_code == 404 and "submission_not_found" in response.text
    assert client.get("/submissions/2147483648").status_code == 422


def test_students_see_the_board_anonymised_as_the_api_shows_it(
        client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob-the-fast")
    upload(client, bob, kernel_source())
    grade_next(db_session, make_outcome("passed", speedup=4.0))
    upload(client, ada, kernel_source())
    grade_next(db_session, make_outcome("passed", speedup=2.0))
    api_rows = client.get("/api/v1/leaderboard", headers=bearer(ada)).json()["rows"]
    sign_in(client, ada)
    page = client.get("/leaderboard").text
    assert "bob-the-fast" not in page and "anonymous" in page
    assert page.count('class="you"') == 1
    assert [r["headline_speedup"] for r in api_rows] == [4.0, 2.0]
    assert page.index("4×") < page.index("2×")
    client.cookies.clear()
    sign_in(client, INSTRUCTOR_TOKEN)
    assert "bob-the-fast" in client.get("/leaderboard").text


def test_hidden_board_is_a_403_page_for_students(client: TestClient) -> None:
    _, ada = create_student(client, "ada")
    client.patch("/api/v1/assignments/softmax_backward", json={"leaderboard_visible": False},
                 headers=bearer(INSTRUCTOR_TOKEN))
    sign_in(client, ada)
    response = client.get("/leaderboard")
    assert response.status_code == 403 and "leaderboard_hidden" in response.text


def test_student_strings_are_escaped_in_the_html(client: TestClient, db_session: Any) -> None:
    from submissions.grading import CheckResult

    _, ada = create_student(client, "ada")
    source = kernel_source() + f"# {HTML_PAYLOAD}\n"
    submission_id = upload(client, ada, source, filename=f"{HTML_PAYLOAD}.py").json()["id"]
    outcome = dataclasses.replace(
        make_outcome("failed"), log_text=f"printed {HTML_PAYLOAD}",
        checks=[CheckResult(name="autograd_fp32", passed=False, skipped=False,
                            message=f"got {HTML_PAYLOAD}", numbers={})])
    grade_next(db_session, outcome)
    sign_in(client, ada)
    pages = [client.get(f"/submissions/{submission_id}").text,
             client.get(f"/submissions/{submission_id}/source").text,
             client.get("/submissions").text]
    for html in pages:
        assert "<script>window.__pwned" not in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in pages[0]
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in pages[1]


# --------------------------------------------------------------------------- staff pages


def test_ta_disqualifies_and_restores_through_the_forms(client: TestClient,
                                                        db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    submission_id = upload(client, ada, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome("passed", speedup=2.0))
    _, ta = create_staff(client, "tara", "ta")
    csrf = sign_in(client, ta)
    assert "ada" in client.get("/leaderboard").text
    # Without the token (another site's form): refused, nothing changes.
    response = client.post(f"/submissions/{submission_id}/disqualify", data={"reason": "x"})
    assert response.status_code == 403
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["disqualification"] is None
    # Another session's token does not do either.
    response = client.post(f"/submissions/{submission_id}/disqualify",
                           data={"reason": "x", "csrf_token": csrf_token_for(ada)})
    assert response.status_code == 403
    response = client.post(f"/submissions/{submission_id}/disqualify",
                           data={"reason": "  ", "csrf_token": csrf})
    assert response.status_code == 422  # the API's DisqualifyRequest: a reason is required
    response = client.post(f"/submissions/{submission_id}/disqualify",
                           data={"reason": "copied", "csrf_token": csrf}, follow_redirects=False)
    assert response.status_code == 303
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["disqualification"]["reason"] == "copied"
    board = client.get("/leaderboard").text
    assert "ada" not in board.split("<tbody>")[1]
    assert "ada" in board.split('id="unranked"')[1] and "disqualified: copied" in board
    again = client.post(f"/submissions/{submission_id}/disqualify",
                        data={"reason": "twice", "csrf_token": csrf})
    assert again.status_code == 409 and "already_disqualified" in again.text
    response = client.post(f"/submissions/{submission_id}/restore",
                           data={"reason": "appeal upheld", "csrf_token": csrf},
                           follow_redirects=False)
    assert response.status_code == 303
    assert "ada" in client.get("/leaderboard").text.split("<tbody>")[1]
    audit = client.get("/staff/audit?action=submission.restore").text
    assert "appeal upheld" in audit and "tara" in audit


def test_regrade_preview_then_apply(client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    submission_id = upload(client, ada, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome("failed", grader_version="old"))
    _, ta = create_staff(client, "tara", "ta")
    csrf = sign_in(client, ta)
    response = client.post("/staff/regrades", data={
        "csrf_token": csrf, "assignment": "softmax_backward", "status": "failed",
        "student_id": "", "grader_version": "", "submission_ids": f"{submission_id}"},
        follow_redirects=False)
    assert response.status_code == 303
    batch_path = response.headers["location"].split("?")[0]
    preview = client.get(batch_path).text
    assert "1 still grading" in preview and 'hx-trigger="every 3s"' in preview
    early = client.post(f"{batch_path}/apply", data={"csrf_token": csrf})
    assert early.status_code == 409 and "regrade_pending" in early.text
    grade_next(db_session, make_outcome("passed", grader_version="new"))
    preview = client.get(batch_path).text
    assert "0 still grading" in preview and "hx-trigger" not in preview
    assert "1 changed" in preview and "+100" in preview
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["status"] == "failed"  # not applied yet
    # Applying asks first: what it changes and for how many students; nothing changes yet.
    asked = client.post(f"{batch_path}/apply", data={"csrf_token": csrf}, follow_redirects=False)
    assert asked.status_code == 200 and "Apply regrade" in asked.text
    assert "make the new grading current for 1 of 1 submission(s)" in asked.text
    assert 'id="confirm-count">1<' in asked.text and 'name="confirm" value="yes"' in asked.text
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["status"] == "failed"
    response = client.post(f"{batch_path}/apply", data={"csrf_token": csrf, "confirm": "yes"},
                           follow_redirects=False)
    assert response.status_code == 303
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["status"] == "passed"
    assert "Applied: the new gradings of 1 submission(s) now count" in client.get(
        response.headers["location"]).text
    empty = client.post("/staff/regrades", data={"csrf_token": csrf, "assignment": "softmax_backward",
                                                 "status": "error"})
    assert empty.status_code == 422 and "regrade_empty" in empty.text


def test_instructor_changes_settings_ta_cannot(client: TestClient) -> None:
    _, ta = create_staff(client, "tara", "ta")
    csrf = sign_in(client, ta)
    page = client.get("/staff/assignments/softmax_backward")
    assert page.status_code == 200 and "Only instructors change settings" in page.text
    response = client.post("/staff/assignments/softmax_backward",
                           data={"csrf_token": csrf, "due_at": "2031-01-31T23:59"})
    assert response.status_code == 403 and "instructor_required" in response.text
    client.cookies.clear()
    csrf = sign_in(client, INSTRUCTOR_TOKEN)
    form = {"csrf_token": csrf, "opens_at": "", "due_at": "2031-01-31T23:59",
            "late_policy": "refuse", "max_submissions": "5", "rate_limit_submissions": "",
            "rate_limit_window_s": "", "leaderboard_visible": "on", "correctness_points": "60",
            "speed_points": "1.0:10, 1.5:40"}
    response = client.post("/staff/assignments/softmax_backward", data=form,
                           follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].endswith("done=saved")
    api = client.get("/api/v1/assignments/softmax_backward",
                     headers=bearer(INSTRUCTOR_TOKEN)).json()
    assert api["due_at"] == "2031-01-31T23:59:00Z" and api["late_policy"] == "refuse"
    assert api["max_submissions"] == 5 and api["points"]["max_points"] == 100
    # Only what changed is sent, so the audit log records just that.
    response = client.post("/staff/assignments/softmax_backward",
                           data={**form, "max_submissions": ""}, follow_redirects=False)
    assert response.headers["location"].endswith("done=saved")
    events = client.get("/api/v1/audit?action=assignment.update",
                        headers=bearer(INSTRUCTOR_TOKEN)).json()["events"]
    assert events[0]["details"] == {"before": {"max_submissions": 5},
                                    "after": {"max_submissions": None}}
    bad = client.post("/staff/assignments/softmax_backward",
                      data={**form, "speed_points": "2.0:10, 1.0:40"})
    assert bad.status_code == 422 and "assignment_settings_invalid" in bad.text


def test_exports_download_and_are_audited(client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    submission_id = upload(client, ada, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome("passed"))
    _, ta = create_staff(client, "tara", "ta")
    csrf = sign_in(client, ta)
    assert client.get("/staff/exports").status_code == 200
    response = client.post("/staff/exports/lms", data={"csrf_token": csrf,
                                                       "assignment": "softmax_backward"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert response.text.splitlines()[0].startswith("student_id,name,email,id,submissions")
    assert "attachment" in response.headers["content-disposition"]
    response = client.post("/staff/exports/gradescope", data={"csrf_token": csrf,
                                                              "submission_id": str(submission_id)})
    assert response.status_code == 200 and response.json()["score"] == 100
    actions = {e.action for e in repository.list_audit_events(db_session, limit=10, offset=0)}
    assert {"export.lms", "export.gradescope"} <= actions
    assert client.get("/staff/exports/lms").status_code == 405  # never a GET


def test_not_found_and_bad_ids_are_pages_not_500s(client: TestClient) -> None:
    sign_in(client, INSTRUCTOR_TOKEN)
    assert client.get("/staff/students/99999").status_code == 404
    assert client.get("/staff/regrades/99999").status_code == 404
    response = client.get("/staff/assignments/no_such_assignment")
    assert response.status_code == 422 and "unknown_assignment" in response.text
    assert response.headers["content-type"].startswith("text/html")


def test_pages_stay_out_of_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert all(p.startswith(("/api/", "/healthz", "/metrics")) for p in paths), sorted(paths)


def test_docs_use_only_local_assets(client: TestClient) -> None:
    for path in ("/docs", "/redoc"):
        response = client.get(path)
        assert response.status_code == 200
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert '<html lang="en">' in response.text
        urls = re.findall(r'(?:src|href)="([^"]+)"', response.text)
        assert urls and all(u.startswith("/") for u in urls), urls
        for url in urls:
            assert client.get(url).status_code == 200, url



def test_the_checks_document_is_served_with_an_anchor_for_every_check(client: TestClient) -> None:
    from grader.manifest import MANIFESTS

    assert client.get("/checks", follow_redirects=False).status_code == 303  # sign in first
    _, token = create_student(client, "ada")
    sign_in(client, token)
    response = client.get("/checks")
    assert response.status_code == 200 and "default-src 'self'" in response.headers["content-security-policy"]
    ids = set(re.findall(r'id="([^"]+)"', response.text))
    # The rows reports link to (check_url), and each assignment's section.
    assert {f"softmax_backward-{name}" for name in (
        "example_two_element", "autograd_fp32", "half_precision", "row_sum_invariant", "triton_kernel")} <= ids
    assert set(MANIFESTS) <= ids
    assert "<script" not in response.text.split("<main", 1)[1]  # raw HTML in the Markdown is off
    # Every check of every assignment has the row its reports link to (issue 38: two
    # layernorm checks linked to anchors that did not exist).
    from api.pages.checks_doc import check_url
    from grader.assignments import get_assignment

    for name in MANIFESTS:
        for check in get_assignment(name).check_names:
            anchor = check_url(name, check).split("#", 1)[1]
            assert anchor in ids, f"{name}'s check {check} links to #{anchor}, not in /checks"


def test_the_guards_own_refusals_are_pages_for_pages_and_json_for_the_api(client: TestClient) -> None:
    """Issue 38: a slow form body (408) or a restart (503) answered by the guard before any
    route ran showed the API's raw JSON in the browser; a page gets a page of the site."""
    from api.guard import _guard_answer

    for path, html in (("/submit", True), ("/api/v1/submissions", False)):
        scope = {"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b"",
                 "app": client.app, "root_path": "", "scheme": "http", "server": ("testserver", 80)}
        response = _guard_answer(scope, 408, "request_timeout", "the request body did not arrive within 30 s",
                                 {"Connection": "close"}, timeout_s=30)
        assert response.status_code == 408
        body = response.body.decode()
        if html:
            assert response.headers["content-type"].startswith("text/html"), path
            assert "the request body did not arrive within 30 s" in body and "<html" in body
        else:
            assert response.headers["content-type"].startswith("application/json"), path
            assert '"request_timeout"' in body


def test_a_page_that_fails_after_writing_keeps_nothing_it_wrote(client: TestClient, db_session) -> None:
    """A page's route answers its own failures (an error page, not an exception), so the
    request's session would see a normal exit and commit what the route wrote before the error:
    the session is told the request failed, and rolls it back."""
    router = APIRouter(route_class=PageRoute)

    @router.post("/test-only/write-then-fail")
    def write_then_fail(session: SessionDep, now: NowDep) -> None:
        service.create_student(session, name="written before the error", now=now)
        session.flush()
        raise StudentNotFound("no such student (raised after a write)")

    @router.post("/test-only/write")
    def write(session: SessionDep, now: NowDep) -> None:
        service.create_student(session, name="written by a page that succeeded", now=now)

    client.app.include_router(router)
    failed = client.post("/test-only/write-then-fail")
    assert failed.status_code == 404 and "raised after a write" in failed.text, failed.text[:2000]
    assert client.post("/test-only/write").status_code == 200
    names = {student.name for student in repository.list_students(db_session)}
    assert "written by a page that succeeded" in names
    assert "written before the error" not in names
