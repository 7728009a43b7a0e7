"""api/cli.py (`grader serve`): the loud warning when development settings listen beyond
loopback, and `make serve HOST=... PORT=...`."""

from __future__ import annotations

import shutil
import subprocess
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


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_takes_host_and_port() -> None:
    default = subprocess.run(["make", "-n", "serve"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    assert '.venv/bin/grader serve --host "127.0.0.1" --port "8000"' in default
    chosen = subprocess.run(["make", "-n", "serve", "HOST=0.0.0.0", "PORT=9000"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    assert '.venv/bin/grader serve --host "0.0.0.0" --port "9000"' in chosen
