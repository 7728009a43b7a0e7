"""Re-verification of the outputs of timed calls, in the parent, against the fp64 oracle.

Inputs are regenerated from the plan's seeds with the assignment's own ``make_inputs``
(bench.py) on the same GPU (bit-identical values), the oracle is computed here, and each kept
output (sampled rows of the last timed call on every buffer set, and one whole output when
kept) must be within the assignment's tolerance. A timing whose outputs were wrong or stale is
never ranked (grader/benchmark/score.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from grader.assignments.protocol import Assignment
from grader.checks import compare
from grader.harness.bench_child import stage_seed


def load_bench_module(path: Path) -> ModuleType:
    """Import an assignment's bench.py from its file (the same file the children import)."""
    name = f"grader_bench_{path.parent.name}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_outputs(workdir: Path, entry: dict) -> dict:
    """The output tensors a child saved for one row (empty when missing or corrupt).

    Raises:
        ChildFileRejected: the file is a link, a FIFO, a device, ... (grader/child_files.py).
    """
    from grader.child_files import ChildFolder

    name = entry.get("outputs_file")
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        return {}
    try:
        return ChildFolder(workdir).load_tensors(name) or {}
    except ValueError:  # a corrupt file reads as "no outputs"
        return {}


def verify_rows(assignment: Assignment, document: dict, workdir: Path, rows: list[dict], sets: int,
                device: str = "cuda") -> None:
    """Add ``verified`` to every timed implementation of ``document`` (in place): per method,
    whether every kept output matched the oracle, how many elements were checked, the worst
    error over tolerance and up to four problems."""
    import torch

    bench = load_bench_module(assignment.benchmark.bench_file)
    by_id = {row["id"]: row for row in rows}
    for entry in document.get("rows", []):
        row = by_id.get(entry.get("id"))
        if row is None or not entry.get("impls"):
            continue
        tensors = load_outputs(workdir, entry)
        shape, dtype = tuple(row["shape"]), getattr(torch, row["dtype"])
        tolerance = assignment.tolerance(dtype)
        cache: dict = {}

        def oracle(stage: int, k: int, rows_kept: tuple[int, ...] | None):
            key = (stage, k, rows_kept)
            if key not in cache:
                inputs = bench.make_inputs(shape, dtype, stage_seed(row["seed"], stage, k), device)
                cache[key] = assignment.benchmark.oracle_rows(inputs, rows_kept)
            return cache[key]

        for name, result in entry["impls"].items():
            saved = result.get("saved") or {}
            verified: dict = {}
            for method, stage in (("event", 1), ("graph", 2)):
                info = saved.get(method)
                if not isinstance(result.get(method), dict) or "median_s" not in result[method]:
                    continue
                if not isinstance(info, dict):
                    verified[method] = {"passed": False, "message": "no outputs of timed calls were kept"}
                    continue
                problems, checked, worst = [], 0, 0.0
                rows_kept = tuple(int(r) for r in info.get("sample_rows", []))
                for k in range(sets):
                    got = tensors.get(f"{name}|{method}|set{k}")
                    if got is None:
                        problems.append(f"set {k}: output missing")
                        continue
                    expected, scale = oracle(stage, k, rows_kept)
                    if tuple(got.shape) != tuple(expected.shape):
                        problems.append(f"set {k}: shape {tuple(got.shape)}")
                        continue
                    cmp = compare(got.to(expected.device), expected, scale, tolerance)
                    checked += cmp.total
                    worst = max(worst, cmp.max_ratio)
                    if not cmp.passed:
                        problems.append(f"set {k}: {cmp.describe()}")
                full_set = info.get("full_set")
                if full_set is not None:
                    got = tensors.get(f"{name}|{method}|full")
                    if got is None:
                        problems.append("whole output missing")
                    else:
                        expected, scale = oracle(stage, int(full_set), None)
                        cmp = compare(got.to(expected.device), expected, scale, tolerance)
                        checked += cmp.total
                        worst = max(worst, cmp.max_ratio)
                        if not cmp.passed:
                            problems.append(f"whole output of set {full_set}: {cmp.describe()}")
                        del expected, scale
                verified[method] = {"passed": not problems, "elements_checked": checked,
                                    "worst_error_over_tolerance": worst, "problems": problems[:4]}
            result["verified"] = verified
        cache.clear()
        if device == "cuda":
            torch.cuda.empty_cache()
