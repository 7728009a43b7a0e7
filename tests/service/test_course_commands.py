"""A term run with the commands of docs/deployment.md ("Running a term") against a real
`grader serve` (fake grader): staff accounts, assignment settings, roster import, uploads,
a regrade, a disqualification, the final ranking run and the exports."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import sys
from pathlib import Path

import pytest

from .helpers import FAKE_GRADER, INSTRUCTOR_TOKEN, kernel_source, wait_until
from .test_end_to_end import _environment, _grader, _run, grader_serve

pytestmark = pytest.mark.slow


def test_a_term_with_the_course_commands(tmp_path: Path) -> None:
    env = _environment(grade_command=json.dumps([sys.executable, str(FAKE_GRADER)]),
                       poll_interval_s="0.2", database_url=f"sqlite:///{tmp_path}/grader.db")
    with grader_serve(tmp_path, env) as base_url:
        bootstrap = {**env, "GRADER_SERVER": base_url, "GRADER_TOKEN": INSTRUCTOR_TOKEN}

        def course(*args: str, as_env: dict[str, str] = bootstrap, code: int = 0) -> str:
            done = _run(_grader("course", *args), tmp_path, as_env)
            assert done.returncode == code, done.stdout + done.stderr
            return done.stdout + done.stderr

        def course_json(*args: str, as_env: dict[str, str]) -> dict:
            done = _run(_grader("course", "--json", *args), tmp_path, as_env)
            assert done.returncode == 0, done.stdout + done.stderr
            return json.loads(done.stdout)

        # Staff accounts: from the database (grader staff) and over HTTP (grader course).
        added = _run(_grader("staff", "add", "Prof Ada", "--role", "instructor"), tmp_path, env)
        assert added.returncode == 0, added.stderr
        instructor = {**bootstrap, "GRADER_TOKEN": added.stdout.strip()}
        ta_token = course("add-staff", "Grace", "--role", "ta", as_env=instructor).split()[0]
        ta = {**bootstrap, "GRADER_TOKEN": ta_token}

        # The assignment: dates, policy, points (a TA may not).
        due = (dt.datetime.now(dt.UTC) + dt.timedelta(days=7)).replace(microsecond=0)
        settings = ["set", "softmax_backward", "--due", due.isoformat().replace("+00:00", "Z"),
                    "--late-policy", "mark_late", "--max-submissions", "30",
                    "--correctness-points", "60", "--speed-points", "1.0:10,1.5:40"]
        assert "instructor_required" in course(*settings, as_env=ta, code=2)
        shown = course(*settings, as_env=instructor)
        assert "max 100" in shown and "late policy mark_late" in shown

        # The roster, imported from the database side; tokens to a 0600 file.
        roster = tmp_path / "roster.csv"
        roster.write_text("name,email,id\nAlan,alan@example.edu,s1\nBarbara,barbara@example.edu,s2\n"
                          "Cleo,cleo@example.edu,s3\n")
        tokens_file = tmp_path / "tokens.csv"
        imported = _run(_grader("students", "import", str(roster), "--output", str(tokens_file)),
                        tmp_path, env)
        assert imported.returncode == 0, imported.stderr
        assert tokens_file.stat().st_mode & 0o777 == 0o600
        tokens = {r["name"]: r["token"] for r in csv.DictReader(io.StringIO(tokens_file.read_text()))}

        # Uploads.
        for name, directive in (("Alan", "speedup=1.6"), ("Barbara", "speedup=1.2"),
                                ("Alan", "verdict=failed")):
            kernel = tmp_path / f"{name}.py"
            kernel.write_text(kernel_source(directive))
            submitted = _run(_grader("submit", str(kernel), "--server", base_url, "--token",
                                     tokens[name], "--poll-interval", "0.2"), tmp_path, env)
            assert submitted.returncode in (0, 1), submitted.stdout + submitted.stderr
            assert "due " in submitted.stdout  # the due date is shown to the student
        board = course("leaderboard", "softmax_backward", as_env=ta)
        assert "Alan" in board and "provisional" in board

        # A regrade of the failed submission, previewed, then applied.
        regrade_id = course_json("regrade", "softmax_backward", "--status", "failed", as_env=ta)["id"]

        def regrade_finished() -> bool:
            return course_json("regrade-show", str(regrade_id), as_env=ta)["pending"] == 0

        wait_until(regrade_finished, timeout=60, interval=0.5, message="the regrade")
        assert "applied" in course("regrade-apply", str(regrade_id), as_env=ta)

        # Disqualify Barbara's submission, then restore it.
        assert "disqualified" in course("disqualify", "2", "--reason", "copied", as_env=ta)
        assert "restored" in course("restore", "2", as_env=ta)

        # After the due date: the final ranking run.
        just_past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat()
        assert "due_date_in_past" in course("set", "softmax_backward", "--due", just_past,
                                            as_env=instructor, code=2)  # asks to confirm
        course("set", "softmax_backward", "--due", just_past, "--confirm-past-due",
               as_env=instructor)
        assert "instructor_required" in course("final-run", "softmax_backward", "--start",
                                               as_env=ta, code=2)
        course("final-run", "softmax_backward", "--start", as_env=instructor)

        def final_finished() -> bool:
            return course_json("final-run", "softmax_backward", as_env=ta)["pending"] == 0

        wait_until(final_finished, timeout=60, interval=0.5, message="the final run")

        # Exports: the LMS CSV (Cleo never submitted) and Gradescope results.
        grades = tmp_path / "grades.csv"
        said = course("export-lms", "softmax_backward", "--output", str(grades), as_env=ta)
        rows = {r["name"]: r for r in csv.DictReader(io.StringIO(grades.read_text()))}
        unmatched = [name for name, r in rows.items() if not r["email"] and not r["id"]]
        assert ("warning:" in said) == bool(unmatched), said
        assert rows["Cleo"]["score"] == ""  # never submitted: blank, 0 with --zeros
        course("export-lms", "softmax_backward", "--output", str(grades), "--zeros", as_env=ta)
        assert {r["name"]: r["score"] for r in csv.DictReader(
            io.StringIO(grades.read_text()))}["Cleo"] == "0"
        assert (rows["Alan"]["rank"], rows["Alan"]["score"], rows["Alan"]["ranking"]) == (
            "1", "100", "final")
        assert (rows["Barbara"]["rank"], rows["Barbara"]["score"]) == ("2", "70")
        assert (rows["Cleo"]["status"], rows["Cleo"]["email"]) == ("no_submission", "cleo@example.edu")
        results = tmp_path / "results.json"
        course("gradescope", "1", "--output", str(results), as_env=ta)
        assert json.loads(results.read_text())["score"] == 100

        events = course_json("audit", "--limit", "100", as_env=ta)["events"]
        actions = {e["action"] for e in events}
        assert {"staff.create", "assignment.update", "student.import", "regrade.create",
                "regrade.apply", "submission.disqualify", "submission.restore",
                "final_run.create", "export.lms", "export.gradescope"} <= actions
