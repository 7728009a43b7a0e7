"""A call with two outputs of different shapes, graded for real: the scaffold's assignment turned
into out = x * y (M, N) and colsum = sum over rows of x * y (N,), a reduction across rows as
layernorm's dw is. Its reference returns the tuple (out, colsum); the sandboxed child reports
both outputs, the parent compares each with its own tolerance, the output contract checks both,
and under the CPU interpreter the recorded launches are replayed for both (triton_kernel). A
file that gets the second output wrong fails the value checks by that output's name.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from grading_support import requires_bwrap

from grader import manifest as manifest_module
from grader.manifest import AssignmentManifest
from grader.scaffold import scaffold

pytestmark = requires_bwrap
NAME = "two_output_product"

SPEC_PATCH = '''
COLSUM_TOLERANCES = {
    "float32": Tolerance(rtol=1e-5, atol=1e-30, why="an fp32 sum over the rows, any order"),
    "float16": Tolerance(rtol=1e-5, vtol=2.0**-10, atol=2.0**-24, why="fp32 sum, one fp16 rounding"),
    "bfloat16": Tolerance(rtol=1e-5, vtol=2.0**-6, atol=1e-30, why="fp32 sum, one bf16 rounding"),
}
OUTPUTS = (TensorOutput("out", ("M", "N"), TOLERANCES), TensorOutput("colsum", ("N",), COLSUM_TOLERANCES))
'''

ORACLE_PATCH = '''

def oracle(values):
    from grader.assignments.protocol import OutputOracle

    out, scale = product_fp64(values["x"], values["y"])
    return {"out": OutputOracle(out, scale), "colsum": OutputOracle(out.sum(0), scale.sum(0))}


def benchmark_oracle(inputs, index):
    x, y = inputs
    whole, whole_scale = product_fp64(x, y)
    rows = whole if index is None else whole.index_select(0, index["M"])
    scale = whole_scale if index is None else whole_scale.index_select(0, index["M"])
    return {"out": (rows, scale, None), "colsum": (whole.sum(0), whole_scale.sum(0), None)}
'''

REFERENCE = '''
import torch
import triton
import triton.language as tl

BLOCK = 128


@triton.jit
def _kernel(x_ptr, y_ptr, out_ptr, colsum_ptr, M, N, sxm, sxn, sym, syn, BLOCK: tl.constexpr, WRONG: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for m in range(0, M):
        x = tl.load(x_ptr + m * sxm + cols * sxn, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + m * sym + cols * syn, mask=mask).to(tl.float32)
        tl.store(out_ptr + m * N + cols, (x * y).to(out_ptr.dtype.element_ty), mask=mask)
        if WRONG:
            acc += x
        else:
            acc += x * y
    tl.store(colsum_ptr + cols, acc.to(colsum_ptr.dtype.element_ty), mask=mask)


def NAME(x, y):
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("x and y must be tensors")
    if x.dim() != 2 or x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError("x and y must be 2-D tensors of one shape, dtype and device")
    if x.requires_grad or y.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    colsum = torch.empty((n,), dtype=x.dtype, device=x.device)
    _kernel[(triton.cdiv(n, BLOCK),)](x, y, out, colsum, m, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                      BLOCK=BLOCK, WRONG=WRONG_FLAG)
    return out, colsum
'''


@pytest.fixture(scope="module")
def assignment(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkout")
    scaffold(NAME, root)
    package = root / "grader" / "assignments" / NAME
    spec_file = package / "spec.py"
    text = spec_file.read_text()
    assert 'OUTPUTS = (TensorOutput("out", AXES, TOLERANCES),)\n' in text  # the scaffold's line, patched below
    spec_file.write_text(text.replace('OUTPUTS = (TensorOutput("out", AXES, TOLERANCES),)\n', SPEC_PATCH))
    oracle_file = package / "oracle.py"
    text = oracle_file.read_text()
    oracle_file.write_text(text[:text.index("def oracle(values):")] + ORACLE_PATCH.lstrip("\n"))
    init_file = package / "__init__.py"
    text = init_file.read_text()
    assert 'outputs={"out": _SELECTED}' in text
    init_file.write_text(text.replace('outputs={"out": _SELECTED}', 'outputs={"out": _SELECTED, "colsum": (None,)}'))
    for name, flag in (("reference.py", "False"), ("wrong_colsum.py", "True")):
        (package / name).write_text(REFERENCE.replace("NAME", NAME).replace("WRONG_FLAG", flag))
    entry = AssignmentManifest(name=NAME, title="two outputs", function=NAME, arguments=("x", "y"),
                               module_file=f"{NAME}.py", package=f"grader.assignments.{NAME}")
    manifest_module.MANIFESTS[NAME] = entry
    spec = importlib.util.spec_from_file_location(entry.package, init_file, submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[entry.package] = module
    spec.loader.exec_module(module)
    yield module.ASSIGNMENT
    del manifest_module.MANIFESTS[NAME]
    for key in [k for k in sys.modules if k.startswith(entry.package)]:
        del sys.modules[key]


def test_a_two_output_reference_passes_every_generic_check(assignment):
    from grader.runner import grade_source

    plan = assignment.build_plan(seed=0, device="cpu")
    assert plan.outputs == 2 and [o.name for o in plan.checks[0].calls[0].outputs] == ["out", "colsum"]
    document = grade_source(assignment.reference_file.read_bytes(), assignment=NAME, device="cpu")
    failed = {c.name: c.message for c in document.checks if not c.passed}
    assert document.verdict.value == "passed", (failed, document.error)
    kernel = next(c for c in document.checks if c.name == "triton_kernel")
    assert kernel.details["calls"] > 5 and kernel.details["failed"] == 0


def test_a_wrong_second_output_is_named(assignment):
    from grader.runner import grade_source

    source = (assignment.reference_file.parent / "wrong_colsum.py").read_bytes()
    document = grade_source(source, assignment=NAME, device="cpu")
    failed = {c.name: c.message for c in document.checks if not c.passed and not c.skipped}
    assert document.verdict.value == "failed"
    assert "output colsum" in failed["values"], failed["values"]
    assert "output_contract" not in failed  # shapes, dtypes, contiguity of both outputs are right
