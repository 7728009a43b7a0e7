"""Assignment ``softmax_backward``: the softmax VJP as a Triton kernel.

Students hand in ``softmax_backward.py`` defining ``softmax_backward(y, g) -> dx`` with

    dot[r] = sum_j y[r, j] * g[r, j]          (one reduction per row, in fp32)
    dx[r, j] = y[r, j] * (g[r, j] - dot[r])   (a fresh contiguous tensor of y's dtype)

for probabilities y = softmax(x) and upstream gradient g = dL/dy, both (M, N), each with its
own row and column strides, dtype float32, float16 or bfloat16. This is J^T g for the softmax
Jacobian J = diag(y) - y y^T, without forming J (assignment text: workshop I2, "Softmax
backward without a dense Jacobian").

This module is the whole specification: input generators, the fp64 oracles, the tolerance
table, the named checks (the public contract), and the benchmark shapes. The parent process
uses it; none of it is visible to the submission's process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from grader.checks import CheckResult, Tolerance, compare

FUNCTION_NAME = "softmax_backward"
MODULE_FILE = "softmax_backward.py"

# --------------------------------------------------------------------------------------------
# Tolerance table. Error bound per element: |got - expected| <= atol + rtol * scale, with
# scale[r, j] = |y| * (|g| + |dot| + sum_k |y*g|) over row r: the magnitudes of the terms that
# make dx[r, j] (the product, the subtraction and the row reduction), so the bound follows each
# row's own size; dx is O(1/N) on a row of length N, and a fixed atol would let all-zeros pass.
# --------------------------------------------------------------------------------------------
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(
        rtol=2e-5,
        atol=1e-30,
        summary="fp32 rounding of y plus a blocked fp32 sum, with 6x room",
        why="fp32 vs fp64 oracle: rounding y to fp32 (1 ulp = 6e-8) plus a blocked fp32 sum of up "
        "to 131072 products, worst case (log2(block) + chunks) ulps ~ 50 ulps = 3e-6; 2e-5 leaves 6x room. "
        "atol 1e-30 only absorbs flush-to-zero below the fp32 normal range (1.2e-38)",
    ),
    torch.float16: Tolerance(
        rtol=2e-5,
        vtol=2.0**-10,
        atol=2.0**-24,
        summary="fp32 arithmetic on the fp16 inputs plus one fp16 ulp of the result",
        why="fp32 arithmetic on the rounded fp16 inputs as for float32 (rtol 2e-5 x scale), plus rounding "
        "the result to fp16: half an ulp, at most 2^-11 of the value; allow one ulp (vtol 2^-10 x |dx|). "
        "atol = 2^-24, the spacing of fp16 subnormals, for elements below 6.1e-5. A dot accumulated in "
        "fp16 is off by ulps of |dot|, which these terms do not cover",
    ),
    torch.bfloat16: Tolerance(
        rtol=2e-5,
        vtol=2.0**-6,
        atol=1e-30,
        summary="fp32 arithmetic on the bf16 inputs plus two bf16 ulps of the result",
        why="fp32 arithmetic as for float32, plus rounding the result to bf16 (8 significant bits, one ulp is "
        "at most 2^-7 of the value). The GPU rounds to nearest (half an ulp) but Triton's CPU interpreter "
        "truncates (up to one ulp); allow two ulps (vtol 2^-6). bf16 has the fp32 exponent range, so the "
        "floor is the fp32 one",
    ),
}
# Central difference: (L(x+h e_j) - L(x-h e_j)) / 2h with h = 1e-5 in fp64 has truncation error
# h^2/6 |L'''| ~ 2e-11 and rounding error eps64 |L| / h ~ 2e-11 for the O(1) losses used here.
CENTRAL_DIFFERENCE_H = 1e-5
CENTRAL_DIFFERENCE_ATOL = 1e-9
# Long rows for edge_shapes and half_precision: the issue asks for N >= 65536.
LONG_ROW = 65536
LONGEST_ROW = 131072

# Benchmark shapes (M, N) and dtypes, timed on a GPU only (grader/benchmark.py).
BENCHMARK_SHAPES: list[tuple[int, int]] = [(65536, 256), (4096, 4096), (1024, 32768), (256, 131072)]
BENCHMARK_DTYPES: list[torch.dtype] = [torch.float32, torch.float16, torch.bfloat16]

CHECK_NAMES = (
    "example_two_element",
    "autograd_fp32",
    "half_precision",
    "central_difference",
    "row_sum_invariant",
    "strided_inputs",
    "output_contract",
    "rejects_mismatch",
    "rejects_requires_grad",
    "edge_shapes",
    "fresh_results",
    "triton_kernel",
)

HINTS = {
    "example_two_element": "y=[0.25,0.75], g=[2,-1]: dot=-0.25, dx=[0.5625,-0.5625]",
    "autograd_fp32": "dx = y * (g - sum(y*g)) per row, with the sum over the last dimension",
    "half_precision": "upcast y and g to fp32 before multiplying; store the result in the input dtype",
    "central_difference": "the finite-difference slope of L = sum(softmax(x)*g) disagrees with your dx",
    "row_sum_invariant": "each row of dx must sum to ~0 (softmax is shift-invariant)",
    "strided_inputs": "load y and g with their own row and column strides (y.stride(0), y.stride(1), g.stride(0), g.stride(1))",
    "output_contract": "return a fresh contiguous tensor of y's shape, dtype and device; never write into y or g",
    "rejects_mismatch": "raise (ValueError/TypeError) when shapes, dtypes or devices of y and g differ",
    "rejects_requires_grad": "this is an explicit VJP function: raise if y or g requires grad",
    "edge_shapes": "handle N=1, M=1, odd N and rows longer than one block (loop over the row)",
    "fresh_results": "compute from the values in memory on every call; do not cache by pointer",
    "triton_kernel": "the work must be done by a @triton.jit kernel launched on every call",
}


# --------------------------------------------------------------------------------------------
# fp64 oracles
# --------------------------------------------------------------------------------------------
def vjp_fp64(y: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax VJP and its error scale, in float64.

    Args:
        y: probabilities, (M, N), any float dtype (upcast here, so a rounded y gives the
            oracle of the rounded input, as the half-precision check requires).
        g: upstream gradient dL/dy, (M, N).

    Returns:
        (dx, scale): dx = y * (g - sum(y*g, -1)) and scale = |y| (|g| + |dot| + sum|y*g|),
        both float64 (M, N).
    """
    y64 = y.detach().to(torch.float64)
    g64 = g.detach().to(torch.float64)
    dot = (y64 * g64).sum(dim=-1, keepdim=True)
    dx = y64 * (g64 - dot)
    scale = y64.abs() * (g64.abs() + dot.abs() + (y64 * g64).abs().sum(dim=-1, keepdim=True))
    return dx, scale


def autograd_vjp_fp64(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dL/dx of L = sum(softmax(x, -1) * g) by PyTorch autograd in float64; x, g (M, N)."""
    x64 = x.detach().to(torch.float64).requires_grad_(True)
    loss = (torch.softmax(x64, dim=-1) * g.detach().to(torch.float64)).sum()
    (grad,) = torch.autograd.grad(loss, x64)
    return grad


def central_difference_fp64(x: torch.Tensor, g: torch.Tensor, row: int, col: int, h: float = CENTRAL_DIFFERENCE_H) -> float:
    """(L(x + h e) - L(x - h e)) / 2h for L = sum(softmax(x[row]) * g[row]), e the unit vector at (row, col)."""
    x_row = x[row].detach().to(torch.float64)
    g_row = g[row].detach().to(torch.float64)
    plus = x_row.clone()
    plus[col] += h
    minus = x_row.clone()
    minus[col] -= h
    loss_plus = float((torch.softmax(plus, -1) * g_row).sum())
    loss_minus = float((torch.softmax(minus, -1) * g_row).sum())
    return (loss_plus - loss_minus) / (2 * h)


# --------------------------------------------------------------------------------------------
# Inputs: one seeded generator, views inside NaN-filled guard buffers.
# --------------------------------------------------------------------------------------------
GUARD = 67  # NaN elements before and after every view: an out-of-bounds read shows as NaN.


@dataclass
class ViewSpec:
    """A strided view of a flat base buffer, as the child rebuilds it with torch.as_strided."""

    base: str
    size: tuple[int, int]
    stride: tuple[int, int]
    offset: int
    device: str = "primary"  # "primary" = the grading device; "other" = for device mismatch
    requires_grad: bool = False

    def as_plan(self) -> dict:
        return {
            "base": self.base,
            "size": list(self.size),
            "stride": list(self.stride),
            "offset": self.offset,
            "device": self.device,
            "requires_grad": self.requires_grad,
        }


class InputBank:
    """Flat base buffers sent to the child (one safetensors file) and the views into them."""

    def __init__(self) -> None:
        self.bases: dict[str, torch.Tensor] = {}

    def add(self, flat: torch.Tensor) -> str:
        name = f"b{len(self.bases)}"
        self.bases[name] = flat.contiguous()
        return name

    def view(self, values: torch.Tensor, dtype: torch.dtype, layout: str = "contiguous") -> ViewSpec:
        """Place ``values`` (M, N) as a ``dtype`` view with the given layout inside NaNs.

        Layouts: ``contiguous`` (row stride N, column stride 1), ``transposed`` (column-major:
        strides (1, M)), ``step`` (every 3rd column of every row of a wider buffer, strides
        (3N + 2, 3)), ``transposed_step`` (strides (2, 2M + 1)).
        """
        rows, cols = values.shape
        row_stride, col_stride = {
            "contiguous": (cols, 1),
            "transposed": (1, rows),
            "step": (3 * cols + 2, 3),
            "transposed_step": (2, 2 * rows + 1),
        }[layout]
        span = (rows - 1) * row_stride + (cols - 1) * col_stride + 1
        flat = torch.full((GUARD + span + GUARD,), float("nan"), dtype=dtype)
        torch.as_strided(flat, (rows, cols), (row_stride, col_stride), GUARD).copy_(values.to(dtype))
        return ViewSpec(self.add(flat), (rows, cols), (row_stride, col_stride), GUARD)

    def values_of(self, spec: ViewSpec) -> torch.Tensor:
        """The (M, N) values of a view, as the child sees them (same dtype)."""
        return torch.as_strided(self.bases[spec.base], spec.size, spec.stride, spec.offset).clone()


def make_logits(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Logits x (rows, cols) in fp64 with per-row spread cycling through 1, 6, 0.1, 25.

    Large spreads give probabilities spanning many orders of magnitude (tiny y next to y ~ 1);
    a spread of 0.1 gives a near-uniform row where every y is ~1/N.
    """
    spreads = torch.tensor([1.0, 6.0, 0.1, 25.0], dtype=torch.float64)[torch.arange(rows) % 4].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) * spreads


def make_upstream(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Upstream gradient g (rows, cols) in fp64; row means cycle through 0, 3, -1.5, 0.5.

    A non-zero mean makes dot = sum(y*g) large, so a wrong or low-precision dot is visible.
    """
    means = torch.tensor([0.0, 3.0, -1.5, 0.5], dtype=torch.float64)[torch.arange(rows) % 4].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) + means


# --------------------------------------------------------------------------------------------
# Calls and checks
# --------------------------------------------------------------------------------------------
@dataclass
class PlannedCall:
    """One call the child makes, and what the parent expects of it."""

    id: str
    y: ViewSpec
    g: ViewSpec
    expect: str  # "output" or "raise"
    label: str = ""
    expected: list[torch.Tensor] = field(default_factory=list)  # per round: fp64 (M, N)
    scale: list[torch.Tensor] = field(default_factory=list)
    tolerance: Tolerance | None = None
    out_dtype: torch.dtype | None = None
    refills: list[dict] = field(default_factory=list)
    save_inputs_after: bool = False
    extra: dict = field(default_factory=dict)

    def as_plan(self) -> dict:
        return {
            "id": self.id,
            "y": self.y.as_plan(),
            "g": self.g.as_plan(),
            "refills": self.refills,
            "save_inputs_after": self.save_inputs_after,
        }


@dataclass
class PlannedCheck:
    name: str
    calls: list[PlannedCall]
    evaluate: Callable[["PlannedCheck", "CheckEvidence"], CheckResult]


@dataclass
class CallEvidence:
    """What came back for one call (round): the child's report and tensors read as numbers."""

    report: dict | None
    out: torch.Tensor | None
    y_base_after: torch.Tensor | None = None
    g_base_after: torch.Tensor | None = None


@dataclass
class CheckEvidence:
    calls: dict[str, CallEvidence]
    bank: InputBank


class Plan:
    """All checks of one grading run, with their inputs. Built in the parent only."""

    def __init__(self, *, seed: int, device: str) -> None:
        self.seed = seed
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        self.bank = InputBank()
        self.checks: list[PlannedCheck] = []

    def as_plan(self, other_device: str) -> dict:
        return {
            "function": FUNCTION_NAME,
            "module_file": MODULE_FILE,
            "device": self.device,
            "other_device": other_device,
            "steps": [{"check": c.name, "calls": [call.as_plan() for call in c.calls]} for c in self.checks],
        }


def _value_call(plan: Plan, call_id: str, y_values: torch.Tensor, g_values: torch.Tensor, dtype: torch.dtype,
                *, y_layout: str = "contiguous", g_layout: str = "contiguous", expected: torch.Tensor | None = None,
                label: str = "") -> PlannedCall:
    y_spec = plan.bank.view(y_values, dtype, y_layout)
    g_spec = plan.bank.view(g_values, dtype, g_layout)
    y_rounded = plan.bank.values_of(y_spec)
    g_rounded = plan.bank.values_of(g_spec)
    oracle, scale = vjp_fp64(y_rounded, g_rounded)
    return PlannedCall(
        id=call_id,
        y=y_spec,
        g=g_spec,
        expect="output",
        label=label or f"{tuple(y_values.shape)} {str(dtype).replace('torch.', '')}",
        expected=[oracle if expected is None else expected],
        scale=[scale],
        tolerance=TOLERANCES[dtype],
        out_dtype=dtype,
    )


def _random_case(plan: Plan, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = make_logits(plan.generator, rows, cols)
    g = make_upstream(plan.generator, rows, cols)
    return x, torch.softmax(x, dim=-1), g


def _describe_failure(report: dict | None, call: PlannedCall) -> str | None:
    if report is None:
        return f"{call.label}: no result (the process stopped before this call finished)"
    if report["status"] == "raised":
        exc = report.get("exception", {})
        return f"{call.label}: raised {exc.get('type')}: {exc.get('message', '')[:300]}"
    if report["status"] == "not_tensor":
        return f"{call.label}: returned {report.get('returned_type')}, not a torch.Tensor"
    return None


def _diagnose_coverage(got: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, tolerance: Tolerance) -> str:
    """Name an uncovered block of the output: every column (or row) from some index on wrong,
    every one before it right, the mark of a grid, loop bound or mask that stops short."""
    got64 = got.double()
    not_finite = ~torch.isfinite(got64)
    if bool(not_finite.any()) and bool(torch.isfinite(expected).all()):
        row, col = (int(i) for i in torch.nonzero(not_finite)[0])
        return (f" {int(not_finite.sum())} outputs are NaN or inf (the first at [{row},{col}]) although every input"
                f" is finite: the kernel read outside y or g (the grader surrounds them with NaN) or left those"
                f" outputs unwritten (a grid, loop or mask that does not cover every element).")
    bad = ~((got64 - expected).abs() <= tolerance.allowed(expected, scale))
    for axis, what, advice in ((0, "column", "a grid, loop bound or mask that stops short of N"),
                               (1, "row", "a grid that launches too few programs for M rows")):
        per_index = bad.any(dim=axis)
        if per_index.numel() < 2 or not bool(per_index.any()) or bool(per_index.all()):
            continue
        first_bad = int(torch.nonzero(per_index)[0])
        if first_bad > 0 and bool(per_index[first_bad:].all()):
            return (f" Every {what} from {what} {first_bad} on is wrong and every {what} before it is right:"
                    f" look for {advice}.")
    return ""


def _diagnose(got: torch.Tensor, y: torch.Tensor, g: torch.Tensor, tolerance: Tolerance) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict)."""
    y64, g64 = y.double(), g.double()
    _, scale = vjp_fp64(y64, g64)
    candidates = {
        "y*(g - sum(g)): the reduction must be sum(y*g), not sum(g)": y64 * (g64 - g64.sum(-1, keepdim=True)),
        "y*(sum(y*g) - g): the sign of the subtraction is flipped": y64 * ((y64 * g64).sum(-1, keepdim=True) - g64),
        "y*g: the dot term is missing": y64 * g64,
        "the sum ran along dim 0 (columns) instead of the last dim": y64 * (g64 - (y64 * g64).sum(0, keepdim=True)),
        "all zeros": torch.zeros_like(y64),
    }
    for description, candidate in candidates.items():
        if got.shape == candidate.shape and compare(got, candidate, scale, tolerance).passed:
            return f" Your output matches {description}."
    return ""


def _single_output(check: PlannedCheck, call: PlannedCall, evidence: CheckEvidence) -> tuple[torch.Tensor | None, CheckResult | None]:
    """The output of ``call`` if it returned one of the right shape, else the failing result."""
    got = evidence.calls.get(call.id)
    problem = _describe_failure(got.report if got else None, call)
    if problem is None and (got.out is None or tuple(got.out.shape) != call.y.size):
        problem = f"{call.label}: no output of shape {call.y.size} could be read back"
    if problem is not None:
        return None, CheckResult(check.name, False, f"{problem}. Hint: {HINTS[check.name]}")
    return got.out, None


def _evaluate_values(check: PlannedCheck, evidence: CheckEvidence, *, diagnose: bool = False) -> CheckResult:
    """Shared evaluation: every round of every call must return the oracle's values."""
    failures: list[str] = []
    worst_ratio = 0.0
    worst_abs = 0.0
    compared = 0
    tolerance_reason = ""
    diagnosed = False  # the first failure names its cause; the generic hint would only distract
    for call in check.calls:
        rounds = [call.id] + [f"{call.id}@{i + 1}" for i in range(len(call.refills))]
        for round_index, round_id in enumerate(rounds):
            got = evidence.calls.get(round_id)
            problem = _describe_failure(got.report if got else None, call)
            if problem:
                failures.append(problem)
                continue
            out = got.out
            if out is None:
                failures.append(f"{call.label}: output could not be read back")
                continue
            expected = call.expected[round_index]
            if tuple(out.shape) != tuple(expected.shape):
                failures.append(f"{call.label}: output shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
                continue
            if call.out_dtype is not None and out.dtype != call.out_dtype:
                failures.append(
                    f"{call.label}: output dtype {str(out.dtype).replace('torch.', '')}, expected "
                    f"{str(call.out_dtype).replace('torch.', '')} (keep the input dtype)"
                )
                continue
            result = compare(out, expected, call.scale[round_index], call.tolerance)
            compared += 1
            worst_ratio = max(worst_ratio, result.max_ratio)
            worst_abs = max(worst_abs, result.max_abs_err)
            if not result.passed:
                label = call.label + (f" (refill {round_index})" if round_index else "")
                text = f"{label}: {result.describe()}; tolerance {call.tolerance.describe_short()}."
                finding = _diagnose_coverage(out, expected, call.scale[round_index], call.tolerance)
                if not finding and diagnose and round_index == 0:
                    y = evidence.bank.values_of(call.y)
                    g = evidence.bank.values_of(call.g)
                    finding = _diagnose(out, y, g, call.tolerance)
                if finding and not failures:
                    diagnosed = True
                failures.append(text + finding)
                tolerance_reason = tolerance_reason or call.tolerance.describe()
    # No error figures when nothing could be compared: a 0 there would read as a perfect score.
    numbers = {"cases": compared, "max_abs_err": worst_abs, "max_err_over_tolerance": worst_ratio} if compared else {"cases": 0}
    if tolerance_reason:
        numbers["tolerance"] = tolerance_reason
    if failures:
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        hint = "" if diagnosed else f" Hint: {HINTS[check.name]}"
        return CheckResult(check.name, False, failures[0].rstrip(".") + more + "." + hint, numbers=numbers)
    return CheckResult(
        check.name, True, f"{compared} cases, worst error {worst_ratio:.2g} of tolerance", numbers=numbers
    )


# --- the checks -----------------------------------------------------------------------------
def _check_example_two_element(plan: Plan) -> PlannedCheck:
    y = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    g = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    expected = torch.tensor([[0.5625, -0.5625]], dtype=torch.float64)
    call = _value_call(plan, "example_two_element/0", y, g, torch.float32, expected=expected, label="y=[0.25,0.75], g=[2,-1]")
    return PlannedCheck("example_two_element", [call], lambda c, e: _evaluate_values(c, e, diagnose=True))


def _check_autograd_fp32(plan: Plan, rows: int) -> PlannedCheck:
    shapes = [(rows, 128), (3, 1000), (rows + 1, 1025), (2, 4096), (rows, 3071)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        x, y, g = _random_case(plan, m, n)
        call = _value_call(plan, f"autograd_fp32/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32")
        call.expected = [autograd_vjp_fp64(x, g)]  # autograd at the logits, not the formula
        calls.append(call)
    return PlannedCheck("autograd_fp32", calls, lambda c, e: _evaluate_values(c, e, diagnose=True))


def _check_half_precision(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in [(rows, 1000), (3, 4097), (4, LONG_ROW)]:
            _, y, g = _random_case(plan, m, n)
            name = str(dtype).replace("torch.", "")
            calls.append(_value_call(plan, f"half_precision/{name}/{m}x{n}", y, g, dtype, label=f"({m}, {n}) {name}"))
    return PlannedCheck("half_precision", calls, _evaluate_values)


def _check_central_difference(plan: Plan) -> PlannedCheck:
    calls = []
    for index, (m, n) in enumerate([(3, 37), (2, 300)]):
        x, y, g = _random_case(plan, m, n)
        call = _value_call(plan, f"central_difference/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32")
        points = []
        for _ in range(4):
            row = int(torch.randint(m, (1,), generator=plan.generator))
            col = int(torch.randint(n, (1,), generator=plan.generator))
            points.append((row, col, central_difference_fp64(x, g, row, col)))
        call.extra["points"] = points
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckResult:
        tolerance = Tolerance(
            rtol=TOLERANCES[torch.float32].rtol,
            atol=CENTRAL_DIFFERENCE_ATOL,
            why="fp32 rtol plus 1e-9 for the finite-difference error (h=1e-5, fp64)",
        )
        worst = 0.0
        for call in check.calls:
            out, failure = _single_output(check, call, evidence)
            if failure is not None:
                return failure
            for row, col, slope in call.extra["points"]:
                value = float(out[row, col].double())
                allowed = float(tolerance.allowed(torch.tensor(slope, dtype=torch.float64), call.scale[0][row, col]))
                err = abs(value - slope)
                worst = max(worst, err / allowed)
                if not err <= allowed:
                    return CheckResult(
                        check.name,
                        False,
                        f"{call.label} at logit [{row},{col}]: dx = {value:.8g}, central difference = {slope:.8g} "
                        f"(|err| {err:.3g} > allowed {allowed:.3g}; tolerance {tolerance.describe_short()}). Hint: {HINTS[check.name]}",
                        numbers={"max_err_over_tolerance": worst},
                    )
        return CheckResult(check.name, True, f"8 logits, h = 1e-5, worst error {worst:.2g} of tolerance",
                           numbers={"max_err_over_tolerance": worst})

    return PlannedCheck("central_difference", calls, evaluate)


def _check_row_sum_invariant(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for index, (m, n) in enumerate([(rows, 513), (3, 8192)]):
        _, y, g = _random_case(plan, m, n)
        calls.append(_value_call(plan, f"row_sum_invariant/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckResult:
        tolerance = TOLERANCES[torch.float32]
        worst = 0.0
        for call in check.calls:
            out, failure = _single_output(check, call, evidence)
            if failure is not None:
                return failure
            # Exact sum for the fp32 y given: dot * (1 - sum(y)), ~0. Allowed: the sum of the
            # per-element bounds of the row.
            row_sums = out.double().sum(dim=-1)
            expected = call.expected[0].sum(dim=-1)
            allowed = tolerance.allowed(call.expected[0], call.scale[0]).sum(dim=-1)
            ratio = ((row_sums - expected).abs() / allowed).nan_to_num(nan=math.inf)
            worst = max(worst, float(ratio.max()))
            if not bool((ratio <= 1).all()):
                row = int(ratio.argmax())
                return CheckResult(
                    check.name,
                    False,
                    f"{call.label}: row {row} of dx sums to {float(row_sums[row]):.6g}, expected "
                    f"{float(expected[row]):.3g} (allowed {float(allowed[row]):.3g}). Hint: {HINTS[check.name]}",
                    numbers={"max_err_over_tolerance": worst},
                )
        return CheckResult(check.name, True, f"every row sums to ~0 (worst {worst:.2g} of tolerance)",
                           numbers={"max_err_over_tolerance": worst})

    return PlannedCheck("row_sum_invariant", calls, evaluate)


def _check_strided_inputs(plan: Plan, rows: int) -> PlannedCheck:
    cases = [
        ("transposed", "step", torch.float32, (rows, 300)),
        ("step", "transposed_step", torch.float32, (3, 1000)),
        ("transposed_step", "transposed", torch.float32, (rows + 1, 129)),
        ("transposed", "step", torch.float16, (rows, 257)),
    ]
    calls = []
    for index, (y_layout, g_layout, dtype, (m, n)) in enumerate(cases):
        _, y, g = _random_case(plan, m, n)
        name = str(dtype).replace("torch.", "")
        calls.append(
            _value_call(plan, f"strided_inputs/{index}", y, g, dtype, y_layout=y_layout, g_layout=g_layout,
                        label=f"({m}, {n}) {name}, y {y_layout}, g {g_layout}")
        )
    for call in calls:
        call.label += f" (y strides {call.y.stride}, g strides {call.g.stride})"
    return PlannedCheck("strided_inputs", calls, _evaluate_values)


def _check_output_contract(plan: Plan) -> PlannedCheck:
    calls = []
    for index, (dtype, (m, n)) in enumerate([(torch.float32, (5, 300)), (torch.float16, (3, 257))]):
        _, y, g = _random_case(plan, m, n)
        call = _value_call(plan, f"output_contract/{index}", y, g, dtype)
        call.save_inputs_after = True
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckResult:
        problems = []
        for call in check.calls:
            got = evidence.calls.get(call.id)
            problem = _describe_failure(got.report if got else None, call)
            if problem:
                problems.append(problem)
                continue
            meta = got.report.get("out", {})
            want_dtype = str(call.out_dtype).replace("torch.", "")
            if tuple(meta.get("shape", ())) != call.y.size:
                problems.append(f"{call.label}: output shape {tuple(meta.get('shape', ()))}, expected {call.y.size}")
            if meta.get("dtype") != want_dtype:
                problems.append(f"{call.label}: output dtype {meta.get('dtype')}, expected {want_dtype}")
            if got.report.get("device_ok") is False or not str(meta.get("device", "")).startswith(plan.device.split(":")[0]):
                problems.append(f"{call.label}: output on {meta.get('device')}, inputs on {plan.device}")
            if not meta.get("contiguous"):
                problems.append(f"{call.label}: output is not contiguous")
            if meta.get("aliases_input"):
                problems.append(f"{call.label}: output shares memory with y or g (must be a fresh tensor)")
            for label, spec, after in (("y", call.y, got.y_base_after), ("g", call.g, got.g_base_after)):
                before = evidence.bank.bases[spec.base]
                if after is None or after.shape != before.shape or not _bitwise_equal(before, after):
                    problems.append(f"{call.label}: {label} (or the memory around it) was modified by the call")
        if problems:
            return CheckResult(check.name, False, "; ".join(problems[:3]) + f". Hint: {HINTS[check.name]}")
        return CheckResult(check.name, True, "fresh contiguous output of the input's shape, dtype and device; inputs untouched")

    return PlannedCheck("output_contract", calls, evaluate)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype:
        return False
    int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.view(int_type), b.view(int_type)))


def _expect_raise_call(plan: Plan, call_id: str, label: str, y: ViewSpec, g: ViewSpec) -> PlannedCall:
    return PlannedCall(id=call_id, y=y, g=g, expect="raise", label=label)


def _evaluate_raises(check: PlannedCheck, evidence: CheckEvidence) -> CheckResult:
    raised, missing = [], []
    for call in check.calls:
        got = evidence.calls.get(call.id)
        report = got.report if got else None
        if report is None:
            missing.append(f"{call.label}: no result (the process stopped)")
        elif report["status"] == "raised" and not report["exception"].get("exit"):
            raised.append(f"{call.label} -> {report['exception']['type']}")
        else:
            missing.append(f"{call.label}: did not raise")
    if missing:
        return CheckResult(check.name, False, "; ".join(missing) + f". Hint: {HINTS[check.name]}",
                           numbers={"raised": len(raised), "cases": len(check.calls)})
    return CheckResult(check.name, True, "raised: " + "; ".join(raised), numbers={"raised": len(raised), "cases": len(check.calls)})


def _check_rejects_mismatch(plan: Plan) -> PlannedCheck:
    bank = plan.bank
    _, y, g = _random_case(plan, 4, 8)
    _, _, g_wide = _random_case(plan, 4, 9)
    y32 = bank.view(y, torch.float32)
    calls = [
        _expect_raise_call(plan, "rejects_mismatch/shape", "shape (4, 8) vs (4, 9)", y32, bank.view(g_wide, torch.float32)),
        _expect_raise_call(plan, "rejects_mismatch/transposed_shape", "shape (4, 8) vs (8, 4)", y32,
                           bank.view(g.t().contiguous(), torch.float32)),
        _expect_raise_call(plan, "rejects_mismatch/dtype", "dtype float32 vs float16", y32, bank.view(g, torch.float16)),
    ]
    other = bank.view(g, torch.float32)
    other.device = "other"
    calls.append(_expect_raise_call(plan, "rejects_mismatch/device", "device mismatch (g on another device)", y32, other))
    return PlannedCheck("rejects_mismatch", calls, _evaluate_raises)


def _check_rejects_requires_grad(plan: Plan) -> PlannedCheck:
    _, y, g = _random_case(plan, 3, 16)
    y_grad = plan.bank.view(y, torch.float32)
    y_grad.requires_grad = True
    g_grad = plan.bank.view(g, torch.float32)
    g_grad.requires_grad = True
    calls = [
        _expect_raise_call(plan, "rejects_requires_grad/y", "y.requires_grad=True", y_grad, plan.bank.view(g, torch.float32)),
        _expect_raise_call(plan, "rejects_requires_grad/g", "g.requires_grad=True", plan.bank.view(y, torch.float32), g_grad),
    ]
    return PlannedCheck("rejects_requires_grad", calls, _evaluate_raises)


def _check_edge_shapes(plan: Plan) -> PlannedCheck:
    shapes = [(1, 1), (1, 1000), (7, 1), (3, 3), (2, 4097), (2, LONG_ROW), (1, LONGEST_ROW + 3)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        _, y, g = _random_case(plan, m, n)
        calls.append(_value_call(plan, f"edge_shapes/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))
    return PlannedCheck("edge_shapes", calls, _evaluate_values)


def _check_fresh_results(plan: Plan) -> PlannedCheck:
    m, n = 4, 512
    _, y, g = _random_case(plan, m, n)
    call = _value_call(plan, "fresh_results/0", y, g, torch.float32, label=f"({m}, {n}) fp32, same buffers refilled")
    for _ in range(2):
        _, y_new, g_new = _random_case(plan, m, n)
        y_name = plan.bank.add(y_new.to(torch.float32).contiguous().reshape(-1))
        g_name = plan.bank.add(g_new.to(torch.float32).contiguous().reshape(-1))
        call.refills.append({"y": y_name, "g": g_name, "y_stride": [n, 1], "g_stride": [n, 1]})
        oracle, scale = vjp_fp64(y_new.to(torch.float32), g_new.to(torch.float32))
        call.expected.append(oracle)
        call.scale.append(scale)
    return PlannedCheck("fresh_results", [call], _evaluate_values)


def _check_triton_kernel(plan: Plan) -> PlannedCheck:
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckResult:
        ok_calls = [c for c in evidence.calls.values() if c.report and c.report.get("status") == "ok"]
        without = [c.report["id"] for c in ok_calls if c.report.get("launches", 0) < 1]
        if not ok_calls:
            return CheckResult(check.name, False, "no call returned a result, so no kernel launch could be seen")
        if without:
            return CheckResult(
                check.name,
                False,
                f"{len(without)} of {len(ok_calls)} calls launched no @triton.jit kernel (e.g. {without[0]}). "
                f"Hint: {HINTS[check.name]}",
                numbers={"calls_without_kernel": len(without), "calls": len(ok_calls)},
            )
        launches = sum(c.report.get("launches", 0) for c in ok_calls)
        return CheckResult(check.name, True, f"{len(ok_calls)} calls, {launches} Triton kernel launches",
                           numbers={"calls": len(ok_calls), "launches": launches})

    return PlannedCheck("triton_kernel", [], evaluate)


def build_plan(*, seed: int, device: str) -> Plan:
    """Every check's inputs and oracles for one grading run.

    Args:
        seed: seeds the one torch.Generator all inputs come from (the service mixes a secret
            deployment seed with the submission id; ``grader check`` defaults to 0).
        device: ``"cpu"`` (Triton interpreter: few rows per case) or ``"cuda"`` (more rows).

    Returns:
        Plan whose checks appear in CHECK_NAMES order.
    """
    plan = Plan(seed=seed, device=device)
    rows = 4 if device == "cpu" else 64
    plan.checks = [
        _check_example_two_element(plan),
        _check_autograd_fp32(plan, rows),
        _check_half_precision(plan, rows),
        _check_central_difference(plan),
        _check_row_sum_invariant(plan, rows),
        _check_strided_inputs(plan, rows),
        _check_output_contract(plan),
        _check_rejects_mismatch(plan),
        _check_rejects_requires_grad(plan),
        _check_edge_shapes(plan),
        _check_fresh_results(plan),
        _check_triton_kernel(plan),
    ]
    assert tuple(c.name for c in plan.checks) == CHECK_NAMES  # internal invariant, not input validation
    return plan
