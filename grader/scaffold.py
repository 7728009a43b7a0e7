"""``grader new-assignment NAME``: the files of a new assignment, to be filled with its maths.

Writes ``grader/assignments/NAME/`` (spec, inputs, oracle, bench, ``__init__``, a reference
and a failing starter template), ``tests/corpus/NAME/{correct,wrong}/`` and prints the manifest
entry to add to grader/manifest.py. The files are a complete, gradable example (an elementwise
product ``out = x * y``, with every generic check declared) so that each step of
docs/authoring.md replaces a working part; nothing outside the new folders is written.
``--dims B,H,S,D`` shapes the example on those axes (any rank from 1 to 4; default ``M,N``):
the declarations, the benchmark rows, the timed selection and the reference kernel follow.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

_NAME = re.compile(r"^[a-z][a-z0-9_]{1,40}$")

SPEC = '''"""``{name}``: the numbers of the assignment's public contract (docs/checks.md says them in words).

Replace the example maths (out = x * y) with the assignment's: its inputs and outputs, their
tolerance tables (each number with where it comes from), the checks' cases and the hints.
"""

from __future__ import annotations

from grader.assignments.protocol import (
    CaseSpec,
    FreshResults,
    OutputContract,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorInput,
    TensorOutput,
    TritonKernel,
    ValueCheck,
)
from grader.checks.tolerance import Tolerance

# Error bound per element: |got - expected| <= atol + rtol * scale + vtol * |expected|, with
# scale = |x * y|. The product is one rounding in fp32 (rtol 2^-23 x scale: half an ulp, twice),
# then one rounding of the result to the output dtype (vtol: one ulp of the dtype; bf16 two,
# as Triton's CPU interpreter truncates).
TOLERANCES = {{
    "float32": Tolerance(rtol=2.0**-23, atol=1e-38, summary="one fp32 rounding",
                         why="the product rounded once in fp32 (half an ulp, 2^-24), with 2x room"),
    "float16": Tolerance(rtol=2.0**-23, vtol=2.0**-10, atol=2.0**-24, summary="fp32 product, one fp16 rounding",
                         why="the fp32 product, then one rounding to fp16 (half an ulp, 2^-11); allow one ulp"),
    "bfloat16": Tolerance(rtol=2.0**-23, vtol=2.0**-6, atol=1e-38, summary="fp32 product, one bf16 rounding",
                          why="the fp32 product, then one rounding to bf16; the CPU interpreter truncates: two ulps"),
}}

#: The axes of x, y and out by symbolic size (any rank: ("B", "H", "S", "D") for attention's
#: tensors). A layout (grader.checks.plan.LAYOUTS, or a grader.checks.plan.Layout such as
#: Layout.permuted(0, 2, 1, 3)) applies to any rank; ``strided`` lists those a caller passes.
AXES = {axes!r}
_STRIDED = ("transposed", "step") if len(AXES) >= 2 else ("step",)
INPUTS = (TensorInput("x", AXES, strided=_STRIDED), TensorInput("y", AXES, strided=_STRIDED))
OUTPUTS = (TensorOutput("out", AXES, TOLERANCES),)

BENCHMARK_SHAPES = {shapes!r}
BENCHMARK_DTYPES = ("float32", "float16", "bfloat16")


def _dims(last: int, first: int = 2) -> dict[str, int]:
    """Sizes of one case: ``first`` along the first axis, ``last`` along the last, 2 between."""
    sizes = [last] if len(AXES) == 1 else [first] + [2] * (len(AXES) - 2) + [last]
    return dict(zip(AXES, sizes))


def checks(device: str) -> tuple:
    """The generic checks of this assignment, in the order they run and are shown."""
    rows = 4 if device == "cpu" else 64
    return (
        ValueCheck("values", (CaseSpec(dims=_dims(300, rows)), CaseSpec(dims=_dims(1025, 3)))),
        ValueCheck("half_precision", tuple(CaseSpec(dims=_dims(1000, rows), dtype=d) for d in ("float16", "bfloat16"))),
        ValueCheck("strided_inputs", (CaseSpec(dims=_dims(300, rows), layouts={{"x": _STRIDED[0], "y": "step"}}),)),
        OutputContract("output_contract", (CaseSpec(dims=_dims(300, 5)), CaseSpec(dims=_dims(300, 3), dtype="float16"))),
        RejectsMismatch("rejects_mismatch", _dims(8, 4)),
        RejectsRequiresGrad("rejects_requires_grad", _dims(16, 3)),
        ValueCheck("edge_shapes", (CaseSpec(dims=_dims(1, 1)), CaseSpec(dims=_dims(1, 7)), CaseSpec(dims=_dims(4097, 2)))),
        FreshResults("fresh_results", CaseSpec(dims=_dims(1000, 4))),
        TritonKernel(),
    )


CHECK_NAMES = tuple(decl.name for decl in checks("cpu"))
HINTS = {{
    "values": "out = x * y elementwise",
    "half_precision": "multiply in fp32 and store the result in the input dtype",
    "strided_inputs": "load x and y with their own strides (x.stride(0), x.stride(1), ... one per axis)",
    "output_contract": "return a fresh contiguous tensor of x's shape, dtype and device; never write into x or y",
    "rejects_mismatch": "raise (ValueError/TypeError) when shapes, dtypes or devices of x and y differ",
    "rejects_requires_grad": "raise if x or y requires grad",
    "edge_shapes": "mask the last block: N=1, M=1 and N not a multiple of the block",
    "fresh_results": "compute from the values in memory on every call; do not cache by pointer",
    "triton_kernel": "the work must be done by @triton.jit kernels: their launches are replayed alone on new inputs",
}}
HINT_REQUIRES = {{"half_precision": ("values",), "strided_inputs": ("values",), "edge_shapes": ("values",)}}
CRASH_HINT = " A crash inside a call is usually the kernel reading or writing outside its tensors (a missing mask)."
'''

INPUTS_PY = '''"""Seeded inputs of ``{name}``'s checks: every value from the plan's one torch.Generator."""

from __future__ import annotations

import torch

from grader.assignments.protocol import Case


def make_case(generator: torch.Generator, dims, exact: bool) -> Case:
    """x, y ~ N(0, 1) in fp64, of the sizes of spec.AXES; ``exact``: values with 8 significant
    bits, whose products are exact in fp32 (so half precision is judged against the final
    rounding alone)."""
    from .spec import AXES

    shape = tuple(dims[axis] for axis in AXES)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    y = torch.randn(shape, generator=generator, dtype=torch.float64)
    if exact:
        x, y = (torch.round(v * 64) / 64 for v in (x, y))
    return Case(values={{"x": x, "y": y}})
'''

ORACLE_PY = '''"""fp64 oracles of ``{name}``. Imports only torch: the replay timer loads this file on its own
(as ``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``."""

from __future__ import annotations

import torch


def product_fp64(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, scale): out = x * y and scale = |x * y| in float64, for x, y of one shape, any float dtype."""
    out = x.double() * y.double()
    return out, out.abs()


def oracle(values):
    """{{"out": OutputOracle}} of the inputs as placed (grader.assignments.protocol.Oracle)."""
    from grader.assignments.protocol import OutputOracle

    out, scale = product_fp64(values["x"], values["y"])
    return {{"out": OutputOracle(out, scale)}}


#: The first axis's name: the timed verification draws indices along it (TimedSelection).
FIRST_AXIS = {first!r}


def benchmark_oracle(inputs: tuple, index):
    """{{"out": (expected, scale, slack)}} at indices ``index[FIRST_AXIS]`` of the first axis (None:
    every element) of bench inputs."""
    x, y = inputs
    if index is not None:
        x, y = x.index_select(0, index[FIRST_AXIS]), y.index_select(0, index[FIRST_AXIS])
    out, scale = product_fp64(x, y)
    return {{"out": (out, scale, None)}}
'''

BENCH_PY = '''"""``{name}``'s benchmark inputs and peers (torch only; bound into the timing children).

Names the timing harness reads: ARGUMENTS, make_inputs, refill_inputs, expected_output, PEERS,
COMPILED_PEER, STREAMING_PROBE (docs/authoring.md, step 6, describes each).
"""

from __future__ import annotations

import torch

ARGUMENTS = ("x", "y")


def make_inputs(shape, dtype, seed, device="cuda"):
    """(x, y), each ``shape`` contiguous ``dtype`` on ``device``, N(0, 1) from one seeded generator."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype) for _ in range(2))


def refill_inputs(inputs, generator):
    """New values in place, drawn as ``make_inputs`` draws them."""
    for tensor in inputs:
        tensor.normal_(0.0, 1.0, generator=generator)


def expected_output(inputs):
    return tuple(inputs[0].shape), inputs[0].dtype


def torch_expression(x, y):
    """The baseline: PyTorch's elementwise product."""
    return x * y


PEERS = {{"torch_expression": torch_expression}}
COMPILED_PEER = ("torch_compile_expression", torch_expression)
STREAMING_PROBE = ("torch.add(x, y): 2 reads + 1 write per element", lambda x, y: torch.add(x, y))
'''

INIT_PY = '''"""Assignment ``{name}``. The files of this folder are described in docs/authoring.md;
``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, TimedSelection
from grader.checks.generic import build_plan
from grader.manifest import get_manifest

from . import spec
from .inputs import make_case
from .oracle import benchmark_oracle, oracle

HERE = Path(__file__).resolve().parent
_ELEMENT_BYTES = {{"float32": 4, "float16": 2, "bfloat16": 2}}


def floor_bytes(shape, dtype):
    """x and y read, out written: 3 accesses per element (a second pass is never needed)."""
    moved = 3 * math.prod(shape) * _ELEMENT_BYTES[dtype]
    return {{"min": moved, "two_pass": moved}}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=oracle, checks=spec.checks,
                    hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES)
_SELECTED = (spec.AXES[0],) + (None,) * (len(spec.AXES) - 1)


class Assignment:
    """``{function}(x, y) -> out`` (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("{name}")
    inputs = spec.INPUTS
    outputs = spec.OUTPUTS
    check_names = spec.CHECK_NAMES
    gpu_only_checks: tuple[str, ...] = ()
    reference_file = HERE / "reference.py"
    template_file = HERE / "template.py"
    crash_hint = spec.CRASH_HINT
    benchmark = BenchmarkSpec(
        shapes=spec.BENCHMARK_SHAPES,
        dtypes=spec.BENCHMARK_DTYPES,
        baseline="torch_expression",
        peers=("torch_expression", "reference", "torch_compile_expression"),
        scopes={{
            "student": "one call of the submission's {function}(x, y): its wrapper and every kernel it launches",
            "torch_expression": "the baseline: x * y, one PyTorch elementwise kernel",
            "reference": "the course reference kernel with its wrapper",
            "torch_compile_expression": "torch.compile(baseline, dynamic=False, fullgraph=True), compiled per row",
        }},
        floor=Floor("bandwidth", bytes=floor_bytes),
        # Indices of the first axis are drawn; each selects the same elements of out, x and y.
        selection=TimedSelection(draws={{spec.AXES[0]: 2}}, outputs={{"out": _SELECTED}}, inputs=(_SELECTED, _SELECTED)),
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
        oracle=benchmark_oracle,
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None):
        table = next(out.tolerances for out in self.outputs if output in (None, out.name))
        return table[str(dtype).replace("torch.", "")]


ASSIGNMENT = Assignment()
'''

REFERENCE_PY = '''"""The course reference of ``{name}`` (never visible to a submission): out = x * y.

One program per BLOCK elements of out (contiguous): each element's index is split into up to
four coordinates, and x and y are loaded through their own strides, so any rank up to 4 and any
layout (transposed, permuted, stepped) works."""
import torch
import triton
import triton.language as tl

BLOCK = 1024
MAX_RANK = 4


@triton.jit
def _product_kernel(x_ptr, y_ptr, out_ptr, total, n1, n2, n3, sx0, sx1, sx2, sx3, sy0, sy1, sy2, sy3,
                    BLOCK: tl.constexpr):
    index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = index < total
    i3 = index % n3
    rest = index // n3
    i2 = rest % n2
    rest = rest // n2
    i1 = rest % n1
    i0 = rest // n1
    x = tl.load(x_ptr + i0 * sx0 + i1 * sx1 + i2 * sx2 + i3 * sx3, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + i0 * sy0 + i1 * sy1 + i2 * sy2 + i3 * sy3, mask=mask).to(tl.float32)
    tl.store(out_ptr + index, (x * y).to(out_ptr.dtype.element_ty), mask=mask)


def {function}(x, y):
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("x and y must be tensors")
    if x.dim() != {rank} or x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError("x and y must be {rank}-D tensors of one shape, dtype and device")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {{x.dtype}}")
    if x.requires_grad or y.requires_grad:
        raise ValueError("inputs must not require grad")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    total = out.numel()
    if total:
        pad = MAX_RANK - x.dim()
        sizes = (1,) * pad + tuple(x.shape)
        _product_kernel[(triton.cdiv(total, BLOCK),)](x, y, out, total, *sizes[1:], *((0,) * pad + x.stride()),
                                                      *((0,) * pad + y.stride()), BLOCK=BLOCK)
    return out
'''

TEMPLATE_PY = '''"""Starter file of ``{name}``: write ``{function}(x, y)`` with a @triton.jit kernel."""
import torch  # noqa: F401
import triton  # noqa: F401
import triton.language as tl  # noqa: F401


def {function}(x, y):
    raise NotImplementedError("write the kernel")
'''

TEST_PY = '''"""``{name}``'s own maths, on the CPU: its oracle against an independent fp64 computation. The
generic contract of every assignment (plan, tolerances, timed verification, corpus layout) is in
tests/grader/test_assignments.py, parametrised over the manifest."""

import torch

from grader.assignments.{name}.inputs import make_case
from grader.assignments.{name}.oracle import benchmark_oracle, oracle
from grader.assignments.{name}.spec import AXES


def test_oracle_is_the_fp64_formula():
    dims = {{axis: 3 + i for i, axis in enumerate(AXES)}}
    case = make_case(torch.Generator().manual_seed(0), dims, False)
    found = oracle(case.values)["out"]
    assert torch.equal(found.expected, case.values["x"] * case.values["y"])
    rows = torch.tensor([2])
    expected, _, _ = benchmark_oracle((case.values["x"], case.values["y"]), {{AXES[0]: rows}})["out"]
    assert torch.equal(expected, found.expected[2:])
'''


def manifest_entry(name: str, function: str) -> str:
    """The ``MANIFESTS`` entry to add to grader/manifest.py."""
    return (f'    "{name}": AssignmentManifest(\n        name="{name}",\n        title="{name}: (one line for people)",\n'
            f'        function="{function}",\n        arguments=("x", "y"),\n        module_file="{name}.py",\n'
            f'        package="grader.assignments.{name}",\n    ),')


def benchmark_shapes(rank: int) -> tuple[tuple[int, ...], ...]:
    """Two benchmark rows of 2^24 and 2^22 elements for a rank: (4096, 4096) and (16384, 256)
    in 2-D, leading axes of 4 before them in N-D, one axis in 1-D."""
    if rank == 1:
        return ((1 << 24,), (1 << 22,))
    lead = (4,) * (rank - 2)
    return (lead + (4096 // 4 ** (rank - 2), 4096), lead + (16384 // 4 ** (rank - 2), 256))


#: The default points per check of the scaffold's checks (submissions/check_points.py reads
#: them without torch): one line per check of spec.py's ``checks``, in its order, summing to 100.
POINTS_TOML = """# Default points per correctness check of {name} (docs/course.md, "Points"): weights the
# service scales to the assignment's correctness points. One line per check of spec.py, in
# its order; rename or add lines when you change the checks (tests/grader/test_check_points.py).

[checks]
values = 25
half_precision = 15
strided_inputs = 12
output_contract = 8
rejects_mismatch = 4
rejects_requires_grad = 4
edge_shapes = 10
fresh_results = 6
triton_kernel = 16
"""


def scaffold(name: str, root: Path, *, function: str | None = None, dims: tuple[str, ...] = ("M", "N")
             ) -> list[Path]:
    """Write the new assignment's files under ``root`` (a checkout); returns the paths written.
    ``dims``: the axes of the example's tensors (1 to 4 distinct identifiers; ("B", "H", "S",
    "D") for an attention-shaped assignment).

    Raises:
        ValueError: ``name`` is not a lower-case identifier of 2-41 characters, or a keyword;
            ``dims`` is not 1 to 4 distinct identifiers.
        FileExistsError: the assignment's folder or corpus already exists (nothing is written).
    """
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ValueError(f"{name!r} is not a lower-case identifier (a-z, 0-9, _; 2-41 characters)")
    if not 1 <= len(dims) <= 4 or len(set(dims)) != len(dims) or not all(d.isidentifier() for d in dims):
        raise ValueError(f"--dims must name 1 to 4 distinct axes (identifiers), got {dims!r}")
    function = function or name
    package = root / "grader" / "assignments" / name
    corpus = root / "tests" / "corpus" / name
    test = root / "tests" / "grader" / "assignments" / f"test_{name}.py"
    for path in (package, corpus, test):
        if path.exists():
            raise FileExistsError(f"{path} exists; nothing written")
    files = {
        package / "__init__.py": INIT_PY, package / "spec.py": SPEC, package / "inputs.py": INPUTS_PY,
        package / "oracle.py": ORACLE_PY, package / "bench.py": BENCH_PY, package / "reference.py": REFERENCE_PY,
        package / "template.py": TEMPLATE_PY, package / "points.toml": POINTS_TOML, test: TEST_PY,
        corpus / "correct" / "README.md": "Correct files: at least three styles, one the Triton tutorial's.\n",
        corpus / "wrong" / "README.md": "One known mistake per file; its docstring says `Expected failed checks: ...`.\n",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(name=name, function=function, axes=tuple(dims), rank=len(dims),
                                    shapes=benchmark_shapes(len(dims)), first=dims[0]), encoding="utf-8")
    return list(files)


def main_new_assignment(args) -> int:
    """CLI handler of ``grader new-assignment NAME``."""
    import sys

    try:
        dims = tuple(d.strip() for d in (getattr(args, "dims", None) or "M,N").split(",") if d.strip())
        written = scaffold(args.name, Path(args.root), function=args.function, dims=dims)
    except (ValueError, FileExistsError) as exc:
        print(f"grader new-assignment: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print("\nAdd this entry to MANIFESTS in grader/manifest.py, then follow docs/authoring.md:\n")
    print(manifest_entry(args.name, args.function or args.name))
    return 0
