"""Similarity review over HTTP and in the worker, on SQLite and PostgreSQL
(submissions/similarity.py, api/routes/similarity.py, api/pages/routes/similarity.py): staff
queue a review; the worker runs it only when no grading waits (never a request); each
student's counted submission (the gradebook's; their latest upload while nothing counts yet) is
compared with the others and with the known sources, the template subtracted; staff read
the pairs (each side naming the submission compared and whether it counted) and a pair's two
texts with the matched fragments (escaped on the page), mark a pair reviewed (audited, carried
over to the next review), export CSV (formula cells neutralised) and keep the public sources. The engine's own verdicts on the
corpus: tests/service/submissions/test_similarity_engine.py; the browser walk:
tests/pages/test_similarity_browser.py."""

from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import io
import re
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.pages.security import csrf_token_for
from grader.manifest import MANIFESTS
from submissions import repository, similarity
from submissions.worker import Worker

from ..helpers import (
    INSTRUCTOR_TOKEN,
    bearer,
    configure,
    create_staff,
    create_student,
    grade_next,
    instructor_headers,
    make_outcome,
    upload,
)

REPO = Path(__file__).resolve().parents[3]
CORRECT = REPO / "tests" / "corpus" / "softmax_backward" / "correct"
NAME = "softmax_backward"
BASE = f"/api/v1/assignments/{NAME}/similarity"

_spec = importlib.util.spec_from_file_location("similarity_disguise",
                                               REPO / "scripts" / "similarity_disguise.py")
assert _spec is not None and _spec.loader is not None
_disguise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_disguise)

ORIGINAL = (CORRECT / "tiles_2d.py").read_text(encoding="utf-8")
COPY = _disguise.disguise(ORIGINAL, keep=[NAME], seed=11)
OWN = (CORRECT / "library_two_rows_per_program.py").read_text(encoding="utf-8")
TEMPLATE = MANIFESTS[NAME].template_file.read_text(encoding="utf-8")


def _submit(client: TestClient, session, token: str, source: str, status: str = "passed") -> int:
    response = upload(client, token, source)
    assert response.status_code == 202, response.text
    return grade_next(session, make_outcome(status))


def _class(client: TestClient, session) -> dict[str, int]:
    """Four students: ada's kernel, bob's disguised copy of it, cy who first uploaded a copy
    that failed and then her own kernel that passed (her own counts: the best, and the
    latest), dee who handed in the template."""
    ids = {}
    for name in ("ada", "bob", "cy", "dee"):
        ids[name], ids[f"{name}_token"] = create_student(client, name)
    ids["ada_sub"] = _submit(client, session, ids["ada_token"], ORIGINAL)
    ids["bob_sub"] = _submit(client, session, ids["bob_token"], COPY)
    ids["cy_old"] = _submit(client, session, ids["cy_token"], ORIGINAL, "failed")
    ids["cy_sub"] = _submit(client, session, ids["cy_token"], OWN)
    ids["dee_sub"] = _submit(client, session, ids["dee_token"], TEMPLATE)
    return ids


def _run_worker(settings, session_factory) -> bool:
    """One turn of a real worker's loop (the fake grader for gradings; no grader started
    ahead, which would outlive the test)."""
    settings = settings.model_copy(update={"grader_warm_start": False})
    return Worker(settings, session_factory, worker_id="similarity-test").process_next_job()


def _student_pairs(body: dict) -> set[tuple[int, int]]:
    return {(p["left"]["submission_id"], p["right"]["submission_id"]) for p in body["pairs"]
            if p["right"]["kind"] == "submission"}


def test_a_review_runs_in_the_worker_and_lists_the_disguised_copy(
        client: TestClient, db_session, settings, session_factory) -> None:
    ids = _class(client, db_session)
    _, ta_token = create_staff(client, "tara", "ta")

    assert client.post(BASE, json={}, headers=bearer(ids["ada_token"])).status_code == 403
    queued = client.post(BASE, json={"threshold": 0.6}, headers=bearer(ta_token))
    assert queued.status_code == 202, queued.text
    assert queued.json()["status"] == "queued" and queued.json()["requested_by"] == "tara (ta)"
    again = client.post(BASE, json={}, headers=bearer(ta_token))
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "similarity_run_in_progress"
    # Nothing ran in the request: the overview shows it waiting, no pairs.
    body = client.get(BASE, headers=bearer(ta_token)).json()
    assert body["run"] is None and body["pending"]["status"] == "queued" and body["pairs"] == []

    # A grading waits: the worker grades it first (students' verdicts before any review).
    pending = upload(client, ids["dee_token"], TEMPLATE)
    assert pending.status_code == 202
    ids["dee_sub"] = pending.json()["id"]
    assert _run_worker(settings, session_factory) is True
    read = client.get(f"/api/v1/submissions/{ids['dee_sub']}", headers=bearer(ta_token)).json()
    assert read["status"] == "passed"
    assert client.get(BASE, headers=bearer(ta_token)).json()["pending"]["status"] == "queued"

    assert _run_worker(settings, session_factory) is True
    assert _run_worker(settings, session_factory) is False  # nothing left

    body = client.get(BASE, headers=bearer(ta_token)).json()
    run = body["run"]
    assert run["status"] == "finished" and body["pending"] is None
    assert run["tool"].startswith("copydetect ")
    assert run["submissions_compared"] == 4  # one per student: the one that counts
    assert run["parameters"]["compared"] == "counted"
    assert run["parameters"]["latest_upload_ids"] == []
    assert run["sources_compared"] == 1  # the reference, read from the grader's folder
    assert run["parameters"]["template"] is True
    assert _student_pairs(body) == {(ids["ada_sub"], ids["bob_sub"])}
    top = body["pairs"][0]
    assert top["similarity"] >= 0.6 and top["left"]["student_name"] == "ada"
    assert all(p["left"]["submission_id"] not in (ids["cy_old"], ids["dee_sub"])
               for p in body["pairs"])
    assert all(p["left"]["text"] is None for p in body["pairs"])  # texts only per pair
    assert body["total"] == len(body["pairs"])
    if body["total"] > 1:  # a page of one: the most similar, and the total still counts all
        page = client.get(BASE, params={"limit": 1, "offset": 1}, headers=bearer(ta_token)).json()
        assert page["total"] == body["total"] and [p["id"] for p in page["pairs"]] == [body["pairs"][1]["id"]]

    pair = client.get(f"{BASE}/pairs/{top['id']}", headers=bearer(ta_token)).json()
    assert pair["left"]["text"] == ORIGINAL and pair["right"]["text"] == COPY
    for side in (pair["left"], pair["right"]):
        assert side["fragments"] and all(0 <= s < e <= len(side["text"]) for s, e in side["fragments"])
    sources = client.get(f"{BASE}/sources", headers=bearer(ta_token)).json()["sources"]
    assert [(s["kind"], s["name"]) for s in sources] == [("reference", similarity.REFERENCE_NAME)]

    # A threshold filter on the stored pairs; another assignment has no review.
    assert client.get(BASE, params={"min_similarity": 1}, headers=bearer(ta_token)).json()["pairs"] == [
        p for p in body["pairs"] if p["similarity"] >= 1]
    other = client.get("/api/v1/assignments/gemm_epilogue/similarity", headers=bearer(ta_token))
    assert other.json()["run"] is None
    assert client.get("/api/v1/assignments/nope/similarity",
                      headers=bearer(ta_token)).json()["error"]["code"] == "unknown_assignment"
    missing = client.get(f"/api/v1/assignments/gemm_epilogue/similarity/pairs/{top['id']}",
                         headers=bearer(ta_token))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "similarity_pair_not_found"


def _claim_and_review(db_session, session_factory) -> None:
    """Claim the queued review and run it (the worker would grade a queued upload first)."""
    claimed = repository.claim_next_similarity_run(
        db_session, worker_id="w", lease_s=60, max_attempts=3, now=dt.datetime.now(dt.UTC))
    db_session.commit()
    assert claimed is not None and similarity.execute_run(session_factory, claimed) is True


def test_the_counted_submission_is_reviewed_not_the_latest_upload(
        client: TestClient, db_session, session_factory) -> None:
    """bob's passing copy counts (counting ``best``); his later own kernel failed, so it does
    not: the copy is still paired with ada's original, and the pair names the copy. eve's
    upload is not graded yet (nothing of hers counts): her latest upload is compared, and
    labelled so. Under counting ``latest`` bob's later upload counts, and is compared."""
    ids = {}
    for name in ("ada", "bob", "eve"):
        ids[name], ids[f"{name}_token"] = create_student(client, name)
    ids["ada_sub"] = _submit(client, db_session, ids["ada_token"], ORIGINAL)
    ids["bob_copy"] = _submit(client, db_session, ids["bob_token"], COPY)
    ids["bob_later"] = _submit(client, db_session, ids["bob_token"], OWN, "failed")
    pending = upload(client, ids["eve_token"], _disguise.disguise(ORIGINAL, keep=[NAME], seed=3))
    assert pending.status_code == 202
    ids["eve_sub"] = pending.json()["id"]  # queued: no verdict yet

    board = client.get("/api/v1/leaderboard", params={"assignment": NAME},
                       headers=instructor_headers()).json()["rows"]
    counted = {r["student_name"]: r["graded_submission_id"] for r in board}
    assert counted["bob"] == ids["bob_copy"] and counted["eve"] is None

    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    _claim_and_review(db_session, session_factory)
    body = client.get(BASE, headers=instructor_headers()).json()
    assert body["run"]["submissions_compared"] == 3
    assert body["run"]["parameters"]["latest_upload_ids"] == [ids["eve_sub"]]
    students = _student_pairs(body)
    assert (ids["ada_sub"], ids["bob_copy"]) in students
    assert not [p for p in students if ids["bob_later"] in p]
    (pair,) = [p for p in body["pairs"] if p["right"]["submission_id"] == ids["bob_copy"]]
    assert (pair["left"]["compared_as"], pair["right"]["compared_as"]) == ("counted", "counted")
    with_eve = [p for p in body["pairs"] if ids["eve_sub"] in
                (p["left"]["submission_id"], p["right"]["submission_id"])]
    assert with_eve and all(
        side["compared_as"] == ("latest_upload" if side["submission_id"] == ids["eve_sub"]
                                else "counted")
        for p in with_eve for side in (p["left"], p["right"]) if side["kind"] == "submission")
    read = client.get(f"{BASE}/pairs/{pair['id']}", headers=instructor_headers()).json()
    assert read["right"]["submission_id"] == ids["bob_copy"] and read["right"]["text"] == COPY
    rows = list(csv.DictReader(io.StringIO(
        client.get(f"{BASE}/export", headers=instructor_headers()).text)))
    row = next(r for r in rows if r["pair_id"] == str(pair["id"]))
    assert (row["right_submission_id"], row["right_compared_as"]) == (str(ids["bob_copy"]),
                                                                      "counted")
    assert {r["left_compared_as"] for r in rows if r["left_submission_id"] == str(ids["eve_sub"])
            } <= {"latest_upload"}

    # The same rule as the gradebook's: counting "latest" makes bob's later upload count.
    configure(client, NAME, counting="latest")
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    _claim_and_review(db_session, session_factory)
    body = client.get(BASE, headers=instructor_headers()).json()
    assert body["run"]["parameters"]["latest_upload_ids"] == []  # eve's latest counts now
    assert not [p for p in _student_pairs(body) if ids["bob_copy"] in p]


def test_review_marks_are_audited_and_carried_to_the_next_review(
        client: TestClient, db_session, settings, session_factory) -> None:
    ids = _class(client, db_session)
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    assert _run_worker(settings, session_factory)
    (pair,) = [p for p in client.get(BASE, headers=instructor_headers()).json()["pairs"]
               if p["right"]["kind"] == "submission"]

    marked = client.post(f"{BASE}/pairs/{pair['id']}/review",
                         json={"note": "same tiling, renamed"}, headers=instructor_headers())
    assert marked.status_code == 200, marked.text
    assert marked.json()["reviewed_by"] == "GRADER_INSTRUCTOR_TOKEN (bootstrap)"
    assert marked.json()["review_note"] == "same tiling, renamed"
    events = client.get("/api/v1/audit", params={"action": "similarity.review"},
                        headers=instructor_headers()).json()["events"]
    assert len(events) == 1 and events[0]["target_id"] == str(pair["id"])
    assert events[0]["details"]["note"] == "same tiling, renamed"
    # Nothing was decided: both submissions stand.
    for key in ("ada_sub", "bob_sub"):
        read = client.get(f"/api/v1/submissions/{ids[key]}", headers=instructor_headers()).json()
        assert read["disqualified"] is False

    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    assert _run_worker(settings, session_factory)
    body = client.get(BASE, headers=instructor_headers()).json()
    (again,) = [p for p in body["pairs"] if p["right"]["kind"] == "submission"]
    assert again["id"] != pair["id"] and again["run_id"] != pair["run_id"]
    assert again["review_note"] == "same tiling, renamed" and again["reviewed_at"] is not None

    cleared = client.post(f"{BASE}/pairs/{again['id']}/review", json={"reviewed": False},
                          headers=instructor_headers())
    assert cleared.json()["reviewed_at"] is None
    assert client.get("/api/v1/audit", params={"action": "similarity.unreview"},
                      headers=instructor_headers()).json()["events"]


def test_public_sources_are_compared_and_the_export_is_formula_safe(
        client: TestClient, db_session, settings, session_factory) -> None:
    library = (CORRECT / "library_autotuned_whole_row.py").read_text(encoding="utf-8")
    sid, token = create_student(client, "=HYPERLINK(\"http://x\")")
    copied = _submit(client, db_session, token, _disguise.disguise(library, keep=[NAME], seed=5))
    _, ta_token = create_staff(client, "tara", "ta")

    added = client.post(f"{BASE}/sources", headers=bearer(ta_token), json={
        "name": "+lib kernel", "origin": "https://example.org/lib", "text": library})
    assert added.status_code == 201, added.text
    assert added.json()["kind"] == "public" and added.json()["added_by"] == "tara (ta)"
    taken = client.post(f"{BASE}/sources", headers=bearer(ta_token),
                        json={"name": "+LIB kernel", "text": library})
    assert taken.json()["error"]["code"] == "similarity_source_name_taken"
    invalid = client.post(f"{BASE}/sources", headers=bearer(ta_token),
                          json={"name": "not python", "text": "def f(:\n"})
    assert invalid.status_code == 422
    assert invalid.json()["error"]["code"] == "similarity_source_invalid"
    assert client.post(f"{BASE}/sources", headers=bearer(token),
                       json={"name": "x", "text": "x = 1\n"}).status_code == 403

    assert client.get(f"{BASE}/export", headers=bearer(ta_token)).json()["error"]["code"] == \
        "similarity_run_not_found"
    assert client.post(BASE, json={}, headers=bearer(ta_token)).status_code == 202
    assert _run_worker(settings, session_factory)
    body = client.get(BASE, headers=bearer(ta_token)).json()
    to_library = [p for p in body["pairs"] if p["right"]["source_name"] == "+lib kernel"]
    assert [p["left"]["submission_id"] for p in to_library] == [copied]

    exported = client.get(f"{BASE}/export", headers=bearer(ta_token))
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert tuple(rows[0]) == similarity.CSV_COLUMNS
    row = next(r for r in rows if r["right_source"] == "'+lib kernel")
    assert row["left_student"] == "'=HYPERLINK(\"http://x\")" and row["left_student_id"] == str(sid)
    assert float(row["similarity"]) >= 0.6 and row["right_kind"] == "source"
    assert client.get("/api/v1/audit", params={"action": "similarity.export"},
                      headers=bearer(ta_token)).json()["events"]

    source_id = added.json()["id"]
    assert client.delete(f"{BASE}/sources/{source_id}", headers=bearer(ta_token)).status_code == 204
    after = client.get(BASE, headers=bearer(ta_token)).json()
    assert not [p for p in after["pairs"] if p["right"]["source_name"] == "+lib kernel"]
    reference = next(s for s in client.get(f"{BASE}/sources", headers=bearer(ta_token)).json()["sources"]
                     if s["kind"] == "reference")
    gone = client.delete(f"{BASE}/sources/{reference['id']}", headers=bearer(ta_token))
    assert gone.json()["error"]["code"] == "similarity_source_not_found"


def test_a_lost_lease_stores_nothing_and_an_expired_run_is_claimed_again(
        client: TestClient, db_session, session_factory) -> None:
    _class(client, db_session)
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    now = dt.datetime.now(dt.UTC)
    first = repository.claim_next_similarity_run(db_session, worker_id="w1", lease_s=10,
                                                 max_attempts=3, now=now)
    db_session.commit()
    assert first is not None and first.attempt == 1
    assert repository.claim_next_similarity_run(db_session, worker_id="w2", lease_s=10,
                                                max_attempts=3, now=now) is None
    later = now + dt.timedelta(seconds=11)
    second = repository.claim_next_similarity_run(db_session, worker_id="w2", lease_s=10,
                                                  max_attempts=3, now=later)
    db_session.commit()
    assert second is not None and second.run_id == first.run_id and second.attempt == 2
    # The first worker's outcome is fenced out; the second's is stored once.
    assert similarity.execute_run(session_factory, first) is False
    assert similarity.execute_run(session_factory, second) is True
    body = client.get(BASE, headers=instructor_headers()).json()
    assert body["run"]["id"] == first.run_id and body["run"]["status"] == "finished"
    assert len({p["id"] for p in body["pairs"]}) == len(body["pairs"]) > 0


def test_the_page_shows_the_pairs_and_both_texts_escaped(
        client: TestClient, db_session, settings, session_factory) -> None:
    hostile = ORIGINAL.replace('"""', '"""<script>window.__pwned=1</script>', 1)
    sid, token = create_student(client, "<b>mallory</b>")
    mallory = _submit(client, db_session, token, hostile)
    _, other = create_student(client, "eve")
    _submit(client, db_session, other, COPY)
    _, ta_token = create_staff(client, "tara", "ta")

    page = client.get("/sign-in").text
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post("/sign-in", data={"csrf_token": nonce, "token": ta_token, "next": "/"},
                       follow_redirects=False).status_code == 303
    csrf = csrf_token_for(ta_token)

    overview = client.get("/staff/similarity", params={"assignment": NAME})
    assert overview.status_code == 200 and "No finished review of softmax_backward yet" in overview.text
    started = client.post(f"/staff/similarity/{NAME}/runs",
                          data={"csrf_token": csrf, "threshold": "0.6"}, follow_redirects=False)
    assert started.status_code == 303 and "done=queued" in started.headers["location"]
    forged = client.post(f"/staff/similarity/{NAME}/runs", data={"threshold": "0.6"},
                         follow_redirects=False)
    assert forged.status_code == 403
    queued = client.get(started.headers["location"]).text
    assert "is <strong>queued</strong>" in queued
    assert _run_worker(settings, session_factory)

    listing = client.get("/staff/similarity", params={"assignment": NAME}).text
    assert "&lt;b&gt;mallory&lt;/b&gt;" in listing and "<b>mallory</b>" not in listing
    pair_id = int(re.search(rf'href="/staff/similarity/{NAME}/pairs/(\d+)"', listing).group(1))
    pair_page = client.get(f"/staff/similarity/{NAME}/pairs/{pair_id}").text
    assert "<script>window.__pwned" not in pair_page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in pair_page
    assert pair_page.count("<mark>") > 3
    assert f'href="/submissions/{mallory}"' in pair_page and "not reviewed yet" in pair_page
    assert pair_page.count("their counted submission") == 2 and "latest upload" not in pair_page

    reviewed = client.post(f"/staff/similarity/{NAME}/pairs/{pair_id}/review",
                           data={"csrf_token": csrf, "note": "<i>read it</i>", "reviewed": "true"},
                           follow_redirects=False)
    assert reviewed.status_code == 303
    after = client.get(reviewed.headers["location"]).text
    assert "reviewed by tara (ta)" in after and "&lt;i&gt;read it&lt;/i&gt;" in after

    exported = client.post(f"/staff/similarity/{NAME}/export",
                           data={"csrf_token": csrf, "min_similarity": "0.6"})
    assert exported.status_code == 200 and "'<b>mallory</b>" not in exported.text
    assert "<b>mallory</b>" in exported.text  # CSV is data: no HTML escaping, no formula

    refused = client.post(f"/staff/similarity/{NAME}/sources",
                          data={"csrf_token": csrf, "name": "bad", "text": "def f(:\n"})
    assert refused.status_code == 422 and "similarity_source_invalid" in refused.text
    assert "def f(:" in refused.text  # the text is kept in the form
    added = client.post(f"/staff/similarity/{NAME}/sources",
                        data={"csrf_token": csrf, "name": "lib", "origin": "", "text": OWN},
                        follow_redirects=False)
    assert added.status_code == 303
    assert ">lib</td>" in client.get(added.headers["location"]).text
    del sid


@pytest.mark.parametrize("threshold", ["0", "1.5", "x"])
def test_a_bad_threshold_is_refused_on_the_page(client: TestClient, threshold: str) -> None:
    page = client.get("/sign-in").text
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/sign-in", data={"csrf_token": nonce, "token": INSTRUCTOR_TOKEN, "next": "/"})
    response = client.post(f"/staff/similarity/{NAME}/runs",
                           data={"csrf_token": csrf_token_for(INSTRUCTOR_TOKEN),
                                 "threshold": threshold})
    assert response.status_code == 422 and "validation_error" in response.text


def test_the_course_commands_run_a_review_and_keep_sources(
        client: TestClient, db_session, settings, session_factory, tmp_path: Path) -> None:
    """`grader course similarity*` (client/course.py) against this app, through the
    client's own HTTP layer."""
    from rich.console import Console

    from client import course
    from client.http import ServiceClient

    ids = _class(client, db_session)
    library = tmp_path / "lib.py"
    library.write_text(ORIGINAL, encoding="utf-8")

    def run(*argv: str) -> str:
        args = course.build_parser().parse_args(list(argv))
        out = io.StringIO()
        with ServiceClient("http://testserver", INSTRUCTOR_TOKEN,
                           transport=client._transport) as http:  # noqa: SLF001 - the app's own
            course.HANDLERS[args.command](http, args, Console(file=out, width=200))
        return out.getvalue()

    assert "added to softmax_backward" in run("similarity-add-source", NAME, str(library),
                                              "--name", "[red]lib[/red]", "--origin", "book")
    assert "queued" in run("similarity", NAME, "--run", "--threshold", "0.7")
    assert "no finished similarity review" in run("similarity", NAME)
    assert _run_worker(settings, session_factory)
    listing = run("similarity", NAME)
    assert "pairs at or above 0.7" in listing and "ada" in listing and "bob" in listing
    assert "source: [red]lib[/red]" in listing  # printed as text, not as Rich markup
    pair_id = client.get(BASE, headers=instructor_headers()).json()["pairs"][0]["id"]
    assert "marked reviewed" in run("similarity-review", NAME, str(pair_id), "--note", "seen")
    output = tmp_path / "pairs.csv"
    assert "pair(s) written" in run("export-similarity", NAME, "--output", str(output))
    rows = list(csv.DictReader(io.StringIO(output.read_text())))
    assert any(r["review_note"] == "seen" for r in rows)
    sources = run("similarity-sources", NAME)
    assert "[red]lib[/red]" in sources and "reference" in sources
    source_id = next(s["id"] for s in client.get(f"{BASE}/sources", headers=instructor_headers())
                     .json()["sources"] if s["kind"] == "public")
    assert "removed" in run("similarity-remove-source", NAME, str(source_id))
    del ids


def test_a_review_out_of_time_fails_with_why_and_a_stopping_worker_hands_it_back(
        client: TestClient, db_session, session_factory, monkeypatch) -> None:
    import threading

    _class(client, db_session)
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202

    def claim():
        claimed = repository.claim_next_similarity_run(
            db_session, worker_id="w1", lease_s=60, max_attempts=3, now=dt.datetime.now(dt.UTC))
        db_session.commit()
        return claimed

    # The child (copydetect's import alone takes longer) is killed at its limit: the run is
    # an error with the reason, shown to staff; nothing is retried.
    claimed = claim()
    assert similarity.execute_run(session_factory, claimed, timeout_s=0.01) is False
    body = client.get(BASE, headers=instructor_headers()).json()
    assert body["run"] is None and body["pending"]["status"] == "error"
    assert "longer than 0.01 s" in body["pending"]["error_message"]
    assert claim() is None

    # A worker already stopping hands the run back, uncharged, without starting a child
    # (a review can finish inside one poll interval: it must not be stored all the same).
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    stopping = threading.Event()
    stopping.set()
    claimed = claim()
    assert similarity.execute_run(session_factory, claimed, cancel=stopping) is False
    assert client.get(BASE, headers=instructor_headers()).json()["pending"]["status"] == "queued"

    # A worker told to stop while its child runs kills the child and hands the run back. The
    # child here sleeps (a real review may finish before the first poll), so the kill is sure.
    real_popen = similarity.subprocess.Popen
    stopping = threading.Event()
    started: list[object] = []

    def slow_child(argv, **kwargs):
        process = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)
        started.append(process)
        stopping.set()
        return process

    claimed = claim()
    assert claimed is not None and claimed.attempt == 1
    monkeypatch.setattr(similarity.subprocess, "Popen", slow_child)
    assert similarity.execute_run(session_factory, claimed, cancel=stopping) is False
    monkeypatch.setattr(similarity.subprocess, "Popen", real_popen)
    assert len(started) == 1 and started[0].returncode is not None  # killed, reaped
    assert client.get(BASE, headers=instructor_headers()).json()["pending"]["status"] == "queued"
    again = claim()
    assert again is not None and again.run_id == claimed.run_id and again.attempt == 1
    assert similarity.execute_run(session_factory, again) is True


def test_a_replaced_reference_is_retired_with_its_pairs_and_never_compared_again(
        client: TestClient, db_session, settings, session_factory) -> None:
    _class(client, db_session)
    # A reference the grader held before (here: bob's copy): reviewed once against it.
    now = dt.datetime.now(dt.UTC)
    repository.upsert_reference_source(
        db_session, assignment=NAME, name=similarity.REFERENCE_NAME, source_text=COPY,
        source_sha256="0" * 64, added_by="worker", now=now)
    db_session.commit()
    claimed = repository.claim_next_similarity_run(db_session, worker_id="w", lease_s=60,
                                                   max_attempts=3, now=now)
    assert claimed is None  # nothing queued yet
    assert client.post(BASE, json={}, headers=instructor_headers()).status_code == 202
    assert _run_worker(settings, session_factory)

    sources = client.get(f"{BASE}/sources", headers=instructor_headers()).json()["sources"]
    assert [s["kind"] for s in sources] == ["reference", "retired"]
    assert "until" in sources[1]["name"] and sources[1]["source_sha256"] == "0" * 64
    run = client.get(BASE, headers=instructor_headers()).json()["run"]
    assert run["sources_compared"] == 1  # the grader's reference only
    body = client.get(BASE, params={"min_similarity": 0}, headers=instructor_headers()).json()
    assert not [p for p in body["pairs"] if p["right"]["source_id"] == sources[1]["id"]]
    # The retired row keeps its text (earlier reviews' fragments point into it) and stays.
    assert client.delete(f"{BASE}/sources/{sources[1]['id']}",
                         headers=instructor_headers()).status_code == 404
