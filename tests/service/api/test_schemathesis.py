"""The OpenAPI document against the app's behaviour (schemathesis, bounded and
deterministic): every API operation, called with the bootstrap instructor's token and with a
student's on a migrated SQLite database, gives no server error and answers with a documented
status code, media type and body schema; every documented path answers an unsupported
method with 405 and an `Allow` that lists exactly its documented methods. Issue 10's run
(54k cases) found 175 server errors (integer overflow) and undocumented 400/401/403/404
answers, issue 24's NUL characters and echoed non-finite numbers; this is their bounded
regression test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis  # the dev extra
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
)
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from api.main import create_app
from submissions.migrations import upgrade_to_head

from ..helpers import (
    INSTRUCTOR_TOKEN,
    grade_next,
    instructor_headers,
    kernel_source,
    make_outcome,
    make_settings,
    upload,
)

#: Cases over all operations; with derandomize, the same cases every run.
MAX_EXAMPLES = 150


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, str]]:
    """The app on a migrated SQLite file with one student and one graded submission (id 1;
    graded, so that a long-poll on it answers at once); yields (app, the student's token)."""
    from fastapi.testclient import TestClient

    url = f"sqlite:///{Path(tmp_path_factory.mktemp('schemathesis')) / 'grader.db'}"
    upgrade_to_head(database_url=url)
    application = create_app(make_settings(url))
    with TestClient(application) as client:
        created = client.post("/api/v1/students", json={"name": "ada"},
                              headers=instructor_headers())
        student_token = created.json()["token"]
        assert upload(client, student_token, kernel_source()).status_code == 202
    engine = create_engine(url)
    with Session(engine) as session:
        grade_next(session, make_outcome("passed"))
    engine.dispose()
    yield application, student_token


@pytest.fixture(scope="module")
def app(world: tuple[object, str]) -> object:
    return world[0]


@pytest.mark.parametrize("role", ["instructor", "student"])
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_every_operation_conforms_to_the_openapi_document(world, mode, role) -> None:
    """Positive: schema-valid requests. Negative: requests that break the schema (ids past
    2**31 - 1, offsets of 2**63, wrong types, text with NUL characters), which must be 4xx,
    never 5xx. The student's token reaches the student paths (their own submissions, the
    leaderboard as a student sees it) and the 403s of the staff ones."""
    app, student_token = world
    token = INSTRUCTOR_TOKEN if role == "instructor" else student_token
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    strategy = schema.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

    @settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def check(case) -> None:  # noqa: ANN001
        # Every default check (no server error; documented status code, media type, headers
        # and body schema) but two opinions on strictness: `positive_data_acceptance` (a
        # schema-valid request may still break a course rule, answered 409/422 with its
        # documented code: regrade_empty, source_syntax_error, ...) and
        # `negative_data_rejection` (unknown query parameters and headers are ignored, as
        # HTTP APIs commonly do, rather than refused).
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"},
                               excluded_checks=[positive_data_acceptance,
                                                negative_data_rejection])

    check()


def test_every_documented_path_allows_exactly_its_documented_methods(app) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(app)
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        concrete = re.sub(r"\{name\}", "softmax_backward", path)
        concrete = re.sub(r"\{[^}]+\}", "1", concrete)
        response = client.options(concrete, headers=instructor_headers())
        assert response.status_code == 405, (path, response.text)
        assert response.json()["error"]["code"] == "method_not_allowed"
        allowed = {method.strip() for method in response.headers["allow"].split(",")}
        documented = {method.upper() for method in operations}
        assert allowed == documented | ({"HEAD"} if "GET" in documented else set()), path


def test_unsupported_methods_are_405_with_allow_in_the_error_shape(app) -> None:
    from fastapi.testclient import TestClient

    client = TestClient(app)
    for method in ("OPTIONS", "PUT", "DELETE"):
        response = client.request(method, "/api/v1/submissions/1", headers=instructor_headers())
        assert response.status_code == 405, (method, response.text)
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert "GET" in response.headers["allow"]
