"""The compile-only pass's bounds and per-kernel compile report on the child's side
(grader/harness/check_child.py, compilation.py): each compilation is announced with its kernel and constexprs
and closed with the child's memory, and the pass starts a compilation only under its memory
budget. GPU compilation itself is measured on the H200 (scripts/gpu_styles.py); here Triton's
``compile`` is a stand-in with the same call shape."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton.compiler

from grader.sandbox import progress

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "grader" / "harness"))
import check_child  # noqa: E402
import compilation  # noqa: E402


def test_each_compilation_is_announced_with_its_block_size_and_closed_with_memory(monkeypatch):
    def fake_compile(src, target=None, options=None, _env_vars=None):
        time.sleep(0.3)
        return "kernel"

    monkeypatch.setattr(triton.compiler, "compile", fake_compile)
    read, write = os.pipe()
    lines = progress.ProgressLines(read)
    lines.start()
    compilation.report_each_compilation(check_child.Progress(write))
    fn = SimpleNamespace(arg_names=["x_ptr", "n", "BLOCK_SIZE", "EVEN"])
    src = SimpleNamespace(fn=fn, name="_row_kernel", constants={(2,): 262144, (3,): True})
    os.write(write, b"import\n")
    assert triton.compiler.compile(src, target=None, options={"num_warps": 16, "num_stages": 3}) == "kernel"
    os.close(write)
    lines.join(timeout=5)
    (entry,) = lines.compile_report()
    assert entry["kernel"] == "_row_kernel" and entry["constants"] == {"BLOCK_SIZE": 262144, "EVEN": True}
    assert entry["num_warps"] == 16 and entry["num_stages"] == 3
    assert 0.25 <= entry["seconds"] < 5 and entry["peak_rss_bytes"] >= entry["rss_bytes"] > 0
    assert lines.last == "import", "compile marks never become the last line"


def test_progress_lines_keep_open_compilations_and_ignore_malformed_marks():
    read, write = os.pipe()
    lines = progress.ProgressLines(read)
    lines.start()
    os.write(write, b'import\ncompiling 1 {"kernel": "_k", "constants": {"BLOCK": 65536}, "num_warps": 8}\n'
                    b'compiling 2 not json\ncompiled 7 {"rss_bytes": 5}\n')
    time.sleep(0.3)
    report = lines.compile_report()
    os.close(write)
    lines.join(timeout=5)
    assert len(report) == 1 and report[0]["open"] and report[0]["constants"] == {"BLOCK": 65536}
    assert report[0]["seconds"] >= 0.2


@pytest.mark.parametrize(("budget", "most_at_once"), [(1, 1), (1 << 50, 4)])
def test_the_pass_starts_a_compilation_only_under_its_memory_budget(budget, most_at_once):
    executor = compilation.MemoryGatedExecutor(4, budget)
    running, peak, lock = [0], [0], threading.Lock()

    def compile_one():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1

    futures = [executor.submit(compile_one) for _ in range(4)]
    for future in futures:
        future.result(timeout=10)
    executor.shutdown()
    # Over budget (1 byte: always), one at a time; within it, all four threads at once.
    assert peak[0] == most_at_once


def test_the_memory_gate_counts_the_compilers_subprocesses():
    # ptxas runs as a subprocess of the child: its memory is in no VmRSS of the child itself.
    before_tree, before_self = compilation._tree_resident_bytes(), compilation._memory_bytes()[0]
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(300 << 20); "
                               "b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        grown_tree = compilation._tree_resident_bytes() - before_tree
        grown_self = compilation._memory_bytes()[0] - before_self
    finally:
        holder.kill()
        holder.wait()
    assert grown_tree >= 290 << 20, grown_tree
    assert grown_self < 100 << 20, grown_self
