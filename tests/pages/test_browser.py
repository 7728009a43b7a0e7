"""The web pages in a real headless Chromium, against a real `grader serve` (conftest.py).

Each test takes screenshots (results/local/screenshots/) and runs axe-core on every page it
visits, failing on any serious or critical violation (the full results are written to
results/local/axe/).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .conftest import INSTRUCTOR_TOKEN

pytestmark = pytest.mark.slow

HTML_PAYLOAD = '<script>window.__pwned = 1</script><b>bold</b><img src=x onerror="window.__pwned=2">'


def kernel(directive: str) -> str:
    return (f"# fake-grader: {directive}\n"
            "def softmax_backward(y, g):\n"
            "    return y * (g - (y * g).sum(-1, keepdim=True))\n")


def assert_accessible(pages: Any, name: str) -> None:
    serious = pages.axe(name)
    assert serious == [], f"axe on {name} ({pages.page.url}): {serious}"


def test_student_uploads_watches_the_report_and_sees_the_leaderboard(
        pages_factory: Any, server: Any, tmp_path: Path) -> None:
    _, token = server.create_student("ada")
    # A classmate ahead on the board, so that the student's board has an anonymous row.
    _, other = server.create_student("grace")
    server.wait_final(server.upload(other, kernel("speedup=4.0 bench_rows=1")))

    student = pages_factory()
    page = student.page
    student.goto("/")
    assert page.url.endswith("/sign-in")
    assert_accessible(student, "sign-in")
    student.shot("sign-in")
    # The check itself can fail: a field without a label is a critical violation.
    page.evaluate("document.querySelector('main').insertAdjacentHTML('beforeend', "
                  "'<input id=unlabelled type=text>')")
    assert [v["id"] for v in student.axe("sign-in-broken")] == ["label"]
    page.get_by_label("Your token").fill("gst_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    assert "not valid" in page.get_by_role("alert").inner_text()
    assert_accessible(student, "sign-in-refused")
    student.sign_in(token)
    assert page.get_by_role("heading", level=1).inner_text() == "Hello, ada"
    assert_accessible(student, "home")

    student.goto("/submit")
    assert page.get_by_text("no due date").first.is_visible()
    assert page.get_by_text("accepted but marked late").first.is_visible()
    assert_accessible(student, "upload")
    source = tmp_path / "softmax_backward.py"
    # sleep=3: the report is first seen queued or running, then turns into the verdict.
    source.write_text(kernel("speedup=2.5 bench_rows=2 sleep=3"))
    page.get_by_label(re.compile("Your Python file")).set_input_files(str(source))
    student.shot("upload")
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/submissions/\d+$"))
    submission_id = int(page.url.rsplit("/", 1)[1])
    status = page.locator(".status-line")
    assert re.search(r"queued|running", status.inner_text()), status.inner_text()
    student.shot("report-pending")
    assert_accessible(student, "report-pending")
    # htmx replaces the live part of the page when the verdict is in; no reload here.
    page.locator(".status-line .badge-passed").wait_for(timeout=60_000)
    assert page.locator("#checks-heading").is_visible()

    checks = page.locator("table.checks tbody tr")
    assert checks.count() == 2
    assert "autograd_fp32" in checks.nth(0).inner_text()
    assert "passed" in checks.nth(0).inner_text()
    assert "skipped" in checks.nth(1).inner_text()
    assert "bfloat16 not supported" in checks.nth(1).inner_text()
    assert page.get_by_text("benchmark: geomean_speedup_vs_baseline_graph = 2.500").is_visible()

    charts = page.locator("figure.chart")
    assert charts.count() == 2
    first = charts.nth(0)
    assert "4096x1024/float32" in first.locator("figcaption").inner_text()
    labels = first.locator("svg text.label").all_text_contents()
    assert labels == ["your kernel", "torch_fp32_expression (baseline)",
                      "aten_softmax_backward_data", "reference", "bandwidth floor"]
    # Bars are proportional to the times: the baseline is 2.5x the student's.
    widths = [float(w) for w in first.locator("svg rect.bar").evaluate_all(
        "rects => rects.map(r => r.getAttribute('width'))")]
    assert widths[1] / widths[0] == pytest.approx(2.5, rel=0.01)
    assert first.locator("svg line.floor-line").count() == 1
    assert "Timed: the call on contiguous inputs" in first.locator(".scope").inner_text()
    student.shot("report")
    assert_accessible(student, "report")

    student.goto(f"/submissions/{submission_id}/source")
    assert "def softmax_backward(y, g):" in page.locator("pre.source").inner_text()
    assert_accessible(student, "source")

    student.goto("/submissions")
    row = page.locator("table tbody tr", has_text=f"#{submission_id}")
    assert "passed" in row.inner_text() and "2.5×" in row.inner_text()
    assert_accessible(student, "history")

    student.goto("/leaderboard")
    board = page.locator("table.board tbody tr")
    assert board.count() == 2
    first_row, second_row = board.nth(0).inner_text(), board.nth(1).inner_text()
    assert "anonymous" in first_row and "4×" in first_row and "grace" not in page.content()
    mine = page.locator("table.board tbody tr.you")
    assert mine.count() == 1 and "you" in mine.inner_text() and "2.5×" in second_row
    bars = [float(w) for w in page.locator("rect.speedbar-fill").evaluate_all(
        "rects => rects.map(r => r.getAttribute('width'))")]
    assert bars == [160.0, 100.0]  # 4.0x fills the bar, 2.5x is 2.5/4 of it
    student.shot("leaderboard")
    assert_accessible(student, "leaderboard")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile("/sign-in$"))
    student.goto("/submissions")
    assert page.url.endswith("/sign-in?next=%2Fsubmissions")


def test_ta_disqualifies_a_submission_and_it_leaves_the_board(
        pages_factory: Any, server: Any) -> None:
    student_id, token = server.create_student("linus")
    submission_id = server.upload(token, kernel("speedup=9.5 bench_rows=1"))
    server.wait_final(submission_id)
    _, ta_token = server.create_staff("tara", "ta")

    ta = pages_factory()
    page = ta.page
    ta.sign_in(ta_token)
    assert "tara (ta)" in page.locator(".signout").inner_text()
    assert_accessible(ta, "staff-home")

    ta.goto("/leaderboard")
    row = page.locator("table.board tbody tr", has_text="linus")
    assert row.count() == 1 and "9.5×" in row.inner_text()
    ta.shot("leaderboard-before")
    assert_accessible(ta, "staff-leaderboard")

    row.get_by_role("link", name=f"#{submission_id}").click()
    page.wait_for_url(re.compile(rf"/submissions/{submission_id}$"))
    assert_accessible(ta, "staff-report")
    page.get_by_label("Reason (the student reads it)").fill("copied <from> a classmate")
    page.get_by_role("button", name=f"Disqualify submission #{submission_id}").click()
    page.wait_for_url(re.compile(rf"/submissions/{submission_id}\?done=disqualified$"))
    assert "copied <from> a classmate" in page.locator("dl.facts").inner_text()
    ta.shot("disqualified")

    ta.goto("/leaderboard")
    assert page.locator("table.board tbody tr", has_text="linus").count() == 0
    ta.shot("leaderboard-after")

    ta.goto("/staff/audit?action=submission.disqualify")
    entry = page.locator("table.audit tbody tr", has_text=f"submission #{submission_id}")
    assert entry.count() == 1 and "copied <from> a classmate" in entry.inner_text()
    assert_accessible(ta, "audit")

    for path, name in [("/staff/students", "students"), (f"/staff/students/{student_id}", "student"),
                       ("/submissions", "submissions"), ("/staff/regrades", "regrades"),
                       ("/staff/assignments/softmax_backward", "settings-ta"),
                       ("/staff/exports", "exports")]:
        ta.goto(path)
        assert page.locator("h1").count() == 1
        assert_accessible(ta, name)
        if name == "settings-ta":
            assert page.get_by_text("Only instructors change settings.").is_visible()
            assert page.get_by_role("button", name="Save settings").count() == 0

    response = ta.goto("/staff/students/99999")
    assert response.status == 404 and "student_not_found" in page.locator("main").inner_text()
    assert_accessible(ta, "error-page")

    # The student reads the reason on their own report.
    student = pages_factory()
    student.sign_in(token)
    student.goto(f"/submissions/{submission_id}")
    assert "copied <from> a classmate" in student.page.locator("dl.facts").inner_text()
    assert "tara" not in student.page.locator("dl.facts").inner_text()


def test_instructor_regrades_with_a_preview_and_changes_settings(
        pages_factory: Any, server: Any) -> None:
    _, token = server.create_student("barbara")
    submission_id = server.upload(token, kernel("speedup=1.5"))
    server.wait_final(submission_id)

    instructor = pages_factory()
    page = instructor.page
    instructor.sign_in(INSTRUCTOR_TOKEN)
    instructor.goto("/staff/regrades")
    page.get_by_label("Submission numbers").fill(str(submission_id))
    page.get_by_role("button", name="Queue the regrade").click()
    page.wait_for_url(re.compile(r"/staff/regrades/\d+\?left_out_busy=0$"))
    # The preview refreshes itself (htmx) until the new grading is in.
    page.get_by_text("0 still grading").wait_for(timeout=60_000)
    row = page.locator("table.regrade tbody tr")
    assert row.count() == 1 and "barbara" in row.inner_text()
    instructor.shot("regrade-preview")
    assert_accessible(instructor, "regrade-preview")
    page.get_by_role("button", name=re.compile("Apply regrade")).click()
    # It asks first, saying how many submissions and students change.
    assert "Apply regrade" in page.locator("h1").inner_text()
    assert page.locator("#confirm-count").inner_text() == "1"
    assert_accessible(instructor, "regrade-confirm")
    page.get_by_role("button", name=re.compile("Apply regrade")).click()
    page.wait_for_url(re.compile(r"\?done=applied&applied=1&unchanged=0$"))
    assert "the new gradings of 1 submission(s) now count" in page.get_by_role("status").first.inner_text()
    assert "yes" in page.locator("table.regrade tbody tr td").nth(7).inner_text()

    instructor.goto("/staff/assignments/softmax_backward")
    page.get_by_label("Due at (UTC; empty: no due date)").fill("2031-01-31T23:59")
    page.get_by_label(re.compile("Speed points")).fill("1.0:10, 2.0:40")
    instructor.shot("settings")
    assert_accessible(instructor, "settings")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(re.compile(r"\?done=saved$"))
    rules = page.locator("dl.rules").inner_text()
    assert "2031-01-31 23:59 UTC" in rules and "max 140" in rules


def test_student_strings_are_escaped_everywhere(pages_factory: Any, server: Any) -> None:
    """Source, file name, check message, error, traceback and captured output all carry HTML
    and <script>: the page shows them as text, and none runs."""
    _, token = server.create_student("mallory")
    source = (f"# fake-grader: verdict=failed html=1 nan=1\n# {HTML_PAYLOAD}\n"
              "def softmax_backward(y, g):\n    return y\n")
    submission_id = server.upload(token, source, filename="<img src=x onerror=window.__pwned=3>.py")
    server.wait_final(submission_id, token)

    mallory = pages_factory()
    page = mallory.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    mallory.sign_in(token)
    mallory.goto(f"/submissions/{submission_id}")
    page.locator("#checks-heading").wait_for()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img, main b").count() == 0
    message = page.locator("table.checks tbody tr").nth(0)
    assert HTML_PAYLOAD in message.inner_text()
    assert "NaN/inf" in message.inner_text()  # err/tol of a NaN output, shown as such
    assert HTML_PAYLOAD in page.locator(".error-message").inner_text()
    traceback = page.locator("pre.traceback")
    assert f"ValueError: {HTML_PAYLOAD}" in traceback.inner_text()
    marked = traceback.locator("mark").all_inner_texts()
    assert any("softmax_backward.py" in line for line in marked)
    assert not any("check_child.py" in line for line in marked)
    assert HTML_PAYLOAD in page.locator("pre.log").inner_text()
    mallory.shot("report")
    assert_accessible(mallory, "escaped-report")

    mallory.goto(f"/submissions/{submission_id}/source")
    assert HTML_PAYLOAD in page.locator("pre.source").inner_text()
    assert "<img src=x onerror=window.__pwned=3>.py" in page.locator("main").inner_text()
    assert page.evaluate("window.__pwned") is None
    mallory.goto("/submissions")
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []


def test_pages_work_without_javascript(pages_factory: Any, server: Any, tmp_path: Path) -> None:
    """Sign in, upload, read the report (reloading by hand), disqualify: plain forms only."""
    _, token = server.create_student("nojs")
    student = pages_factory(java_script_enabled=False)
    page = student.page
    student.sign_in(token)
    student.goto("/submit")
    assert not page.locator("#dropzone").is_visible()  # the drop zone needs JavaScript
    source = tmp_path / "kernel.py"
    source.write_text(kernel("speedup=3.0 bench_rows=1"))
    page.get_by_label(re.compile("Your Python file")).set_input_files(str(source))
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/submissions/\d+$"))
    submission_id = int(page.url.rsplit("/", 1)[1])
    server.wait_final(submission_id)
    student.goto(f"/submissions/{submission_id}")
    assert page.locator(".status-line .badge-passed").is_visible()
    assert page.locator("figure.chart").count() == 1
    student.shot("report-no-js")

    ta = pages_factory(java_script_enabled=False)
    ta.sign_in(server.create_staff("nojs-ta", "ta")[1])
    ta.goto(f"/submissions/{submission_id}")
    ta.page.get_by_label("Reason (the student reads it)").fill("testing without scripts")
    ta.page.get_by_role("button", name=f"Disqualify submission #{submission_id}").click()
    ta.page.wait_for_url(re.compile(r"\?done=disqualified$"))
    assert "testing without scripts" in ta.page.locator("dl.facts").inner_text()


def test_api_reference_renders_with_the_network_off(pages_factory: Any, server: Any) -> None:
    """/docs (Swagger UI) and /redoc load only this server's vendored assets: with every
    request to another host aborted, both still list the API's operations."""
    reader = pages_factory()
    page = reader.page
    elsewhere: list[str] = []

    def only_this_server(route: Any) -> None:
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    reader.context.route("**/*", only_this_server)
    reader.goto("/docs")
    operations = page.locator(".opblock-summary-path")
    operations.first.wait_for(timeout=30_000)
    paths = set(operations.all_inner_texts())
    assert "/api/v1/submissions" in {p.replace("\u200b", "") for p in paths}
    reader.shot("swagger-ui")
    # FastAPI's page gets lang="en", api/pages/static/docs-a11y.css fixes the contrast, and deep
    # links are off (with them each operation's button holds a link: nested-interactive).
    assert_accessible(reader, "swagger-ui")

    reader.goto("/redoc")
    page.locator("h2", has_text="Create Submission").first.wait_for(timeout=30_000)
    reader.shot("redoc")
    assert_accessible(reader, "redoc")
    assert elsewhere == [], f"requests left this server: {elsewhere}"


def test_a_1_mb_upload_is_refused_with_the_limit_and_the_file_kept(
        pages_factory: Any, server: Any, tmp_path: Path) -> None:
    """Issue 38: a 1 MB web upload showed raw JSON with a limit the README does not name.
    With JavaScript the form refuses it before sending and keeps the file chosen; without,
    the server's answer is a page of the site with the limit (256 KiB) and the way back."""
    _, token = server.create_student("mb-uploader")
    big = tmp_path / "softmax_backward.py"
    big.write_text(kernel("verdict=passed") + "#" * 1_000_000 + "\n")

    student = pages_factory()
    page = student.page
    student.sign_in(token)
    student.goto("/submit")
    field = page.get_by_label(re.compile("Your Python file"))
    assert "(at most 256 KiB)" in page.locator("label[for=file]").inner_text()
    field.set_input_files(str(big))
    said = page.locator("#file-size-error")
    assert said.is_visible() and "larger than the upload limit of 256 KiB" in said.inner_text()
    page.get_by_role("button", name="Upload and grade").click()
    assert page.url.endswith("/submit")  # not sent
    assert page.evaluate("document.getElementById('file').files.length") == 1  # still chosen
    student.shot("upload-too-large-js")
    assert_accessible(student, "upload-too-large-js")

    plain = pages_factory(java_script_enabled=False)
    plain.sign_in(token)
    plain.goto("/submit")
    plain.page.get_by_label(re.compile("Your Python file")).set_input_files(str(big))
    with plain.page.expect_response(re.compile(r"/submit$")) as answer:
        plain.page.get_by_role("button", name="Upload and grade").click()
    assert answer.value.status == 413
    main = plain.page.locator("main").inner_text()
    assert "the file is larger than the upload limit of 256 KiB" in main
    assert "The limit is 256 KiB; this one was about" in main
    plain.shot("upload-too-large-page")  # (axe needs scripts: error.html is checked above)
    plain.page.get_by_role("link", name="Back to the page you came from").click()
    plain.page.wait_for_url(re.compile(r"/submit$"))
    assert server.api("GET", "/api/v1/submissions", token)["submissions"] == []


def test_a_signed_out_student_is_told_why(pages_factory: Any, server: Any) -> None:
    student_id, token = server.create_student("rotated-rita")
    student = pages_factory()
    student.sign_in(token)
    server.api("POST", f"/api/v1/students/{student_id}/token")
    student.goto("/submissions")
    assert "/sign-in?" in student.page.url
    assert "Staff replaced (rotated) it" in student.page.locator("#sign-in-reason").inner_text()
    assert_accessible(student, "signed-out")


def _phone_pages(server: Any) -> tuple[str, list[str], list[str]]:
    """A course with something in every table (long names and hints included): the
    student's token, the student's pages with a table and the staff's."""
    long_name = "Maximiliane Wolkenstein-Oberhausen-Hohenberg"
    student_id, token = server.create_student(long_name)
    passed = server.upload(token, kernel("speedup=3.25 bench_rows=2"))
    server.wait_final(passed)
    failed = server.upload(token, kernel("document=flipped_sign"))
    server.wait_final(failed)
    server.create_staff("Bartholomew Teaching-Assistant", "ta")
    regrade = server.api("POST", "/api/v1/regrades",
                         json={"assignment": "softmax_backward", "submission_ids": [passed]})
    server.api("PUT", f"/api/v1/assignments/layernorm_backward/extensions/{student_id}",
               json={"due_at": "2031-02-01T12:00:00Z", "reason": "a long accommodation " * 4})
    server.api("POST", "/api/v1/lti/registrations", json={
        "issuer": "https://canvas.university-of-somewhere-far-away.example.edu", "client_id": "10000000000042",
        "deployment_ids": ["1:4dde05e8ca1973bcca9bffc13e1548820eee93a3"],
        "auth_login_url": "https://sso.canvaslms.example.com/api/lti/authorize_redirect",
        "auth_token_url": "https://sso.canvaslms.example.com/login/oauth2/token",
        "keyset_url": "https://sso.canvaslms.example.com/api/lti/security/jwks"})
    student_paths = ["/", "/submissions", "/leaderboard", f"/submissions/{failed}", "/checks"]
    staff_paths = ["/", "/submissions", "/leaderboard", f"/submissions/{passed}",
                   "/staff/students", f"/staff/students/{student_id}", "/staff/staff",
                   "/staff/extensions?assignment=layernorm_backward", "/staff/regrades",
                   f"/staff/regrades/{regrade['id']}", "/staff/audit", "/staff/analytics",
                   "/staff/similarity?assignment=softmax_backward", "/lti"]
    return token, student_paths, staff_paths


def test_every_page_with_a_table_fits_a_phone(pages_factory: Any, server: Any) -> None:
    """Issue 38: History, home, leaderboard and staff tables were 195-653 px wider than a
    390 px screen. At 390 px nothing is wider than the screen, and the History page's
    status and score are on it."""
    token, student_paths, staff_paths = _phone_pages(server)
    for who, signed_in, paths in (("student", token, student_paths),
                                  ("staff", INSTRUCTOR_TOKEN, staff_paths)):
        pages = pages_factory()
        page = pages.page
        page.set_viewport_size({"width": 390, "height": 844})
        pages.sign_in(signed_in)
        for path in paths:
            pages.goto(path)
            assert page.locator("table").count() >= 1, path
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{who} {path}: {width} px wide at 390"
            name = re.sub(r"[^a-z0-9]+", "-", f"{who}{path}").strip("-")
            # The first screen only: a full-page shot of /checks (long, at 390 px) can take
            # longer than Playwright's 30 s on a busy machine.
            page.screenshot(path=str(pages.screenshots / f"{pages.test_name}-390-{name}.png"))
        if who == "student":
            pages.goto("/submissions")
            first = page.locator("table.stack tbody tr").first
            for label in ("Status", "Score"):
                cell = first.locator(f"td[data-label={label}]")
                box = cell.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
            assert_accessible(pages, "history-390")


def test_instructor_walks_a_term_on_the_staff_pages(
        pages_factory: Any, server: Any, tmp_path: Path) -> None:
    """Roster import (tokens downloaded once), uploads, a due date moved into the past
    (confirmed), an extension that makes one upload on time again, the final ranking run
    and the Canvas gradebook: the grade on the roster, the board and the export agree.
    Last in the module, on the assignment the other tests leave alone."""
    import csv
    import datetime as dt
    import io
    import time

    name = "softmax_cross_entropy_backward"
    # sleep=3: the final run's grading takes seconds, so its progress can be seen.
    source = ("# fake-grader: verdict=passed sleep=3\n"
              "def softmax_cross_entropy_backward(x, t, grad):\n    return x\n")
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    server.api("PATCH", f"/api/v1/assignments/{name}", json={"due_at": soon})

    instructor = pages_factory(accept_downloads=True)
    page = instructor.page
    instructor.sign_in(INSTRUCTOR_TOKEN)
    instructor.goto(f"/staff/students?assignment={name}")
    assert_accessible(instructor, "roster")
    page.get_by_label("Roster CSV").fill("name,email,id\nterm-ann,ann@example.edu,t1\n"
                                         ",nobody@example.edu,t2\nterm-ben,ben-at-example,t3\n")
    page.get_by_role("button", name="Import roster").click()
    alert = page.get_by_role("alert").inner_text()
    assert "line 3:" in alert and "line 4:" in alert  # every bad row at once
    good = "name,email,id\nterm-ann,ann@example.edu,t1\nterm-ben,ben@example.edu,t3\n"
    page.get_by_label("Roster CSV").fill(good)
    page.get_by_role("button", name="Import roster").click()
    # The page reports what it did, shows the new table and clears the box; the tokens
    # are shown once, with their download.
    done = page.locator("#import-done").inner_text()
    assert "Imported 2 row(s): 2 new student(s) created" in done
    assert "Tokens are shown once." in done
    assert page.get_by_label("Roster CSV").input_value() == ""
    assert page.locator("table.stack tbody tr", has_text="term-ben").count() == 1
    instructor.shot("roster-imported")
    assert_accessible(instructor, "roster-imported")
    with page.expect_download() as download:
        page.locator("#tokens-download").click()
    assert download.value.suggested_filename == "tokens.csv"
    saved = tmp_path / "tokens.csv"
    download.value.save_as(saved)
    # Importing the same roster again: no file of empty token cells, but why there is none.
    page.get_by_label("Roster CSV").fill(good)
    page.get_by_role("button", name="Import roster").click()
    assert "2 already enrolled" in page.locator("#import-done").inner_text()
    assert "No new student, so no token to download" in page.locator("#no-new-tokens").inner_text()
    assert page.locator("#tokens-download").count() == 0
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(saved.read_text()))}
    uploads = {}
    for student in ("term-ann", "term-ben"):
        submission = server.api("POST", "/api/v1/submissions", rows[student]["token"],
                                files={"file": ("k.py", source.encode(), "text/x-python")},
                                data={"assignment": name})["id"]
        uploads[student] = server.wait_final(submission)

    # The due date moves into the past: the page asks first, and both uploads turn late.
    instructor.goto(f"/staff/assignments/{name}")
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    page.get_by_label("Due at (UTC; empty: no due date)").fill(past)
    page.get_by_role("button", name="Save settings").click()
    assert "due_date_in_past" in page.get_by_role("alert").inner_text()
    assert_accessible(instructor, "settings-confirm")
    page.get_by_label(re.compile("Yes, set a due date in the past")).check()
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url(re.compile(r"\?done=saved$"))
    instructor.goto(f"/staff/students?assignment={name}")
    ann_row = page.locator("tbody tr", has_text="term-ann")
    assert "0 of 100 (100 before the late policy)" in ann_row.inner_text()

    # An extension to just after Ann's upload makes it on time.
    uploaded = dt.datetime.fromisoformat(uploads["term-ann"]["created_at"].replace("Z", "+00:00"))
    instructor.goto(f"/staff/extensions?assignment={name}")
    assert_accessible(instructor, "extensions")
    page.get_by_label("Student").select_option(value=rows["term-ann"]["student_id"])
    page.get_by_label("New due date (UTC), or").fill(
        (uploaded + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_label("Reason").fill("accommodation")
    page.get_by_role("button", name="Grant extension").click()
    page.wait_for_url(re.compile(r"done=granted$"))
    assert "accommodation" in page.locator("table tbody").inner_text()
    instructor.goto(f"/staff/students?assignment={name}")
    ann_row = page.locator("tbody tr", has_text="term-ann")
    assert "100 of 100" in ann_row.inner_text() and "extension: accommodation" in ann_row.inner_text()
    instructor.shot("roster-standing")

    # The final ranking run, once every due date in force has passed.
    while dt.datetime.now(dt.UTC) <= uploaded + dt.timedelta(seconds=3):
        time.sleep(0.2)
    instructor.goto(f"/staff/assignments/{name}")
    page.get_by_role("button", name="Start the final ranking run").click()
    # It asks first: how many students it re-grades (Ann: Ben's upload is late); nothing
    # has started yet.
    assert page.locator("#confirm-count").inner_text() == "1"
    assert "Nothing has changed yet" in page.locator("#confirm-what").inner_text()
    assert server.api("GET", f"/api/v1/assignments/{name}")["final_run"] is None
    assert_accessible(instructor, "final-run-confirm")
    page.get_by_role("button", name="Start the final ranking run now").click()
    page.wait_for_url(re.compile(r"\?done=final_run(#final-run)?$"))
    # Its progress (graded N of M) refreshes by itself; the start button is gone meanwhile,
    # and the board says final only once every grading is done.
    progress = page.locator("#final-run-progress")
    assert "graded 0 of 1;" in progress.inner_text(), progress.inner_text()
    assert page.get_by_role("button", name=re.compile("final ranking run")).count() == 0
    instructor.shot("final-run-progress")
    assert_accessible(instructor, "final-run-progress")
    board = instructor.context.new_page()
    board.goto(f"{server.url}/leaderboard?assignment={name}")
    assert "(provisional)" in board.locator("h1").inner_text()
    assert "grading: 0 of 1 done" in board.locator("#final-run-running").inner_text()
    board.close()
    page.get_by_text("finished, graded 1 of 1").wait_for(timeout=60_000)
    assert server.api("GET", f"/api/v1/assignments/{name}")["final_run"]["finished"]
    instructor.goto(f"/leaderboard?assignment={name}")
    assert "(final)" in page.locator("h1").inner_text()
    assert page.locator("table.board tbody tr", has_text="term-ann").count() == 1
    assert "term-ben" in page.locator("table.unranked").inner_text()
    assert_accessible(instructor, "final-board")

    # The Canvas gradebook carries the same grades.
    # A student without e-mail or roster id: the exports page names the row no LMS can match.
    server.create_student("term-cal")
    instructor.goto("/staff/exports")
    assert "term-cal" in page.locator("#unmatchable").inner_text()
    assert_accessible(instructor, "exports-all")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download Canvas CSV").click()
    canvas = tmp_path / "canvas.csv"
    download.value.save_as(canvas)
    grades = {r["Student"]: r[name] for r in csv.DictReader(io.StringIO(canvas.read_text()))}
    assert grades["Points Possible"] == "100"
    assert (grades["term-ann"], grades["term-ben"]) == ("100", "0")
    assert grades["term-cal"] == ""  # never submitted: blank, not 0


def _overflow_px(page: Any) -> int:
    """How far the page is wider than the viewport (0: no horizontal scrolling)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


@pytest.mark.parametrize("width, height", [(390, 844), (1280, 800)])
def test_a_failed_report_leads_with_its_summary_on_a_phone_and_a_laptop(
        pages_factory: Any, server: Any, width: int, height: int) -> None:
    # A result the real grader wrote for the sign-bug corpus file (fake grader: document=).
    _, token = server.create_student(f"lin-{width}")
    submission_id = server.upload(token, kernel("document=flipped_sign"))
    assert server.wait_final(submission_id, token)["status"] == "failed"

    student = pages_factory()
    page = student.page
    page.set_viewport_size({"width": width, "height": height})
    student.sign_in(token)
    student.goto(f"/submissions/{submission_id}")
    summary = page.locator("section.summary")
    text = summary.inner_text()
    assert "failed: fix example_two_element first; 4/13 checks passed, 2 not run" in text
    assert "y=[0.25,0.75], g=[2,-1] at [0, 0]: got -0.5625, expected 0.5625" in text
    assert "the sign of the subtraction is flipped" in text
    box = summary.bounding_box()
    assert box is not None and box["y"] + box["height"] <= height, (box, height)  # above the fold
    assert _overflow_px(page) <= 0, f"{_overflow_px(page)} px wider than {width}"
    # Each tolerance's derivation is listed once, collapsed; the rows show the bound and link it.
    assert page.locator("details.tolerances dd").count() == 4  # fp32, fp16, bf16, central difference
    assert not page.locator("details.tolerances dd").first.is_visible()
    assert page.locator("table.checks a[href='#tolerance-1']").count() >= 3
    passing = page.locator("table.checks tr.check-passed", has_text="row_sum_invariant")
    assert "x scale" in passing.locator("td[data-label=Tolerance]").inner_text()
    student.shot(f"failed-report-{width}")
    assert student.axe(f"failed-report-{width}") == []
    assert student.axe_results[f"failed-report-{width}"] == []  # no violation of any impact

    # The first check to fix links to its row of the served docs/checks.md.
    summary.get_by_role("link", name="example_two_element").click()
    page.wait_for_url(re.compile(r"/checks#softmax_backward-example_two_element$"))
    row = page.locator("tr#softmax_backward-example_two_element")
    assert "dx = [0.5625, -0.5625]" in row.inner_text()
    assert _overflow_px(page) <= 0
    assert_accessible(student, f"checks-{width}")


def test_staff_read_the_class_analytics_on_a_phone(pages_factory: Any, server: Any) -> None:
    _, token = server.create_student("ana-analytics")
    server.wait_final(server.upload(token, kernel("document=flipped_sign")), token)
    staff = pages_factory()
    page = staff.page
    page.set_viewport_size({"width": 390, "height": 844})
    staff.sign_in(INSTRUCTOR_TOKEN)
    page.get_by_role("link", name="Analytics", exact=True).click()
    page.wait_for_url(re.compile(r"/staff/analytics$"))
    row = page.locator("table.analytics tbody tr", has_text="example_two_element")
    assert "the sign of the subtraction is flipped" in row.inner_text()
    assert _overflow_px(page) <= 0
    staff.shot("analytics-390")
    assert_accessible(staff, "analytics-390")


#: The softmax_backward reference graded on an H200, with its benchmark (fake grader: document=).
H200_REFERENCE = "document=docs/benchmarks/h200-20261201-round6/run3-diagnosis/B2"


@pytest.mark.parametrize("width, height", [(390, 844), (1280, 800)])
def test_a_gpu_report_shows_each_rows_speed_against_the_floor(
        pages_factory: Any, server: Any, width: int, height: int) -> None:
    _, token = server.create_student(f"hopper-{width}")
    submission_id = server.upload(token, kernel(H200_REFERENCE))
    assert server.wait_final(submission_id, token)["status"] == "passed"

    student = pages_factory()
    page = student.page
    page.set_viewport_size({"width": width, "height": height})
    student.sign_in(token)
    student.goto(f"/submissions/{submission_id}")
    summary = page.locator("section.summary")
    named = summary.locator("ul.furthest li").all_inner_texts()
    assert named == ["256x131072/float32: 63% of the floor (2660 GB/s)",
                     "256x131072/bfloat16: 63% of the floor (2684 GB/s)",
                     "256x131072/float16: 64% of the floor (2703 GB/s)"]
    box = summary.bounding_box()
    assert box is not None and box["y"] + box["height"] <= height, (box, height)  # above the fold

    rows = page.locator("table.speeds tbody tr")
    assert rows.count() == 12
    first = rows.filter(has_text="65536x256/float32")
    assert first.locator("td[data-label=Achieved]").inner_text() == "4082 GB/s"
    assert first.locator("td[data-label='Of the floor']").inner_text() == "96%"
    assert page.locator("table.speeds tr.furthest").count() == 3
    chart = page.get_by_role("img", name=re.compile(r"^Fraction of the floor per row"))
    assert chart.is_visible()
    assert "256x131072/float32: 63% · 2660 GB/s" in chart.get_attribute("aria-label")
    # The chart is drawn to the page's width: its bars stay inside its box.
    chart_box, bar_box = chart.bounding_box(), chart.locator("rect.bar").first.bounding_box()
    assert chart_box["width"] <= width and bar_box["x"] + bar_box["width"] <= chart_box["x"] + chart_box["width"]
    assert _overflow_px(page) <= 0, f"{_overflow_px(page)} px wider than {width}"
    page.locator("#speed-heading").scroll_into_view_if_needed()
    student.shot(f"gpu-report-{width}")
    assert student.axe(f"gpu-report-{width}") == []
    assert student.axe_results[f"gpu-report-{width}"] == []  # no violation of any impact
