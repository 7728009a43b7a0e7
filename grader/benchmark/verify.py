"""Re-verification of the outputs of timed calls, in the parent, against the fp64 oracle.

Inputs are regenerated from the plan's seeds with the assignment's own ``make_inputs``
(bench.py) on the same GPU (bit-identical values), the oracle is computed here, and each kept
output (the selected elements of the last timed call on every buffer set, and one whole
output set when kept) must be within its tolerance (the checks' own rule, slack included).
A timing whose outputs were wrong or stale is never ranked (grader/benchmark/score.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from grader.assignments.protocol import Assignment
from grader.checks.tolerance import compare
from grader.harness.bench_child import stage_seed
from grader.harness.protocol import TimedOutput, TimedVerification


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
        ChildFileRejected: the file is a link, a FIFO, a device, ... (grader/evidence/child_files.py).
    """
    from grader.evidence.child_files import ChildFolder

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
    error over tolerance and up to four problems. Every output is compared on the elements the
    peers child kept (the assignment's selection at the indices it recorded, or whole) under
    the output's own tolerance, slack included (``Tolerance.allowed``)."""
    import torch

    bench = load_bench_module(assignment.benchmark.bench_file)
    by_id = {row["id"]: row for row in rows}
    for entry in document.get("rows", []):
        row = by_id.get(entry.get("id"))
        if row is None or not entry.get("impls"):
            continue
        tensors = load_outputs(workdir, entry)
        shape, dtype = tuple(row["shape"]), getattr(torch, row["dtype"])
        tolerances = [assignment.tolerance(dtype, out.name) for out in assignment.outputs]
        names = [out.name for out in assignment.outputs]
        cache: dict = {}

        def oracle(stage: int, k: int, index_key: tuple | None):
            key = (stage, k, index_key)
            if key not in cache:
                inputs = bench.make_inputs(shape, dtype, stage_seed(row["seed"], stage, k), device)
                index = None if index_key is None else {
                    name: torch.tensor(values, dtype=torch.long, device=device) for name, values in index_key}
                cache[key] = assignment.benchmark.oracle(inputs, index)
            return cache[key]

        def compare_outputs(prefix: str, expected_by_name) -> tuple[list[str], int, float]:
            problems, checked, worst = [], 0, 0.0
            for position, (name, tolerance) in enumerate(zip(names, tolerances)):
                got = tensors.get(f"{prefix}|{position}")
                expected, scale, slack = expected_by_name[name]
                if got is None:
                    problems.append(f"output {name} missing")
                    continue
                if tuple(got.shape) != tuple(expected.shape):
                    problems.append(f"output {name}: shape {tuple(got.shape)}")
                    continue
                cmp = compare(got.to(expected.device), expected, scale.expand_as(expected), tolerance,
                              None if slack is None else slack.expand_as(expected))
                checked += cmp.total
                worst = max(worst, cmp.max_ratio)
                if not cmp.passed:
                    problems.append(f"output {name}: {cmp.describe()}")
            return problems, checked, worst

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
                index_key = tuple(sorted((dim, tuple(int(i) for i in values))
                                         for dim, values in (info.get("index") or {}).items()))
                if {dim for dim, _ in index_key} != set(assignment.benchmark.selection.draws):
                    verified[method] = {"passed": False, "message": "the indices of the kept elements are missing"}
                    continue
                for k in range(sets):
                    found, count, ratio = compare_outputs(f"{name}|{method}|set{k}", oracle(stage, k, index_key))
                    problems += [f"set {k}: {p}" for p in found]
                    checked += count
                    worst = max(worst, ratio)
                full_set = info.get("full_set")
                if full_set is not None:
                    found, count, ratio = compare_outputs(f"{name}|{method}|full", oracle(stage, int(full_set), None))
                    problems += [f"whole output of set {full_set}: {p}" for p in found]
                    checked += count
                    worst = max(worst, ratio)
                verified[method] = {"passed": not problems, "elements_checked": checked,
                                    "worst_error_over_tolerance": worst, "problems": problems[:4]}
            result["verified"] = verified
        cache.clear()
        if device == "cuda":
            torch.cuda.empty_cache()


def timed_verification(assignment: Assignment, dtype: str) -> TimedVerification:
    """How the replay timer verifies a timed call of ``dtype``: the assignment's selection
    (which elements of each output and input) with each output's own tolerance from its table,
    the same ``Tolerance`` its checks apply (slack included)."""
    import torch

    selection = assignment.benchmark.selection
    outputs = [TimedOutput(name=out.name, axes=list(selection.outputs[out.name]),
                           tolerance=assignment.tolerance(getattr(torch, dtype), out.name))
               for out in assignment.outputs]
    return TimedVerification(draws=dict(selection.draws), outputs=outputs,
                             input_axes=[None if axes is None else list(axes) for axes in selection.inputs])
