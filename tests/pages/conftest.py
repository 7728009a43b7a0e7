"""Fixtures for the browser tests of the web pages: a real `grader serve` process and a real
headless Chromium driven through Playwright.

- The server: `grader serve` on a free port in 21000-21999, SQLite in a temporary folder, one
  embedded worker running the fake grader (tests/service/fakes/fake_grader.py: instant
  verdicts, benchmark rows for the charts, HTML-laden output on demand). SQLite only: the
  browser tests are about what the pages show and do; the queries under them run on SQLite
  and PostgreSQL in tests/service (the API tests and tests/service/pages), and one server
  process with its worker keeps these tests light on two shared cores.
- The browser: Debian's chromium (`apt-get install chromium`; Playwright's own browser
  download is not used), one for the browser tests, a fresh context (cookies) per test.
- axe-core from tests/pages/node_modules (`npm ci` in tests/pages).

`make test` installs both (scripts/test_setup.sh); without either the tests fail with the
reason and the fix, never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
FAKE_GRADER = REPOSITORY_ROOT / "tests" / "service" / "fakes" / "fake_grader.py"
AXE = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = REPOSITORY_ROOT / "results" / "local" / "screenshots"
INSTRUCTOR_TOKEN = "pages-instructor-token-0123456789"
CHROMIUM = os.environ.get("GRADER_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PORTS = range(21000, 22000)


def _missing(what: str) -> None:
    pytest.fail(f"{what}; `make test` installs it (scripts/test_setup.sh)")


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 21000-21999")


@dataclass
class Server:
    """A running `grader serve` and the accounts the tests use."""

    url: str
    workdir: Path

    def api(self, method: str, path: str, token: str = INSTRUCTOR_TOKEN, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}{path}", timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}, **kwargs)
        assert response.status_code < 400, response.text
        return response.json()

    def create_student(self, name: str) -> tuple[int, str]:
        body = self.api("POST", "/api/v1/students", json={"name": name})
        return body["id"], body["token"]

    def create_staff(self, name: str, role: str) -> tuple[int, str]:
        body = self.api("POST", "/api/v1/staff", json={"name": name, "role": role})
        return body["id"], body["token"]

    def upload(self, token: str, source: str, filename: str = "kernel.py") -> int:
        return self.api("POST", "/api/v1/submissions", token,
                        files={"file": (filename, source.encode(), "text/x-python")})["id"]

    def wait_final(self, submission_id: int, token: str = INSTRUCTOR_TOKEN,
                   timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.api("GET", f"/api/v1/submissions/{submission_id}", token)
            if body["status"] in ("passed", "failed", "error"):
                return body
            time.sleep(0.2)
        raise AssertionError(f"submission {submission_id} not graded in {timeout} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Stopped when the browser tests' module ends, not left polling through later suites."""
    workdir = tmp_path_factory.mktemp("pages-server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), env.get("PYTHONPATH")])),
        "GRADER_DATABASE_URL": f"sqlite:///{workdir}/grader.db",
        "GRADER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
        "GRADER_DEPLOYMENT_SEED": "pages-test-seed",
        "GRADER_GRADE_COMMAND": json.dumps([sys.executable, str(FAKE_GRADER)]),
        "GRADER_POLL_INTERVAL_S": "0.2",
    })
    port = _free_port()
    log_path = workdir / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "serve", "--port", str(port), "--log-level", "warning"],
            cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise AssertionError(f"grader serve exited: {log_path.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if httpx.get(f"{url}/healthz", timeout=2).json()["status"] == "ok":
                break
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"grader serve not ready: {log_path.read_text()[-3000:]}")
        time.sleep(0.2)
    try:
        yield Server(url=url, workdir=workdir)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.is_file():
        _missing(f"axe-core is not installed ({AXE}); run `npm ci` in tests/pages")
    return AXE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # One browser for the module (test_browser.py holds every browser test). Not the session:
    # Playwright's sync API keeps an asyncio loop running in this thread while it is started,
    # and later tests that call asyncio.run() would find it.
    if not Path(CHROMIUM).is_file():
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


class Pages:
    """One browser context (one person's cookies) with the helpers the tests share."""

    def __init__(self, context: Any, server: Server, axe_source: str, screenshots: Path,
                 test_name: str) -> None:
        self.context = context
        self.page = context.new_page()
        self.server = server
        self.axe_source = axe_source
        self.screenshots = screenshots
        self.test_name = test_name
        self.axe_results: dict[str, list[dict]] = {}

    def goto(self, path: str) -> Any:
        response = self.page.goto(f"{self.server.url}{path}")
        assert response is not None
        return response

    def sign_in(self, token: str) -> None:
        self.goto("/sign-in")
        self.page.get_by_label("Your token").fill(token)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(re.compile(r"^[^?]*/(\?.*)?$"))

    def shot(self, name: str) -> Path:
        path = self.screenshots / f"{self.test_name}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def axe(self, name: str) -> list[dict]:
        """Run axe-core on the current page; returns the serious and critical violations.
        axe is evaluated through the DevTools protocol, which the pages' Content Security
        Policy (scripts from the server only) does not govern."""
        if not self.page.evaluate("typeof window.axe !== 'undefined'"):
            self.page.evaluate(self.axe_source)
        result = self.page.evaluate(
            "async () => { const r = await axe.run(document, {resultTypes: ['violations']});"
            " return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)})); }")
        self.axe_results[name] = result
        out = self.screenshots.parent / "axe" / f"{self.test_name}-{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"url": self.page.url, "violations": result}, indent=2))
        return [v for v in result if v["impact"] in ("serious", "critical")]


@pytest.fixture
def pages_factory(browser: Any, server: Server, axe_source: str, screenshots: Path,
                  request: pytest.FixtureRequest) -> Iterator[Any]:
    contexts = []

    def make(**options: Any) -> Pages:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
        contexts.append(context)
        return Pages(context, server, axe_source, screenshots, request.node.name)

    yield make
    for context in contexts:
        context.close()

