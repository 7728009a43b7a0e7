"""api/cli.py (`grader serve`): the loud warning when development settings listen beyond
loopback, and `make serve HOST=... PORT=...`."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from api.cli import exposure_warning, is_loopback

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("grader.example.edu", False)])
def test_loopback_addresses(host, loopback) -> None:
    assert is_loopback(host) is loopback


def test_development_beyond_loopback_is_warned_about_loudly() -> None:
    assert exposure_warning("127.0.0.1", "development") is None
    assert exposure_warning("0.0.0.0", "production") is None  # real secrets are enforced there
    warning = exposure_warning("0.0.0.0", "development")
    assert warning is not None and warning.startswith("!" * 78)
    assert "WARNING" in warning and "0.0.0.0" in warning and "changeme" in warning


def test_grader_serve_prints_the_warning_before_it_starts(tmp_path) -> None:
    import os
    import sys

    from ..helpers import wait_until

    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env |= {"PYTHONPATH": str(REPO), "GRADER_DATABASE_URL": f"sqlite:///{tmp_path}/grader.db"}
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "serve", "--host", "0.0.0.0", "--port", "19998",
             "--workers-embedded", "0"], cwd=tmp_path, env=env, stdout=output, stderr=output)
    try:
        wait_until(lambda: "Uvicorn running" in log.read_text() or process.poll() is not None,
                   timeout=60, message="grader serve to start")
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    assert "development mode is listening on 0.0.0.0" in text
    assert text.index("WARNING: development mode") < text.index("Uvicorn running")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_grader_serve_starts_no_worker_without_a_working_sandbox(tmp_path) -> None:
    """No working bwrap (GRADER_BWRAP names a failing one): `grader serve` says so with the
    fix and serves without its embedded worker; `grader worker` refuses to start, before it
    opens the database."""
    import os
    import sys

    from ..helpers import wait_until

    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    broken.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env |= {"PYTHONPATH": str(REPO), "GRADER_DATABASE_URL": f"sqlite:///{tmp_path}/grader.db",
            "GRADER_BWRAP": str(broken)}
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "grader", "serve", "--port", str(_free_port())], cwd=tmp_path, env=env,
            stdout=output, stderr=output)
    try:
        wait_until(lambda: "Uvicorn running" in log.read_text() or process.poll() is not None,
                   timeout=60, message="grader serve to start")
        time.sleep(1.5)  # the supervisor would have spawned a worker by now
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    assert "no embedded worker started" in text and "setting up uid map: Permission denied" in text, text
    assert "Fix:" in text and "starting embedded worker" not in text, text

    env["GRADER_DATABASE_URL"] = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # never reached
    done = subprocess.run([sys.executable, "-m", "grader", "worker"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "grader worker not started" in done.stderr and "setting up uid map" in done.stderr, done.stderr


def test_make_serve_takes_host_and_port() -> None:
    default = subprocess.run(["make", "-n", "serve"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    assert '.venv/bin/grader serve --host "127.0.0.1" --port "8000"' in default
    chosen = subprocess.run(["make", "-n", "serve", "HOST=0.0.0.0", "PORT=9000"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    assert '.venv/bin/grader serve --host "0.0.0.0" --port "9000"' in chosen
