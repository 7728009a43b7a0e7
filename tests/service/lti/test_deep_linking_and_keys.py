"""Deep Linking (staff place an assignment from the LMS's own picker) and the tool's key
rotation, against a real platform (lti1p3platform validates the tool's signed response and
its service-token assertions against the tool's published keys); the CLI's registrations."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys

import httpx
from fastapi.testclient import TestClient

from submissions.lti.platform import forget_tokens

from ..helpers import INSTRUCTOR_TOKEN, Clock, instructor_headers, worker_environment
from .conftest import launch
from .platform import INSTRUCTOR, Platform

T0 = dt.datetime(2030, 1, 10, 12, 0, tzinfo=dt.UTC)


def test_staff_place_an_assignment_that_learners_then_launch(client: TestClient,
                                                             lms: Platform) -> None:
    lms.add_person("u-prof", "Prof", INSTRUCTOR)
    picker = launch(client, lms, "u-prof", deep_linking=True)
    assert picker.status_code == 200, picker.text
    assert "Place a grader assignment in the LMS" in picker.text
    fields = dict(re.findall(r'name="(csrf_token|sealed)" value="([^"]+)"', picker.text))
    back = client.post("/lti/deep-link", data={**fields, "assignment": "gemm_epilogue"})
    assert back.status_code == 200, back.text
    assert f"form-action 'self' {lms.base}" in back.headers["content-security-policy"]
    action = re.search(r'action="([^"]+)" id="lti-deep-link-return"', back.text).group(1)
    token = re.search(r'name="JWT" value="([^"]+)"', back.text).group(1)
    assert action == f"{lms.base}/deep_link_return"
    placed = httpx.post(action, data={"JWT": token}, timeout=10)  # the platform verifies it
    assert placed.status_code == 200 and "placed 1 item" in placed.text
    (item,) = lms.course.deep_link_items
    assert item["custom"] == {"assignment": "gemm_epilogue"}
    assert item["lineItem"]["resourceId"] == "gemm_epilogue"

    client.cookies.clear()
    lms.add_person("u-ada", "Ada")
    link = next(k for k, v in lms.course.links.items() if v["assignment"] == "gemm_epilogue")
    landed = launch(client, lms, "u-ada", link)
    assert landed.headers["location"] == "/submit?assignment=gemm_epilogue"


def test_a_learner_cannot_open_the_picker(client: TestClient, lms: Platform) -> None:
    lms.add_person("u-ada", "Ada")
    refused = launch(client, lms, "u-ada", deep_linking=True)
    assert refused.status_code == 403 and "lti_role_unsupported" in refused.text


def test_key_rotation_keeps_the_old_key_published_for_the_grace_period(
        client: TestClient, lms: Platform) -> None:
    clock = Clock(client, T0)
    (old,) = [k["kid"] for k in client.get("/lti/jwks.json").json()["keys"]]
    rotated = client.post("/api/v1/lti/keys/rotate", headers=instructor_headers())
    assert rotated.status_code == 200
    new = rotated.json()["kid"]
    published = [k["kid"] for k in client.get("/lti/jwks.json").json()["keys"]]
    assert sorted(published) == sorted([old, new])
    # The platform takes the new key set; the tool's service calls are signed by the new key.
    lms.tool_key_set = client.get("/lti/jwks.json").json()
    lms.tool_key_set["keys"] = [k for k in lms.tool_key_set["keys"] if k["kid"] == new]
    lms.add_person("u-prof", "Prof", INSTRUCTOR)
    assert launch(client, lms, "u-prof").status_code == 303
    client.cookies.clear()
    forget_tokens()
    lms.add_person("u-ada", "Ada")
    run = client.post("/api/v1/lti/sync", headers=instructor_headers()).json()
    assert run["roster_errors"] == {} and list(run["rosters"].values())[0]["added"] == ["Ada"]
    clock.set(T0 + dt.timedelta(days=8))
    assert [k["kid"] for k in client.get("/lti/jwks.json").json()["keys"]] == [new]


def test_the_cli_registers_lists_and_removes_a_platform(committed_db, platform: Platform) -> None:
    env = worker_environment(committed_db.url)
    fields = platform.tool_registration_fields()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "submissions.cli", "lti", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    made = cli("register", "--issuer", fields["issuer"], "--client-id", fields["client_id"],
               "--deployment-id", "d1", "--deployment-id", "d2",
               "--auth-login-url", fields["auth_login_url"],
               "--auth-token-url", fields["auth_token_url"], "--keyset-url", fields["keyset_url"])
    assert made.returncode == 0, made.stderr
    again = cli("register", "--issuer", fields["issuer"], "--client-id", fields["client_id"],
                "--deployment-id", "d1", "--auth-login-url", "ftp://x", "--auth-token-url",
                fields["auth_token_url"], "--keyset-url", fields["keyset_url"])
    assert again.returncode == 2 and "lti_registration_invalid" in again.stderr
    listed = cli("list")
    assert f"{fields['issuer']}\t{fields['client_id']}\td1,d2" in listed.stdout
    removed = cli("remove", "1")
    assert removed.returncode == 0 and "registration 1 removed" in removed.stdout
    assert INSTRUCTOR_TOKEN  # the CLI needs no token: it is the database host's
