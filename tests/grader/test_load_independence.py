"""A verdict on the CPU does not depend on the machine's load (issue 22): the time limit counts
the child's CPU seconds (grader/sandbox/child_limits.py CpuClock), not wall seconds.

A correct corpus file is graded alone, then twice at once with both gradings (parents and
children) on one core of this 2-core machine, under a limit below the wall time the shared
core gives them but above the CPU time they need: they get the verdict it got alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grading_support import CORPUS, requires_bwrap

FILE = CORPUS / "correct" / "simple_rowloop.py"


def _grade(out: Path, core: set[int], timeout_s: float) -> subprocess.Popen:
    command = [sys.executable, "-m", "grader", "check", str(FILE), "--device", "cpu", "--json", str(out),
               "--timeout", f"{timeout_s:g}", "--quiet"]
    env = {**os.environ, "GRADER_SANDBOX": "bwrap", "GRADER_PRESTART_CHECK_CHILD": "0"}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.sched_setaffinity(0, core))  # noqa: PLW1509


def _document(process: subprocess.Popen, out: Path) -> dict:
    _, stderr = process.communicate(timeout=900)
    assert out.exists(), stderr.decode()[-2000:]
    return json.loads(out.read_text())


@requires_bwrap
def test_two_gradings_on_one_core_get_the_verdict_of_one_alone(tmp_path):
    core = {sorted(os.sched_getaffinity(0))[0]}
    alone = _document(_grade(tmp_path / "alone.json", core, 900), tmp_path / "alone.json")
    assert alone["verdict"] == "passed", alone["error"]
    cpu = alone["timings_s"]["child_cpu"]
    assert 0 < cpu <= alone["timings_s"]["child"] * 1.5, alone["timings_s"]
    # Room for the CPU time to vary between runs, below the ~2x wall time of a shared core.
    limit = round(1.5 * cpu + 1.0, 1)
    outs = [tmp_path / f"pair{i}.json" for i in range(2)]
    pair = [_document(p, out) for p, out in zip([_grade(out, core, limit) for out in outs], outs)]
    for document in pair:
        assert document["verdict"] == alone["verdict"], (document["error"], document["timings_s"])
        assert document["limits"]["clock"] == "cpu" and document["limits"]["cpu_s"] == limit
        assert document["timings_s"]["child_cpu"] < limit
    # The shared core made at least one child run longer than its limit in wall time: a
    # wall-clock limit would have stopped it.
    assert max(d["timings_s"]["child"] for d in pair) > limit, [d["timings_s"] for d in pair]
