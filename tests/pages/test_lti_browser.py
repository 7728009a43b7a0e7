"""A whole LMS round trip in a real browser: a learner opens the assignment's link in the
LMS (a real LTI 1.3 platform, lti1p3platform over HTTP: tests/service/lti/platform.py), lands
signed in on the grader's upload form, uploads, sees the verdict and score; an instructor
launched from the same LMS syncs on the /lti page; the score appears in the LMS's gradebook,
the same number the student's report shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.lti.platform import INSTRUCTOR, Platform

pytestmark = pytest.mark.slow


def _serious_axe_violations(page: Any, axe_source: str) -> list[dict]:
    """axe-core on the current page (through DevTools, which the pages' CSP does not
    govern); the serious and critical violations."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(axe_source)
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']}))"
                          ".violations.map(v => ({id: v.id, impact: v.impact, help: v.help}))")
    return [v for v in found if v["impact"] in ("serious", "critical")]


def test_launch_upload_and_the_score_reaches_the_lms(browser: Any, server: Any, axe_source: str,
                                                     tmp_path: Path) -> None:
    platform = Platform(server.url)
    platform.start()
    try:
        server.api("POST", "/api/v1/lti/registrations", json=platform.tool_registration_fields())
        platform.tool_key_set = httpx.get(f"{server.url}/lti/jwks.json", timeout=10).json()
        platform.add_link("link-1", "softmax_backward")
        platform.add_person("u-ada", "Ada Lovelace")
        platform.add_person("u-prof", "Prof Knuth", INSTRUCTOR)

        learner = browser.new_context(viewport={"width": 1280, "height": 900})
        page = learner.new_page()
        page.goto(f"{platform.base}/launch_as/u-ada?link=link-1")
        page.wait_for_url(re.compile(r"/submit\?assignment=softmax_backward$"))
        assert "Ada Lovelace" in page.locator("header").inner_text()
        page.goto(f"{server.url}/me/token")
        assert _serious_axe_violations(page, axe_source) == []
        page.go_back()
        source = tmp_path / "softmax_backward.py"
        source.write_text("# fake-grader: verdict=passed\n"
                          "def softmax_backward(y, g):\n"
                          "    return y * (g - (y * g).sum(-1, keepdim=True))\n")
        page.get_by_label(re.compile("Your Python file")).set_input_files(str(source))
        page.get_by_role("button", name="Upload and grade").click()
        page.wait_for_url(re.compile(r"/submissions/\d+$"))
        page.locator(".status-line .badge-passed").wait_for(timeout=60_000)
        assert "100 of 100" in page.locator("main").inner_text()

        staff = browser.new_context(viewport={"width": 1280, "height": 900})
        staff_page = staff.new_page()
        staff_page.goto(f"{platform.base}/launch_as/u-prof?link=link-1")
        staff_page.wait_for_url(re.compile(r"/leaderboard\?assignment=softmax_backward$"))
        staff_page.goto(f"{server.url}/lti")
        staff_page.get_by_role("button", name="Sync rosters and scores now").click()
        staff_page.wait_for_url(re.compile(r"/lti$"))
        assert _serious_axe_violations(staff_page, axe_source) == []
        row = staff_page.locator("table.lti-scores tbody tr", has_text="Ada Lovelace")
        assert "synced" in row.inner_text() and "100 of 100" in row.inner_text()

        staff_page.goto(f"{platform.base}/gradebook")
        gradebook = staff_page.locator("table").inner_text()
        assert "u-ada" in gradebook and "100 / 100" in gradebook
        learner.close()
        staff.close()
    finally:
        platform.stop()
