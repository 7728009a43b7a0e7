"""The similarity review pages in a real headless Chromium against a real `grader serve`
(conftest.py), whose embedded worker runs the review: a TA queues it, waits for it, opens
the pair of a disguised copy, sees both texts side by side with the matched fragments marked
and a student's HTML shown as text, marks it reviewed with a note (in the audit log), and
adds a public kernel as a known source. axe-core on every page; screenshots in
results/local/screenshots/."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CORRECT = REPO / "tests" / "corpus" / "softmax_backward" / "correct"
_spec = importlib.util.spec_from_file_location("similarity_disguise",
                                               REPO / "scripts" / "similarity_disguise.py")
assert _spec is not None and _spec.loader is not None
_disguise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_disguise)

ORIGINAL = (CORRECT / "tiles_2d.py").read_text(encoding="utf-8").replace(
    '"""', '"""<script>window.__pwned = 1</script>', 1)
COPY = _disguise.disguise(ORIGINAL, keep=["softmax_backward"], seed=11)
OWN = (CORRECT / "library_two_rows_per_program.py").read_text(encoding="utf-8")


def assert_accessible(pages: Any, name: str) -> None:
    serious = pages.axe(name)
    assert serious == [], f"axe on {name} ({pages.page.url}): {serious}"


def test_ta_reviews_a_disguised_copy_side_by_side(pages_factory: Any, server: Any) -> None:
    uploads = []
    for name, text in (("<b>ada</b>", ORIGINAL), ("bob", COPY), ("cy", OWN)):
        _, token = server.create_student(name)
        uploads.append(server.upload(token, text))
    for submission_id in uploads:
        server.wait_final(submission_id)
    _, ta_token = server.create_staff("tara", "ta")

    ta = pages_factory()
    page = ta.page
    ta.sign_in(ta_token)
    page.get_by_role("link", name="Similarity").click()
    page.wait_for_url(re.compile(r"/staff/similarity$"))
    assert "No finished review of softmax_backward yet" in page.locator("main").inner_text()
    assert_accessible(ta, "similarity-empty")

    page.get_by_label("Threshold (0 to 1)").fill("0.6")
    page.get_by_role("button", name="Run a review").click()
    page.wait_for_url(re.compile(r"done=queued"))
    assert "Review queued" in page.get_by_role("status").inner_text()
    deadline = time.monotonic() + 90
    while page.locator("#latest-run").count() == 0:
        assert time.monotonic() < deadline, "the worker did not finish the review in 90 s"
        time.sleep(0.5)
        page.reload()
    facts = page.locator("#latest-run").inner_text()
    assert "3 students' counted submissions" in facts and "copydetect" in facts
    ta.shot("similarity-overview")
    assert_accessible(ta, "similarity-overview")

    row = page.locator("table.pairs tbody tr", has_text="bob")
    assert row.count() == 1 and "<b>ada</b>" in row.inner_text()
    assert page.locator("table.pairs tbody tr", has_text="cy").count() == 0
    row.get_by_role("link", name=re.compile(r"^Pair \d+$")).click()
    page.wait_for_url(re.compile(r"/staff/similarity/softmax_backward/pairs/\d+$"))
    sides = page.locator(".sides .side")
    assert sides.count() == 2
    assert "<script>window.__pwned = 1</script>" in sides.nth(0).locator("pre").inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert sides.nth(0).locator("mark").count() > 3 and sides.nth(1).locator("mark").count() > 3
    assert "bob" in sides.nth(1).get_by_role("heading").inner_text()
    ta.shot("similarity-pair")
    assert_accessible(ta, "similarity-pair")

    page.get_by_label("Note (staff only; recorded in the audit log)").fill("same tiles, renamed")
    page.get_by_role("button", name="Mark reviewed").click()
    page.wait_for_url(re.compile(r"done=reviewed$"))
    assert "reviewed by tara (ta)" in page.locator("#review-state").inner_text()
    assert "same tiles, renamed" in page.locator("#review-state").inner_text()
    # It decides nothing: the submission's own page is where a disqualification is made.
    sides.nth(1).get_by_role("link", name=f"#{uploads[1]}").click()
    page.wait_for_url(re.compile(rf"/submissions/{uploads[1]}$"))
    assert page.get_by_role("button", name=f"Disqualify submission #{uploads[1]}").is_visible()

    ta.goto("/staff/audit?action=similarity.review")
    assert page.locator("table.audit tbody tr", has_text="same tiles, renamed").count() == 1

    ta.goto("/staff/similarity")
    page.get_by_label("Name", exact=True).fill("library kernel")
    page.get_by_label("Where it comes from (a URL; never fetched)").fill("https://example.org/k")
    page.get_by_label("Python source").fill(OWN)
    page.get_by_role("button", name="Add the source").click()
    page.wait_for_url(re.compile(r"done=source_added$"))
    assert page.locator("table.sources tbody tr", has_text="library kernel").count() == 1
    assert page.locator("table.sources tbody tr", has_text="reference").count() == 1
    assert_accessible(ta, "similarity-sources")
