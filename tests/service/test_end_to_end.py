"""End to end: a real `grader serve` process (real port, SQLite in a temporary directory,
one embedded worker process), driven by the `grader students` and `grader submit` commands
and by HTTP; first with the fake grader, then with the real `grader check`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .helpers import FAKE_GRADER, INSTRUCTOR_TOKEN, kernel_source, wait_until

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
REFERENCE = REPOSITORY_ROOT / "grader" / "assignments" / "softmax_backward" / "reference.py"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), env.get("PYTHONPATH")]))
    env["GRADER_INSTRUCTOR_TOKEN"] = INSTRUCTOR_TOKEN
    env["GRADER_DEPLOYMENT_SEED"] = "e2e-seed"
    env.update({f"GRADER_{k.upper()}": v for k, v in settings.items()})
    return env


def _grader(*args: str) -> list[str]:
    """The `grader` console command (grader/cli.py dispatches the service commands)."""
    return [sys.executable, "-m", "grader", *args]


def _children(pid: int) -> set[int]:
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children.update(int(child) for child in text)
    return children


@contextlib.contextmanager
def grader_serve(workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """Run `grader serve` in `workdir` (SQLite in `workdir`/grader.db, never the checkout's
    var/) until the block ends; then SIGTERM it and check that it and its embedded worker
    exit cleanly."""
    env = {"GRADER_DATABASE_URL": f"sqlite:///{workdir}/grader.db", **env}
    port = _free_port()
    log_path = workdir / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(_grader("serve", "--port", str(port)), cwd=workdir, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"grader serve exited: {log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{base_url}/healthz", timeout=2).json()["status"] == "ok"
        except (httpx.HTTPError, ValueError):
            return False

    try:
        wait_until(ready, timeout=60, interval=0.2, message="grader serve and its worker")
        children = _children(process.pid)
        assert children, "no embedded worker process"
        yield base_url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, log_path.read_text()[-3000:]
    for child in children:
        assert not Path(f"/proc/{child}").exists() or "Z" in (
            Path(f"/proc/{child}/stat").read_text().split(") ", 1)[1][:1]
        ), f"embedded worker {child} outlived grader serve"


def _run(command: list[str], workdir: Path, env: dict[str, str], timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_grader_serve_with_students_and_submit_commands(tmp_path: Path) -> None:
    env = _environment(grade_command=json.dumps([sys.executable, str(FAKE_GRADER)]),
                       poll_interval_s="0.2", database_url=f"sqlite:///{tmp_path}/grader.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with grader_serve(tmp_path, env) as base_url:
        assert (tmp_path / "grader.db").exists()
        # `grader students` from another folder uses the server's database.
        added = _run(_grader("students", "add", "Ada Lovelace"), elsewhere, env)
        assert added.returncode == 0, added.stderr
        token = added.stdout.strip()

        good = tmp_path / "good.py"
        good.write_text(kernel_source("speedup=1.8"))
        result = _run(_grader("submit", str(good), "--server", base_url, "--token", token,
                              "--poll-interval", "0.2"), tmp_path, env)
        assert result.returncode == 0, result.stdout + result.stderr
        # grader/report/render.py's table, as `grader check` prints it, then the service's score.
        assert "passed" in result.stdout and "✓" in result.stdout
        assert "autograd_fp32" in result.stdout and "1/2 checks passed, 1 not run" in result.stdout
        assert "score: 100 of 100" in result.stdout
        assert "seed" not in result.stdout  # students never see a seed

        bad = tmp_path / "bad.py"
        bad.write_text(kernel_source("verdict=failed"))
        result = _run(_grader("submit", str(bad), "--server", base_url, "--token", token,
                              "--poll-interval", "0.2"), tmp_path, env)
        assert result.returncode == 1 and "✗" in result.stdout

        broken = tmp_path / "broken.py"
        broken.write_text("def softmax_backward(:\n")
        result = _run(_grader("submit", str(broken), "--server", base_url, "--token", token),
                      tmp_path, env)
        assert result.returncode == 2 and "source_syntax_error" in result.stderr

        # status (the latest by default) and history read the same submissions back.
        client_env = {**env, "GRADER_SERVER": base_url, "GRADER_TOKEN": token}
        result = _run(_grader("status"), tmp_path, client_env)
        assert result.returncode == 1 and "✗" in result.stdout, result.stdout + result.stderr
        result = _run(_grader("status", "1", "--source"), tmp_path, client_env)
        assert result.returncode == 0 and result.stdout == good.read_text()
        result = _run(_grader("history"), tmp_path, client_env)
        assert result.returncode == 0, result.stderr
        assert "softmax_backward" in result.stdout and "passed" in result.stdout
        assert "failed" in result.stdout

        board = httpx.get(f"{base_url}/api/v1/leaderboard",
                          headers={"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}).json()
        assert [(r["student_name"], r["headline_speedup"]) for r in board["rows"]] == [
            ("Ada Lovelace", 1.8)]
        metrics = httpx.get(f"{base_url}/metrics").text
        assert 'grader_gradings_total{error_kind="",verdict="failed"} 1.0' in metrics
        assert httpx.get(f"{base_url}/docs").status_code == 200


def _real_grader_available() -> bool:
    try:
        return _run(_grader("check", "--help"), REPOSITORY_ROOT, _environment(), 60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_real_grader_passes_the_reference_and_fails_a_wrong_kernel(tmp_path: Path) -> None:
    assert _real_grader_available(), "`python -m grader check --help` failed: the grader CLI is broken"
    reference = REFERENCE.read_text()
    wrong = reference.replace("g - dot", "g + dot")
    assert wrong != reference
    env = _environment(grader_device="cpu")
    with grader_serve(tmp_path, env) as base_url:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            instructor = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
            token = client.post("/api/v1/students", json={"name": "ref"},
                                headers=instructor).json()["token"]
            student = {"Authorization": f"Bearer {token}"}
            ids = {}
            for label, source in (("reference", reference), ("wrong", wrong)):
                response = client.post("/api/v1/submissions", headers=student,
                                       files={"file": (f"{label}.py", source.encode())})
                assert response.status_code == 202, response.text
                ids[label] = response.json()["id"]

            def finished() -> dict[str, dict] | None:
                bodies = {label: client.get(f"/api/v1/submissions/{i}", headers=instructor).json()
                          for label, i in ids.items()}
                done = all(b["status"] in {"passed", "failed", "error"} for b in bodies.values())
                return bodies if done else None

            started = time.monotonic()
            bodies = wait_until(finished, timeout=300, interval=1.0, message="real gradings")
            board = client.get("/api/v1/leaderboard", headers=instructor)
    assert board.status_code == 200, board.text
    # The passing reference is on the board (no GPU here, so among the unbenchmarked passes);
    # the failing kernel is not.
    assert [row["submission_id"] for row in board.json()["rows"]] == [ids["reference"]], board.text
    reference_body, wrong_body = bodies["reference"], bodies["wrong"]
    assert reference_body["status"] == "passed", (reference_body["error"],
                                                  reference_body["grader_stderr"])
    assert reference_body["checks"] and all(c["passed"] or c["skipped"]
                                            for c in reference_body["checks"])
    assert reference_body["result"]["seed"] == reference_body["seed"]
    assert wrong_body["status"] == "failed", (wrong_body["error"], wrong_body["grader_stderr"])
    assert any(not c["passed"] and not c["skipped"] for c in wrong_body["checks"])
    assert time.monotonic() - started < 300


#: Hostile files of the corpus that attack what the trusted side reads (issues 29 and 33), with the
#: error each must end as: the submission's, charged, never an infrastructure failure.
HOSTILE_AHEAD = {"result_link_to_ptmx.py": "tampered", "markup_in_import_error.py": "import",
                 "markup_on_progress_pipe.py": "timeout", "quadratic_step_files.py": "tampered"}


def test_uploads_queued_behind_hostile_files_are_graded_in_their_usual_time(tmp_path: Path) -> None:
    """One worker; files that attack the trusted side (a done.json linked to /dev/ptmx, which
    held a worker 1,800 s per attempt; Rich markup in an import error and on the progress pipe,
    and quadratic step files, each of which was an infrastructure failure retried three times),
    then the reference. Each hostile file ends as the submission's error within the child's
    limit plus a few seconds and counts as one upload; the reference, graded next, is not held
    up beyond that (issues 29 and 33)."""
    folder = REPOSITORY_ROOT / "tests" / "corpus" / "softmax_backward" / "hostile"
    sources = [(name, (folder / name).read_text()) for name in HOSTILE_AHEAD]
    child_timeout_s = 60
    hostile_bound_s = child_timeout_s + 30  # each, as tests/grader/test_hostile.py RESULT_FILE_BOUND_S
    reference_bound_s = 150  # a grading of the reference on the CPU interpreter, loaded 2-core machine
    env = _environment(grader_device="cpu", grader_timeout_s="1800", child_timeout_s=str(child_timeout_s))
    with grader_serve(tmp_path, env) as base_url:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            instructor = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
            token = client.post("/api/v1/students", json={"name": "hostile"},
                                headers=instructor).json()["token"]
            student = {"Authorization": f"Bearer {token}"}
            ids = {}
            started = time.monotonic()
            for label, source in (*sources, ("reference", REFERENCE.read_text())):
                response = client.post("/api/v1/submissions", headers=student,
                                       files={"file": (label if label.endswith(".py") else f"{label}.py",
                                                       source.encode())})
                assert response.status_code == 202, response.text
                ids[label] = response.json()["id"]
            finished_after: dict[str, float] = {}

            def finished() -> dict[str, dict] | None:
                bodies = {label: client.get(f"/api/v1/submissions/{i}", headers=instructor).json()
                          for label, i in ids.items()}
                for label, body in bodies.items():
                    if body["status"] in {"passed", "failed", "error"}:
                        finished_after.setdefault(label, time.monotonic() - started)
                return bodies if len(finished_after) == len(ids) else None

            bodies = wait_until(finished, timeout=len(sources) * hostile_bound_s + reference_bound_s + 60,
                                interval=0.5, message="the hostile files and the reference behind them")
            used = client.get("/api/v1/assignments/softmax_backward", headers=student).json()["you"]
    for position, (name, kind) in enumerate(HOSTILE_AHEAD.items(), start=1):
        assert bodies[name]["status"] == "error", bodies[name]
        assert bodies[name]["error"]["kind"] == kind, (name, bodies[name]["error"])
        assert finished_after[name] < position * hostile_bound_s, (name, finished_after)
    assert bodies["reference"]["status"] == "passed", (bodies["reference"]["error"],
                                                       bodies["reference"]["grader_stderr"])
    assert finished_after["reference"] < len(sources) * hostile_bound_s + reference_bound_s, finished_after
    # Every hostile upload counted (charged), the reference too: none was an infrastructure error.
    assert used["submissions_used"] == len(ids), used
