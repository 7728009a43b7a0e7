"""scripts/test_setup.sh (run by `make test` before the suite), against stub `id`, `apt-get`,
`npm`, `pg_isready` and `pg_ctlcluster` commands: as root it installs what is missing and
starts PostgreSQL, saying so, and a second run does nothing; not as root it stops with the one
command to run."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

STUBS = {
    "id": 'if [ "$1" = -u ]; then echo "$STUB_UID"; else /usr/bin/id "$@"; fi',
    "apt-get": 'echo "apt-get $*" >>"$STUB_LOG"; if [ "$1" = install ]; then : >"$GRADER_TEST_CHROMIUM"; '
               'chmod +x "$GRADER_TEST_CHROMIUM"; fi',
    "npm": 'echo "npm $*" >>"$STUB_LOG"; mkdir -p node_modules/axe-core; : >node_modules/axe-core/axe.min.js',
    "pg_isready": '[ -f "$STUB_STATE/pg-started" ]',
    "pg_ctlcluster": 'echo "pg_ctlcluster $*" >>"$STUB_LOG"; : >"$STUB_STATE/pg-started"',
}


def _tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the script and the pages' lock file, and an environment whose PATH finds the
    stubs first; chromium is missing (GRADER_TEST_CHROMIUM points at a file not there yet)."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "tests" / "pages").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "test_setup.sh", root / "scripts" / "test_setup.sh")
    shutil.copy2(REPO / "tests" / "pages" / "package-lock.json", root / "tests" / "pages" / "package-lock.json")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GRADER_TEST_POSTGRES_URL"}
    env |= {"PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG": str(tmp_path / "calls.log"),
            "STUB_STATE": str(tmp_path / "state"), "GRADER_TEST_CHROMIUM": str(tmp_path / "chromium")}
    return root, env


def _run(root: Path, env: dict[str, str], uid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / "scripts" / "test_setup.sh")], env=env | {"STUB_UID": str(uid)},
                          capture_output=True, text=True, timeout=60)


def _calls(env: dict[str, str]) -> list[str]:
    log = Path(env["STUB_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def test_as_root_it_installs_and_starts_what_is_missing_once(tmp_path):
    root, env = _tree(tmp_path)
    first = _run(root, env, uid=0)
    assert first.returncode == 0, first.stderr
    calls = _calls(env)
    assert calls[:2] == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends chromium"], calls
    assert calls[2] == "npm ci --ignore-scripts --no-audit --no-fund --loglevel=error", calls
    assert "test set-up: installing chromium (apt-get, as root)" in first.stderr
    assert "test set-up: npm ci in tests/pages (axe-core)" in first.stderr
    lock = (root / "tests" / "pages" / "package-lock.json").read_bytes()
    stamp = root / "tests" / "pages" / "node_modules" / ".npm-ci-stamp"
    assert stamp.read_text().strip() == hashlib.sha256(lock).hexdigest()
    clusters = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if clusters and shutil.which("pg_ctlcluster"):
        assert calls[3:] == [f"pg_ctlcluster --skip-systemctl-redirect {clusters[0]} main start"], calls
        assert f"test set-up: starting PostgreSQL {clusters[0]}" in first.stderr
    else:  # no PostgreSQL on this machine: the set-up says how to get one
        assert "PostgreSQL is not installed" in first.stderr

    second = _run(root, env, uid=0)
    assert (second.returncode, second.stderr, _calls(env)) == (0, "", calls), "a second run does nothing"


def test_not_as_root_it_stops_with_the_one_command(tmp_path):
    root, env = _tree(tmp_path)
    done = _run(root, env, uid=1000)
    assert done.returncode == 1
    assert ("missing Debian packages: chromium; as root run: "
            "sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends chromium'") in done.stderr
    assert "then run `make test` again" in done.stderr
    assert _calls(env) == [], "nothing is installed or started"


def test_make_test_is_the_whole_set_up_and_ci_adds_no_install_of_its_own():
    planned = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = planned.splitlines()
    setup = lines.index("scripts/test_setup.sh")
    assert setup < next(i for i, line in enumerate(lines) if line.endswith("-m pytest")), planned
    ci = (REPO / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[-1] == "make test", "CI runs the README's test command, last"
    assert not [c for c in commands if "apt-get" in c or "npm" in c or "pg_ctlcluster" in c], commands
    assert "make test " in (REPO / "README.md").read_text()
