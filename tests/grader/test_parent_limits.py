"""grader/sandbox/parent_limits.py: the grader's own limits, and the longest a hostile file holds a
worker, as docs/security.md states it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from grader.benchmark.options import BenchmarkOptions
from grader.sandbox.parent_limits import hostile_hold_bound_s
from grader.settings import GraderSettings

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_documented_worst_case_is_the_limits_worst_case():
    settings = GraderSettings()
    cpu = hostile_hold_bound_s(settings, device="cpu")
    gpu = hostile_hold_bound_s(settings, device="cuda", benchmark_timeout_s=BenchmarkOptions().student_timeout_s)
    assert (cpu, gpu) == (540.0, 1750.0)
    text = " ".join(SECURITY_DOC.read_text().split())
    match = re.search(r"holds a worker for at most ([\d,]+) s on the CPU interpreter and ([\d,]+) s on a GPU", text)
    assert match, "docs/security.md must state the worst case"
    assert [float(n.replace(",", "")) for n in match.groups()] == [cpu, gpu]
    # The grader's own wall clock ends it before the worker's outer limit does.
    assert settings.parent_timeout_s < 1800


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", **{f"GRADER_{k.upper()}": v for k, v in env.items()}})


def test_open_files_and_memory_are_limited():
    result = _run("import resource\n"
                  "from grader.sandbox.parent_limits import apply_parent_limits\n"
                  "from grader.settings import GraderSettings\n"
                  "apply_parent_limits(GraderSettings(), device='cpu')\n"
                  "print(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_DATA))\n"
                  "try:\n    bytearray(3 << 30)\nexcept MemoryError:\n    print('MemoryError')\n",
                  parent_max_open_files="256", parent_memory_bytes=str(2 << 30))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"(256, 256) ({2 << 30}, {2 << 30})", "MemoryError"]


def test_the_wall_clock_ends_the_grader():
    started = time.monotonic()
    result = _run("import time\n"
                  "from grader.sandbox.parent_limits import apply_parent_limits\n"
                  "from grader.settings import GraderSettings\n"
                  "apply_parent_limits(GraderSettings(), device='cuda')\n"
                  "time.sleep(30)\n", parent_timeout_s="1")
    assert result.returncode == -14, (result.returncode, result.stderr)  # SIGALRM
    assert time.monotonic() - started < 15
