"""LTI 1.3 launches against a real platform (lti1p3platform): a learner lands signed in as
a student on the assignment's upload form, an instructor and a TA as staff; a replayed
nonce, a token for another tool, an expired token and one signed by a key the platform does
not publish are each refused with a page that says why; a launch posted by a browser that
did not start its login (no state cookie: login CSRF) is refused, and a login inside the
LMS's frame offers a new window."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from submissions.lti.launch import LOGIN_STATE_TTL_S
from submissions.lti.platform import forget_tokens

from ..helpers import instructor_headers
from .conftest import launch, replay_fields
from .platform import INSTRUCTOR, TA, Platform, launch_form


def test_learner_lands_signed_in_as_student_on_the_assignment(client: TestClient,
                                                              lms: Platform) -> None:
    lms.add_person("u-ada", "Ada Lovelace")
    response = launch(client, lms, "u-ada")
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/submit?assignment=softmax_backward"
    page = client.get(response.headers["location"])
    assert page.status_code == 200
    assert "Ada Lovelace" in page.text and "(student)" in page.text
    # The same person launching again is the same student (by the platform's sub).
    again = launch(client, lms, "u-ada")
    assert again.status_code == 303
    students = client.get("/api/v1/students", headers={"Authorization":
                                                       "Bearer instructor-test-token-0123456789"})
    assert [s["name"] for s in students.json()] == ["Ada Lovelace"]


@pytest.mark.parametrize(("role", "expected"), [(INSTRUCTOR, "instructor"), (TA, "ta")])
def test_staff_land_signed_in_with_their_role(client: TestClient, lms: Platform, role: str,
                                              expected: str) -> None:
    lms.add_person("u-grace", "Grace Hopper", role)
    response = launch(client, lms, "u-grace")
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/leaderboard?assignment=softmax_backward"
    page = client.get("/lti")
    assert page.status_code == 200
    assert f"Grace Hopper <span class=\"role\">({expected})</span>" in page.text
    assert "GPU kernels 101" in page.text


def _refused(response, code: str, words: str) -> None:  # noqa: ANN001
    assert response.status_code in (400, 403), response.text
    assert code in response.text and words in response.text
    assert "grader_session" not in response.headers.get("set-cookie", "")


def test_a_replayed_launch_is_refused(client: TestClient, lms: Platform) -> None:
    lms.add_person("u-ada", "Ada")
    fields = replay_fields(client, lms, "u-ada")
    first = client.post("/lti/launch", data=fields, follow_redirects=False)
    assert first.status_code == 303
    client.cookies.clear()
    _refused(client.post("/lti/launch", data=fields, follow_redirects=False),
             "lti_nonce_replayed", "already used")


@pytest.mark.parametrize(("knob", "code", "words"), [
    ("other_tool", "lti_token_invalid", "for another tool"),
    ("expired", "lti_token_invalid", "has expired"),
    ("rogue_key", "lti_unknown_key", "does not publish"),
])
def test_a_bad_id_token_is_refused_with_a_clear_page(client: TestClient, lms: Platform,
                                                     knob: str, code: str, words: str) -> None:
    lms.add_person("u-eve", "Eve")
    _refused(launch(client, lms, "u-eve", knob=knob), code, words)
    assert client.get("/", follow_redirects=False).status_code == 303  # not signed in


# ------------------------------------------------- the state is bound to the browser


def _browser_without_cookies(client: TestClient) -> TestClient:
    """Another browser: the same app, its own cookie jar."""
    other = TestClient(client.app, base_url=str(client.base_url))
    other.__enter__()
    return other


def test_a_launch_posted_by_another_browser_is_refused(client: TestClient,
                                                       lms: Platform) -> None:
    """Login CSRF: the attacker starts a login in their browser and has the victim's browser
    post the LMS's form (their own valid id_token and state) to the tool."""
    lms.add_person("u-mallory", "Mallory")
    fields = replay_fields(client, lms, "u-mallory")  # the attacker's browser holds the cookie
    victim = _browser_without_cookies(client)
    try:
        refused = victim.post("/lti/launch", data=fields, follow_redirects=False)
        _refused(refused, "lti_state_cookie_missing", "did not come back to the browser that "
                 "started it")
        assert "new window" in refused.text
        assert victim.get("/", follow_redirects=False).status_code == 303  # not signed in
    finally:
        victim.close()
    # The refused launch wrote nothing (a page's error rolls its transaction back): its nonce
    # is unused, so the browser that started the login still completes it, as itself.
    assert client.post("/lti/launch", data=fields, follow_redirects=False).status_code == 303


def test_a_launch_whose_browser_holds_another_logins_cookie_is_refused(
        client: TestClient, lms: Platform) -> None:
    lms.add_person("u-mallory", "Mallory")
    lms.add_person("u-ada", "Ada")
    attacker = _browser_without_cookies(client)
    try:
        fields = replay_fields(attacker, lms, "u-mallory")
    finally:
        attacker.close()
    replay_fields(client, lms, "u-ada")  # the victim's own login: its cookie, its state
    assert any(name.startswith("grader_lti_state_") for name in client.cookies)
    _refused(client.post("/lti/launch", data=fields, follow_redirects=False),
             "lti_state_cookie_missing", "cookie the grader set")


def test_the_state_cookie_is_per_login_and_gone_after_the_launch(client: TestClient,
                                                                 lms: Platform) -> None:
    lms.add_person("u-ada", "Ada")
    first = replay_fields(client, lms, "u-ada")
    second = replay_fields(client, lms, "u-ada")  # a second tab: both logins stay valid
    assert {f"grader_lti_state_{first['state']}", f"grader_lti_state_{second['state']}"} <= \
        set(client.cookies)
    for fields in (second, first):
        response = client.post("/lti/launch", data=fields, follow_redirects=False)
        assert response.status_code == 303, response.text
        assert f"grader_lti_state_{fields['state']}" not in client.cookies


@pytest.fixture
def https_tool(app_factory, settings) -> Iterator[tuple[TestClient, Platform]]:  # noqa: ANN001
    """The tool as deployed (GRADER_ENVIRONMENT=production: Secure cookies) behind HTTPS,
    with a platform that launches it at its https:// address."""
    forget_tokens()
    platform = Platform("https://testserver")
    platform.start()
    client = app_factory(settings.model_copy(update={"environment": "production"}))
    client.base_url = httpx.URL("https://testserver")
    response = client.post("/api/v1/lti/registrations", json=platform.tool_registration_fields(),
                           headers=instructor_headers())
    assert response.status_code == 201, response.text
    platform.tool_key_set = client.get("/lti/jwks.json").json()
    platform.add_link("link-1", "softmax_backward")
    yield client, platform
    platform.stop()
    forget_tokens()


def test_in_production_the_state_cookie_is_secure_host_only_and_short_lived(
        https_tool: tuple[TestClient, Platform]) -> None:
    client, platform = https_tool
    platform.add_person("u-ada", "Ada")
    start = client.get(platform.launch_url("u-ada"), follow_redirects=False)
    assert start.status_code == 302, start.text
    state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
    set_cookie = start.headers["set-cookie"]
    assert set_cookie.startswith(f"__Host-grader_lti_state_{state}={state};")
    attributes = {a.strip().lower() for a in set_cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite=none", "path=/", f"max-age={LOGIN_STATE_TTL_S}"} \
        <= attributes
    assert not any(a.startswith("domain") for a in attributes)
    # The whole launch over https: the browser sends the Secure cookie back.
    page = httpx.get(start.headers["location"], timeout=10)
    action, fields = launch_form(page.text)
    assert action == "https://testserver/lti/launch"
    landed = client.post(action, data=fields, follow_redirects=False)
    assert landed.status_code == 303, landed.text
    assert landed.headers["location"] == "/submit?assignment=softmax_backward"
    # ... and the launch deletes it.
    assert f"__Host-grader_lti_state_{state}=\"\"" in landed.headers["set-cookie"] or \
        f"__Host-grader_lti_state_{state}=;" in landed.headers["set-cookie"]


def test_a_login_inside_an_lms_frame_reopens_in_a_new_window(client: TestClient,
                                                             lms: Platform) -> None:
    """Inside the LMS's iframe the cookie is third-party (blocked by many browsers) and the
    pages refuse to be framed: the login page offers the same login in a new window."""
    lms.add_person("u-ada", "Ada")
    login_url = lms.launch_url("u-ada")
    framed = client.get(login_url, headers={"Sec-Fetch-Dest": "iframe"},
                        follow_redirects=False)
    assert framed.status_code == 200, framed.text
    assert "frame-ancestors *" in framed.headers["content-security-policy"]
    assert "set-cookie" not in framed.headers
    assert 'target="_blank"' in framed.text and "Open the grader in a new window" in framed.text
    action = re.search(r'<form method="(\w+)" action="([^"]+)" target="_blank"', framed.text)
    assert action is not None and action.groups() == ("get", "/lti/login")
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                             framed.text))
    query = {k: v[0] for k, v in parse_qs(urlsplit(login_url).query).items()}
    assert fields == {k: html.escape(v) for k, v in query.items()}
    # The new window (a top-level navigation) starts the login and the launch succeeds.
    start = client.get("/lti/login", params={k: html.unescape(v) for k, v in fields.items()},
                       headers={"Sec-Fetch-Dest": "document"}, follow_redirects=False)
    assert start.status_code == 302, start.text
    page = httpx.get(start.headers["location"], timeout=10)
    action_url, launch_fields = launch_form(page.text)
    assert client.post(action_url, data=launch_fields, follow_redirects=False).status_code == 303


def test_a_login_posted_inside_a_frame_reopens_as_a_post(client: TestClient,
                                                         lms: Platform) -> None:
    """Canvas posts its login initiation: the new window repeats it as a POST."""
    lms.add_person("u-ada", "Ada")
    query = {k: v[0] for k, v in parse_qs(urlsplit(lms.launch_url("u-ada")).query).items()}
    framed = client.post("/lti/login", data=query, headers={"Sec-Fetch-Dest": "iframe"},
                         follow_redirects=False)
    assert framed.status_code == 200, framed.text
    assert '<form method="post" action="/lti/login" target="_blank"' in framed.text
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                             framed.text))
    start = client.post("/lti/login", data={k: html.unescape(v) for k, v in fields.items()},
                        follow_redirects=False)
    assert start.status_code == 302, start.text
    assert "grader_lti_state_" in start.headers["set-cookie"]
