"""Fixtures of the LMS tests: a real LTI 1.3 platform (tests/service/lti/platform.py, the
lti1p3platform library over HTTP) registered with the grader under test."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from submissions.lti.platform import forget_tokens

from ..helpers import instructor_headers
from .platform import Platform, launch_form

TOOL = "http://testserver"


@pytest.fixture
def platform() -> Iterator[Platform]:
    forget_tokens()
    server = Platform(TOOL)
    server.start()
    yield server
    server.stop()
    forget_tokens()


@pytest.fixture
def lms(client: TestClient, platform: Platform) -> Platform:
    """The platform, registered with the grader (as staff would, through the API), holding
    the tool's public keys as a Canvas developer key holds them."""
    response = client.post("/api/v1/lti/registrations", json=platform.tool_registration_fields(),
                           headers=instructor_headers())
    assert response.status_code == 201, response.text
    platform.tool_key_set = client.get("/lti/jwks.json").json()
    platform.add_link("link-1", "softmax_backward")
    return platform


def launch(client: TestClient, platform: Platform, sub: str, link: str = "link-1", *,
           knob: str = "", deep_linking: bool = False) -> httpx.Response:
    """One launch as a browser makes it: the LMS's login initiation to the tool, the tool's
    redirect to the LMS's authorisation endpoint, the LMS's form posted to the tool."""
    start = client.get(platform.launch_url(sub, link, knob=knob, deep_linking=deep_linking),
                       follow_redirects=False)
    assert start.status_code == 302, start.text
    assert start.headers["location"].startswith(f"{platform.base}/authorize?")
    page = httpx.get(start.headers["location"], timeout=10)
    assert page.status_code == 200, page.text
    action, fields = launch_form(page.text)
    assert action == f"{TOOL}/lti/launch"
    return client.post(action, data=fields, follow_redirects=False)


def replay_fields(client: TestClient, platform: Platform, sub: str) -> dict[str, str]:
    """The id_token and state of a launch, as the LMS's form carries them (not yet posted)."""
    start = client.get(platform.launch_url(sub), follow_redirects=False)
    page = httpx.get(start.headers["location"], timeout=10)
    return launch_form(page.text)[1]
