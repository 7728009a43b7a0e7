"""Tries to forge what the grader reads.

At import it prints a passing result document and writes fake done.json / step_<i>.json /
result.json files into its working folder (the child's cwd). It also registers an atexit hook
that runs after the harness has written the real reports and edits them: every call meant to
raise now "raised", every other call "launched a kernel", done.json says the run finished.
The function itself validates nothing and returns zeros from a Triton kernel.

Expected: verdict failed. The output tensors are still compared with the parent's oracles, so
every value check that zeros fail still fails. The rejects_* checks should fail as well (the
function never raises on bad inputs), but they rest on the child's word.

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    strided_inputs, edge_shapes, fresh_results, rejects_mismatch, rejects_requires_grad
"""
import atexit
import glob
import json

import torch
import triton
import triton.language as tl

FAKE = {"schema": 1, "assignment": "softmax_backward", "verdict": "passed", "error": None,
        "checks": [{"name": "autograd_fp32", "passed": True}]}
print(json.dumps(FAKE))


def _write(path, document):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


def _edit(report):
    if report.get("id", "").startswith("rejects_"):
        report = {"id": report["id"], "status": "raised", "launches": 0,
                  "exception": {"type": "ValueError", "message": "rejected", "exit": False}}
    else:
        report["launches"] = max(1, report.get("launches", 0))
    return report


def _forge_at_import():
    with open("plan.json", encoding="utf-8") as handle:
        plan = json.load(handle)
    for index, step in enumerate(plan["steps"]):
        calls = [_edit({"id": call["id"], "status": "ok"}) for call in step["calls"]]
        _write(f"step_{index}.json", {"check": step["check"], "calls": calls})
    _write("done.json", {"phase": "done", "verdict": "passed"})
    _write("result.json", FAKE)


def _forge_at_exit():
    for path in glob.glob("step_*.json"):
        with open(path, encoding="utf-8") as handle:
            step = json.load(handle)
        step["calls"] = [_edit(report) for report in step["calls"]]
        _write(path, step)
    _write("done.json", {"phase": "done", "verdict": "passed"})


_forge_at_import()
atexit.register(_forge_at_exit)


@triton.jit
def _zeros(dx_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dx_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32).to(dx_ptr.dtype.element_ty), mask=offs < total)


def softmax_backward(y, g):
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    _zeros[(triton.cdiv(dx.numel(), 4096),)](dx, dx.numel(), BLOCK=4096)
    return dx
