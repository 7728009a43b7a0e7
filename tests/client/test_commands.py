"""The student CLI's commands without a server: the assignment inferred or suggested from the
file's function (grader.manifest.resolve_assignment), `grader template` without torch, the
connection options before or after the subcommand, `grader check --help`, the one-line
``--quiet`` result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import _submission

from client import course
from client.cli import one_line
from grader import cli
from grader.manifest import DEFAULT_ASSIGNMENT, resolve_assignment

XENT = "def softmax_cross_entropy_backward(x, t, grad, ignore_index=-100):\n    return x\n"
SOFTMAX = "def softmax_backward(y, g):\n    return y\n"


def test_the_assignment_is_inferred_from_the_function_the_file_defines() -> None:
    assert resolve_assignment(None, XENT) == (
        "softmax_cross_entropy_backward",
        "assignment softmax_cross_entropy_backward (the file defines softmax_cross_entropy_backward)")
    assert resolve_assignment(None, "x = 1\n") == (DEFAULT_ASSIGNMENT, None)  # the grader says what is missing
    assert resolve_assignment(None, "def (:\n") == (DEFAULT_ASSIGNMENT, None)
    assert resolve_assignment("softmax_backward", SOFTMAX) == ("softmax_backward", None)


def test_another_assignments_function_is_refused_with_the_option_to_pass() -> None:
    name, note = resolve_assignment("softmax_backward", XENT)
    assert name is None
    assert note == ("the file defines softmax_cross_entropy_backward, not softmax_backward (assignment "
                    "softmax_backward): pass --assignment softmax_cross_entropy_backward")


def test_submit_uploads_nothing_for_a_file_of_another_assignment(tmp_path: Path, capsys) -> None:
    source = tmp_path / "softmax_cross_entropy_backward.py"
    source.write_text(XENT)
    # No server runs at this address: the refusal comes before any request.
    code = cli.main(["submit", str(source), "--assignment", "softmax_backward",
                     "--server", "http://127.0.0.1:9", "--token", "t"])
    assert code == 2
    said = " ".join(capsys.readouterr().err.split())  # rich wraps at the terminal's width
    assert "pass --assignment softmax_cross_entropy_backward; nothing was uploaded" in said


def test_check_refuses_the_same_mismatch_before_grading(tmp_path: Path, capsys) -> None:
    source = tmp_path / "k.py"
    source.write_text(XENT)
    assert cli.main(["check", str(source), "--assignment", "softmax_backward", "--device", "cpu"]) == 2
    assert "pass --assignment softmax_cross_entropy_backward" in " ".join(capsys.readouterr().out.split())
    # With --json -, the document says it (the table goes to stderr).
    assert cli.main(["check", str(source), "--assignment", "softmax_backward", "--json", "-"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "error" and document["error"]["kind"] == "missing_function"
    assert document["summary"]["problem"].endswith("pass --assignment softmax_cross_entropy_backward")


def test_connection_options_are_accepted_before_or_after_the_subcommand() -> None:
    parser = course.build_parser()
    assert parser.parse_args(["--token", "a", "show"]).token == "a"
    assert parser.parse_args(["show", "--token", "b", "--server", "http://s"]).token == "b"
    assert parser.parse_args(["--json", "leaderboard", "x"]).json is True
    assert parser.parse_args(["audit", "--json"]).json is True
    assert cli._connection_options_last(["--token", "t", "--server=http://s", "submit", "f.py"]) == [
        "submit", "--token", "t", "--server=http://s", "f.py"]
    assert cli._connection_options_last(["check", "f.py"]) == ["check", "f.py"]


def test_check_help_describes_the_command_and_its_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["check", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Grade one file on this machine" in text
    assert "exit codes: 0 passed; 1 failed" in text and "3 infrastructure error" in text


def test_template_needs_no_torch(tmp_path: Path) -> None:
    # torch made unimportable, as on a student's install without the grader extra.
    code = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None; "
            "from grader.cli import main; sys.exit(main(['template', 'softmax_backward', '--output', '-']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "def softmax_backward(" in done.stdout


def test_quiet_submit_prints_the_summary_line() -> None:
    assert one_line(_submission()) == "submission 7: passed: 1/1 checks passed"
    assert one_line(_submission(status="running", result=None, score=None)) == "submission 7: running"
