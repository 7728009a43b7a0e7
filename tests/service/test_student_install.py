"""The student install: `pip install <repository>` without extras, in a fresh virtualenv,
gives a `grader` command whose submit, status and history work against a running server
with httpx, rich and pydantic only; the wheel carries no reference solution.

Slow (it builds a wheel and a virtualenv; pip must reach the package index)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from .helpers import FAKE_GRADER, INSTRUCTOR_TOKEN, kernel_source
from .test_end_to_end import REPOSITORY_ROOT, _environment, grader_serve

pytestmark = pytest.mark.slow

#: What the base install must not bring: the service's and the grader's dependencies.
NOT_INSTALLED = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pydantic_settings",
                 "prometheus_client", "multipart", "torch", "triton", "numpy")


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of the student's shell: nothing of this checkout or its settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GRADER_") and k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return {**env, **extra}


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _fresh_copy(target: Path) -> Path:
    """The repository as a fresh clone of this working tree has it: the files git tracks
    or would track (no .venv, var/, build/ or caches), so builds never touch the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPOSITORY_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPOSITORY_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_built_wheel_leaves_out_the_reference_solutions(tmp_path: Path) -> None:
    repository = _fresh_copy(tmp_path / "repository")
    # First the worker image's build, which keeps them (its benchmark times the reference)...
    bundled = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path / "worker"), str(repository)], tmp_path,
                   _clean_env(KERNEL_GRADER_BUNDLE_REFERENCE="1"))
    assert bundled.returncode == 0, bundled.stderr
    [worker_wheel] = (tmp_path / "worker").glob("*.whl")
    assert "grader/assignments/softmax_backward/reference.py" in zipfile.ZipFile(
        worker_wheel).namelist()
    # ...then, in the same tree (its build/ folder now holds them), the students' build.
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                  str(repository)], tmp_path, _clean_env())
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("kernel_grader-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if "reference" in n.lower()] == []
    assert "grader/assignments/softmax_backward/checks.py" in names  # the assignment itself stays
    assert {"client/cli.py", "client/http.py", "api/schemas.py", "grader/report/render.py"} <= set(names)
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    base = [line.split(" ", 1)[1] for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert sorted(d.split(">")[0] for d in base) == ["httpx", "pydantic", "rich"]


def test_pip_install_without_extras_runs_submit_status_and_history(tmp_path: Path) -> None:
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python, grader = environment / "bin" / "python", environment / "bin" / "grader"
    student_shell = _clean_env(PATH=f"{environment / 'bin'}{os.pathsep}{os.environ['PATH']}")
    repository = _fresh_copy(tmp_path / "repository")
    installed = _run([str(python), "-m", "pip", "install", "-q", str(repository)],
                     tmp_path, student_shell)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    probe = _run([str(python), "-c", "import importlib.util, json, sys; print(json.dumps("
                  "{m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))",
                  *NOT_INSTALLED, "httpx", "rich", "pydantic"], tmp_path, student_shell)
    found = json.loads(probe.stdout)
    assert [m for m in NOT_INSTALLED if found[m]] == [], found
    assert found["httpx"] and found["rich"] and found["pydantic"]
    site = _run([str(python), "-c", "import grader, pathlib; print(pathlib.Path(grader.__file__).parent)"],
                tmp_path, student_shell).stdout.strip()
    assert not list(Path(site).rglob("*reference*")), "a reference solution was installed"

    # The commands that need an extra say which one.
    serve = _run([str(grader), "serve"], tmp_path, student_shell)
    assert serve.returncode == 3 and "kernel-grader[server]" in serve.stderr, serve.stderr
    check = _run([str(grader), "check", "x.py"], tmp_path, student_shell)
    assert check.returncode == 3 and "kernel-grader[grader]" in check.stderr, check.stderr
    # The starter file needs no torch.
    template = _run([str(grader), "template", "softmax_backward", "--output", "-"], tmp_path, student_shell)
    assert template.returncode == 0 and "def softmax_backward(" in template.stdout, template.stderr

    server_env = _environment(grade_command=json.dumps([sys.executable, str(FAKE_GRADER)]),
                              poll_interval_s="0.2")
    with grader_serve(tmp_path, server_env) as base_url:
        token = httpx.post(f"{base_url}/api/v1/students", json={"name": "student"},
                           headers={"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}).json()["token"]
        kernel = tmp_path / "softmax_backward.py"
        kernel.write_text(kernel_source("speedup=1.7"))
        submitted = _run([str(grader), "submit", str(kernel), "--server", base_url,
                          "--token", token, "--poll-interval", "0.2"], tmp_path, student_shell)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "passed" in submitted.stdout and "autograd_fp32" in submitted.stdout
        assert "benchmark: geomean_speedup_vs_baseline_graph = 1.7" in submitted.stdout

        shell = {**student_shell, "GRADER_SERVER": base_url, "GRADER_TOKEN": token}
        status = _run([str(grader), "status"], tmp_path, shell)
        assert status.returncode == 0 and "passed" in status.stdout, status.stderr
        source = _run([str(grader), "status", "--source"], tmp_path, shell)
        assert source.stdout == kernel.read_text()
        history = _run([str(grader), "history"], tmp_path, shell)
        assert history.returncode == 0 and "1.7x" in history.stdout, history.stderr
