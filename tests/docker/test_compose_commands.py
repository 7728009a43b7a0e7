"""Compose runs only the project's console commands, and those commands exist.

The allowed list (deploy_files.ALLOWED_COMMANDS) is what the rest of the test suite runs
outside Docker: `grader serve --host 0.0.0.0 --port 8000 --workers-embedded 0`, `grader worker`
and `alembic upgrade head`. Checks that need code other people are still writing (the `grader`
CLI, alembic.ini) are skipped, with the reason, until that code exists; from then on they hold.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest
from deploy_files import (
    ALLOWED_COMMANDS,
    COMBINATIONS,
    COMPOSE_FILES,
    REPO,
    command_of,
    load_compose,
    merged_model,
    strip_tags,
)

# Run their image's own server, never one of our commands (the second: docker/local/postgres.Dockerfile,
# the official image's stand-in on a host without a registry).
UPSTREAM_IMAGES = ("postgres:", "kernel-grader-base/postgres:")
# Runs its image's own server (nginx, docker/proxy.Dockerfile), never one of our commands.
PROXY_IMAGE = "kernel-grader-proxy:local"


def _services(doc):
    return (doc.get("services") or {}).items()


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_every_command_in_a_file_is_a_console_command(name):
    for service_name, service in _services(strip_tags(load_compose(name))):
        assert "entrypoint" not in service, f"{name}: {service_name} overrides the entrypoint"
        command = command_of(service)
        if command is not None and service_name != "db":
            assert command in ALLOWED_COMMANDS, f"{name}: {service_name} runs {command}"


@pytest.mark.parametrize("combo", COMBINATIONS)
def test_every_service_runs_a_console_command(combo):
    for service_name, service in _services(merged_model(COMBINATIONS[combo])):
        if service["image"] == PROXY_IMAGE:
            assert command_of(service) is None and "entrypoint" not in service, service_name
            continue
        if service["image"].startswith(UPSTREAM_IMAGES):
            # At most the server itself with -c settings (compose.db-remote.yaml turns on TLS).
            command = command_of(service)
            assert "entrypoint" not in service, service_name
            assert command is None or (command[0] == "postgres" and all(
                arg == "-c" or "=" in arg for arg in command[1:])), f"{combo}: {service_name}"
            continue
        assert command_of(service) in ALLOWED_COMMANDS, f"{combo}: {service_name}"


def test_each_console_command_is_used():
    used = {command_of(s) for s in merged_model(COMBINATIONS["main"])["services"].values()}
    assert ALLOWED_COMMANDS <= used


def test_pyproject_declares_the_console_scripts():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["grader"] == "grader.cli:main"
    # `alembic` comes from the alembic distribution, in the `server` extra (the API image's).
    server = project["optional-dependencies"]["server"]
    assert any(re.match(r"alembic\b", d) for d in server)
    assert not any(re.match(r"(torch|triton)\b", d) for d in project["dependencies"] + server), (
        "torch/triton belong in the grader extra: the API image installs without it")


def test_alembic_runs_from_the_project_root():
    assert (REPO / "alembic" / "env.py").exists(), "the migration step runs alembic/env.py"
    ini = REPO / "alembic.ini"
    assert ini.exists(), "`alembic upgrade head` runs from the root: alembic.ini must be there"
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ini)
    location = parser["alembic"]["script_location"].replace("%(here)s", ".")
    assert location.rstrip("/") in {"alembic", "./alembic"}, location


# The API image has no torch: the commands it runs must work without it.
_WITHOUT_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "triton"}:
                raise ImportError(f"{name} is not installed in the API image")
            return None

    sys.meta_path.insert(0, NoTorch())
    from grader.cli import main
    sys.argv = ["grader", *sys.argv[1:]]
    sys.exit(main() or 0)
    """
)


#: The grader commands docs/deployment.md runs inside the API container.
GUIDE_COMMANDS = {"grader students add", "grader students import", "grader staff add", "grader sandbox"}


@pytest.mark.parametrize("argv", [["serve", "--help"], ["worker", "--help"],
                                  *(c.split()[1:] + ["--help"] for c in sorted(GUIDE_COMMANDS))])
def test_grader_subcommands_exist_and_need_no_torch(argv):
    missing = [p for p in ("grader/cli.py", "submissions/cli.py") if not (REPO / p).exists()]
    assert not missing, f"compose runs these console commands, but {', '.join(missing)} is missing"
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"grader {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    flags = {"serve": ("--host", "--port", "--workers-embedded")}.get(argv[0], ())
    for flag in flags:
        assert flag in done.stdout, f"`grader serve` has no {flag}"


def test_deployment_guide_uses_only_these_commands():
    guide = (REPO / "docs" / "deployment.md").read_text()
    used = set(re.findall(r"\bexec (?:-T )?(?:api|worker) (grader [a-z]+(?: [a-z]+)?)", guide))
    assert used, "the guide shows how to run a grader command in a container"
    assert used <= GUIDE_COMMANDS, used


def _commands(text):
    """`docker compose ...` commands in a text, continuation lines joined, comments dropped."""
    text = text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.lstrip("# ").split("  #")[0].strip()
        if line.startswith("docker compose "):
            found.append(" ".join(line.split()))
    return found


def test_compose_file_headers_match_the_guide():
    guide = set(_commands((REPO / "docs" / "deployment.md").read_text()))
    for name in COMPOSE_FILES:
        for command in _commands((REPO / "docker" / name).read_text()):
            assert command in guide, f"{name}'s header says `{command}`; the guide does not"


def test_stopping_for_a_restore_stops_every_worker():
    guide = (REPO / "docs" / "deployment.md").read_text()
    stops = [c for c in _commands(guide) if " stop" in c]
    assert stops, "the guide shows how to stop the stack for a restore"
    gpus_workers = {n for n, s in merged_model(COMBINATIONS["main+gpus"])["services"].items()
                    if s.get("command") == ["grader", "worker"]}
    for command in stops:
        services = set(command.split(" stop", 1)[1].split())
        if services:  # naming services: with the files used, every worker must be among them
            assert "compose.gpus.yaml" in command, command
            assert gpus_workers <= services, f"{command} leaves {gpus_workers - services} running"
