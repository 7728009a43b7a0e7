"""``softmax_cross_entropy_backward``: the numbers and declarations that make up the assignment's contract.

Tolerances (each with where it comes from), the checks declared as data for the generic core
(grader/checks/generic.py), benchmark rows, the check names in order and one hint per check.
docs/checks.md states the same in words.

The assignment (the lesson "Softmax Jacobian & the p - y gradient collapse"): for logits x of
shape (M, C) (float32, float16 or bfloat16, any row and column strides), integer targets t of
shape (M,) (int64, any stride) and the upstream gradient grad = dL/dloss of the mean loss
loss = F.cross_entropy(x, t, ignore_index=ignore_index, reduction="mean") (a 0-d float32
tensor on x's device),

    valid[r]  = t[r] != ignore_index
    n_valid   = sum_r valid[r]                          (an exact integer count)
    p[r, :]   = softmax(x[r, :])                        (max-subtracted, in fp32)
    dx[r, j]  = (p[r, j] - [j == t[r]]) * grad / n_valid   for valid rows
    dx[r, :]  = 0                                       for ignored rows, and everywhere when n_valid == 0

returned as a fresh contiguous (M, C) tensor of x's dtype. The C x C softmax Jacobian
J = diag(p) - p p^T is never formed: J^T (-y / p) collapses to p - y.
"""

from __future__ import annotations

from dataclasses import replace

from grader.assignments.protocol import (
    Case,
    CaseSpec,
    CentralDifference,
    FreshResults,
    Invariant,
    OutputContract,
    Rejects,
    RejectsRequiresGrad,
    ScalarInput,
    TensorInput,
    TensorOutput,
    TrainingStep,
    TritonKernel,
    ValueCheck,
)
from grader.assignments.softmax_cross_entropy_backward.oracle import DEFAULT_IGNORE_INDEX, EXPONENT_TERM
from grader.checks.tolerance import Tolerance

__all__ = ["DEFAULT_IGNORE_INDEX", "EXPONENT_TERM"]  # defined in oracle.py, which must import only torch

# Error bound per element: |got - expected| <= atol + rtol * scale + vtol * |expected|, with
#
#     scale[r, j] = valid[r] * |grad / n_valid| * (p[r, j] * (1 + (|x[r, j]| + |m[r]|) * EXPONENT_TERM) + y[r, j])
#
# (m[r] the row max, y the one-hot target): the magnitudes of the terms that make dx[r, j].
# p * 1 and y cover the arithmetic on p and on p - y (relative to each term's own size, so the
# bound follows the row: p is O(1/C) on long rows and a fixed atol would let all-zeros pass);
# p * (|x| + |m|) covers the rounding of exp's argument, which is formed from x and the row max
# (x - m, or x - (m + log d), or x * log2(e) - m * log2(e)): an absolute error of the argument
# is the same relative error of p. Ignored rows have scale 0: they must be exactly 0 (+ atol).
# EXPONENT_TERM (1/64, defined in oracle.py), the weight of |x| + |m| in the scale:
# rtol * EXPONENT_TERM = 2e-5 / 64 = 3.1e-7 = 5.2 fp32 unit roundoffs (u = 2^-24) per unit of |x| + |m|.
# One rounding of x - m costs up to u * |x - m|;
# the routes x - (m + log d), (x - m) * log2(e) (how Triton's GPU backend lowers tl.exp) and
# x*log2(e) - m*log2(e) round operands as large as |x| and |m|. Measured in fp32 on the
# checks' logits (spread 10 rows, rows offset by 100, and +-1e4): at most 1.4 u per unit
# beyond a 30 u base, for all four routes: 3.7x room. At the checks' usual |x| + |m| <= ~100
# it at most doubles the bound of p; on the 1e4 logits it admits the x - (m + log d) route
# (errors up to 6e-4 of p there), which is stable, only less precise.

#: The call's arguments in order (grader.assignments.protocol): logits x (M, C) in the call's
#: dtype, int64 targets t (M,), a 0-d float32 upstream gradient, and ignore_index.
INPUTS = (TensorInput("x", ("M", "C")), TensorInput("t", ("M",), dtype="int64", float_input=False),
          TensorInput("grad", (), dtype="float32", strided=()), ScalarInput("ignore_index", -100))

TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(
        rtol=2e-5,
        atol=1e-30,
        summary="fp32 max/sum-exp per row, exp and one rounding of the result, with 2x room",
        why="fp32 vs fp64 oracle of the same fp32 x. Relative to p: exp (1 ulp in numpy, ~2 ulps for the GPU's "
        "ex2.approx), the row sum of up to 131072 positive terms (blocked or online: log2(block) + chunks + "
        "rescales, worst ~150 u), the division by the sum and the product with grad/n_valid (3 roundings), "
        "the subtraction p - y (1 rounding relative to p + y): worst ~170 u = 1e-5; 2e-5 (335 u) leaves 2x room "
        "over the worst case (typical errors are ~10 u). Exp's argument: + 2e-5/64 x (|x| + |m|) x p. "
        "atol 1e-30 only absorbs flush-to-zero of p below the fp32 normal range (1.2e-38)",
    ),
    "float16": Tolerance(
        rtol=2e-5,
        vtol=2.0**-10,
        atol=2.0**-24,
        summary="fp32 arithmetic on the fp16 logits plus one fp16 ulp of the result",
        why="fp32 arithmetic on the rounded fp16 logits as for float32 (rtol 2e-5 x scale; the oracle is computed "
        "from the same rounded x), plus rounding dx to fp16: half an ulp, at most 2^-11 of the value; allow one "
        "ulp (vtol 2^-10 x |dx|). atol = 2^-24, the spacing of fp16 subnormals, for |dx| below 6.1e-5. A row "
        "max or sum-exp kept in fp16 is off by fp16 ulps of the whole row, which these terms do not cover",
    ),
    "bfloat16": Tolerance(
        rtol=2e-5,
        vtol=2.0**-6,
        atol=1e-30,
        summary="fp32 arithmetic on the bf16 logits plus two bf16 ulps of the result",
        why="fp32 arithmetic on the rounded bf16 logits as for float32, plus rounding dx to bf16 (8 significant "
        "bits, one ulp is at most 2^-7 of the value). The GPU rounds to nearest (half an ulp) but Triton's CPU "
        "interpreter truncates (up to one ulp); allow two ulps (vtol 2^-6). bf16 has the fp32 exponent range, "
        "so the floor is the fp32 one",
    ),
}

OUTPUTS = (TensorOutput("dx", ("M", "C"), TOLERANCES),)

# Central difference on the loss L(x) = grad * F.cross_entropy(x, t, ignore_index) in fp64:
# (L(x + h e) - L(x - h e)) / 2h has truncation error h^2/6 |L'''| ~ 1e-11 and rounding error
# ~ eps64 * |L| / h ~ 2e-10 for the losses of the check (|L| < ~10): atol 1e-9.
CENTRAL_DIFFERENCE_H = 1e-5
CENTRAL_DIFFERENCE_ATOL = 1e-9

#: Row lengths of the long cases (edge_shapes, half_precision).
LONG_ROW = 65536
LONGEST_ROW = 131072

# Benchmark rows (M, C) x dtypes, timed on a GPU only (grader/benchmark): an LM head over a
# 32k vocabulary, a 1k-class classifier, many rows of 128 classes, a 128k vocabulary.
BENCHMARK_SHAPES: tuple[tuple[int, int], ...] = ((4096, 32768), (16384, 1024), (65536, 128), (1024, 131072))
BENCHMARK_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
#: Fraction of benchmark rows whose target is ignore_index (padding tokens of a batch).
BENCHMARK_IGNORED_FRACTION = 1.0 / 16



def checks(device: str) -> tuple:
    """The checks in order; the CPU interpreter gets 4 rows where a GPU gets 64. Each case
    draws its own logits, targets (ignored rows among them), grad and ignore_index
    (inputs.drawn)."""
    import torch

    import grader.assignments.softmax_cross_entropy_backward.inputs as inputs
    from grader.assignments.softmax_cross_entropy_backward.oracle import autograd_xent_grad_fp64, loss_fp64

    rows = 4 if device == "cpu" else 64

    def case(m: int, c: int, dtype: str = "float32", *, key: str = "", label: str = "", layouts=None, **draw) -> CaseSpec:
        return CaseSpec(dims={"M": m, "C": c}, dtype=dtype, layouts=layouts or {}, key=key, label=label,
                        draw=inputs.drawn(m, c, dtype=dtype, **draw))

    def fixed(x: torch.Tensor, t: torch.Tensor, label: str) -> CaseSpec:
        return CaseSpec(dims={"M": x.shape[0], "C": x.shape[1]}, label=label,
                        draw=lambda generator: inputs.case_of(x, t, 1.0))

    def autograd(case: Case, placed) -> dict:
        return {"dx": autograd_xent_grad_fp64(placed["x"], placed["t"], placed["grad"], placed["ignore_index"])}

    # The lesson's worked example: p = [0.25, 0.60, 0.15], target 1, grad 1, one row; then two
    # rows (the second p = [0.25, 0.65, 0.10], target 1): each row divided by n_valid = 2.
    first = torch.tensor([0.25, 0.60, 0.15], dtype=torch.float64)
    second = torch.tensor([0.25, 0.65, 0.10], dtype=torch.float64)
    example = (
        fixed(first.log()[None], torch.tensor([1]),
              label="x = log([0.25, 0.60, 0.15]), t = [1], grad 1 (expected [0.25, -0.40, 0.15])"),
        fixed(torch.stack([first, second]).log(), torch.tensor([1, 1]),
              label="x = log([[0.25, 0.60, 0.15], [0.25, 0.65, 0.10]]), t = [1, 1], grad 1 (expected "
                    "[[0.125, -0.2, 0.075], [0.125, -0.175, 0.05]])"),
    )
    # ignore_index: the default -100, -1, a valid class (3: rows whose target is 3 are ignored,
    # as in PyTorch), every row ignored (dx = 0), one valid row among ignored ones (n_valid = 1).
    m = rows + 2

    def one_valid(generator):
        x, t = inputs.random_case(generator, 7, 64, ignored=(0, 1, 2, 3, 4, 6))
        t[5] = 63
        return inputs.case_of(x, t, 2.0)

    ignore_index = (
        case(m, 200, grad=2.5, ignored=range(1, m - 1, 2), key="default",
             label=f"({m}, 200) float32, every other row's target -100 (the default ignore_index)"),
        case(5, 300, grad=0.6, ignored=(1, 3), ignore_index=-1, key="minus_one",
             label="(5, 300) float32, ignore_index=-1, rows 1 and 3 ignored"),
        case(6, 50, grad=-1.0, ignored=(1, 4), ignore_index=3, key="a_class",
             label="(6, 50) float32, ignore_index=3 (a valid class: rows with target 3 are ignored)"),
        case(4, 100, ignored=range(4), key="all_ignored",
             label="(4, 100) float32, every target -100 (n_valid = 0: dx is all zeros)"),
        CaseSpec(dims={"M": 7, "C": 64}, key="one_valid", label="(7, 64) float32, only row 5 valid (n_valid = 1)",
                 draw=one_valid),
    )

    def large(m: int, c: int, dtype: str, target_hot: bool) -> CaseSpec:
        def draw(generator):
            x, hot = inputs.large_logits(generator, m, c)
            t = inputs.make_targets(generator, m, c)
            if target_hot:
                t[2] = hot  # p is one-hot at the target: the row's dx is exactly 0
            elif int(t[2]) == hot:
                t[2] = (hot + 1) % c
            return inputs.case_of(x, t, 1.0, dtype=dtype)
        return CaseSpec(dims={"M": m, "C": c}, dtype=dtype, draw=draw,
                        label=f"({m}, {c}) {dtype}, logits at +-1e4 (rows: all near +1e4; all near -1e4; one logit "
                              f"at 1e4; alternating +-1e4)")

    def out_of_range(t: list[int]):
        return lambda values: {**values, "t": torch.tensor(t)}

    def fresh(generator):
        # Every round its own grad and ignored row, so a result cached by address is stale.
        x, t = inputs.random_case(generator, 4, 512, ignored=(int(torch.randint(4, (1,), generator=generator)),))
        grad = float(torch.empty((), dtype=torch.float64).uniform_(0.5, 2.5, generator=generator))
        return inputs.case_of(x, t, grad if int(torch.randint(2, (1,), generator=generator)) else -grad)

    def first_ignored(case: Case) -> list[tuple[int, ...]]:
        t = case.values["t"]
        points = [(0, int(t[0]))]  # the target logit of a valid row
        ignored = torch.nonzero(t == int(case.values.get("ignore_index", DEFAULT_IGNORE_INDEX))).flatten()
        if len(ignored):
            points.append((int(ignored[0]), 5))  # a logit of an ignored row: slope 0
        return points

    def row_name(placed, row: int) -> str:
        return f"row {row} ({'ignored' if int(placed['t'][row]) == placed['ignore_index'] else 'valid'}) of dx"

    mismatch = CaseSpec(dims={"M": 4, "C": 8}, draw=inputs.drawn(4, 8, ignored=()))
    return (
        ValueCheck("example_three_class", example),
        ValueCheck("autograd_fp32", (case(rows, 128), case(3, 1000, grad=0.37, ignored=()),
                                     case(rows + 1, 1025, grad=-2.5), case(2, 4096, grad=4.0, ignored=()),
                                     case(rows, 3071)), reference=autograd),
        ValueCheck("half_precision", tuple(case(m, c, dtype, grad=grad, key=f"{dtype}/{m}x{c}")
                                           for dtype in ("float16", "bfloat16")
                                           for (m, c), grad in (((rows, 1000), 1.0), ((3, 4097), -0.5),
                                                                ((2, LONG_ROW), 2.0)))),
        # Rows 0-2 of make_logits' cycle (spreads 1, 4, 0.1): the loss stays small (|L| < 10), so
        # the fp64 difference quotient is good to ~1e-10.
        CentralDifference("central_difference", (case(3, 37, grad=0.8, ignored=(1,)), case(2, 300, grad=-1.5, ignored=())),
                          output="dx", variable="x", at_placed=True, chosen=first_ignored,
                          h=CENTRAL_DIFFERENCE_H, atol=CENTRAL_DIFFERENCE_ATOL,
                          loss=lambda case, x: loss_fp64(x, case.values["t"], case.values["grad"],
                                                         int(case.values.get("ignore_index", DEFAULT_IGNORE_INDEX)))),
        # Exact for the fp32 x given: (sum p - 1) * grad / n_valid ~ 0 on valid rows, 0 on ignored rows.
        Invariant("row_sum_invariant", (case(rows + 2, 513), case(3, 8192, grad=-3.0)), output="dx",
                  what="rows sum to ~0 (ignored rows to 0)", where=row_name),
        ValueCheck("ignore_index", ignore_index, reference=autograd),
        ValueCheck("stability_large_logits", (large(4, 1000, "float32", True), large(4, 4097, "float32", False),
                                              large(4, 1000, "float16", True), large(4, 1000, "bfloat16", False))),
        ValueCheck("strided_inputs", (case(rows, 300, layouts={"x": "transposed", "t": "step"}),
                                      case(3, 1000, layouts={"x": "step"}),
                                      case(rows + 1, 129, layouts={"x": "transposed_step", "t": "step"}),
                                      case(rows, 257, "float16", layouts={"x": "transposed", "t": "step"}))),
        OutputContract("output_contract", (CaseSpec(dims={"M": 5, "C": 300}), CaseSpec(dims={"M": 3, "C": 257},
                                                                                       dtype="float16"))),
        Rejects("rejects_mismatch", (
            ("x (4, 8) with t of 5 targets", replace(mismatch, key="t_length"),
             lambda values: {**values, "t": torch.cat([values["t"], values["t"][:1]])}),
            ("t of shape (4, 1) (targets are 1-D)", CaseSpec(dims=mismatch.dims, draw=mismatch.draw, key="t_2d"),
             lambda values: {**values, "t": values["t"].unsqueeze(1)}),
            ("t of dtype float32 (class indices are int64)",
             replace(mismatch, key="t_float", dtypes={"t": "float32"}),
             lambda values: {**values, "t": values["t"].to(torch.float64)}),
            ("grad of shape (4,) (one per row; this function takes the 0-d gradient of the mean loss)",
             replace(mismatch, key="grad_per_row"),
             lambda values: {**values, "grad": torch.ones(4, dtype=torch.float64)}),
        ), other_device=("t", "grad")),
        RejectsRequiresGrad("rejects_requires_grad", {"M": 3, "C": 16}),
        # Targets that are neither ignore_index nor a class: C (one past the last class), -1 with
        # the default ignore_index, and -100 when ignore_index is -1 (then -100 is not special).
        Rejects("rejects_out_of_range_targets", (
            ("t = [0, 3, 8, 7] with C = 8", replace(mismatch, key="class_c"),
             out_of_range([0, 3, 8, 7])),
            ("t = [0, -1, 3, 7] with the default ignore_index -100",
             replace(mismatch, key="minus_one"), out_of_range([0, -1, 3, 7])),
            ("t = [0, -100, 3, 7] with ignore_index=-1",
             replace(mismatch, key="default_index_not_ignored"),
             lambda values: {**values, "t": torch.tensor([0, -100, 3, 7]), "ignore_index": -1}),
        )),
        ValueCheck("edge_shapes", tuple(case(m, c, ignored=range(3, m - 1, 5))
                                        for m, c in ((1, 1), (1, 1000), (7, 1), (3, 3), (257, 2), (2, 4097),
                                                     (2, LONG_ROW), (1, LONGEST_ROW + 3)))),
        FreshResults("fresh_results", CaseSpec(dims={"M": 4, "C": 512}, label="(4, 512) float32", draw=fresh)),
        TrainingStep("training_step", _training_problem),
        TritonKernel(),
    )


def _training_problem():
    from grader.assignments.softmax_cross_entropy_backward.training import problem
    return problem()


CHECK_NAMES = (
    "example_three_class",
    "autograd_fp32",
    "half_precision",
    "central_difference",
    "row_sum_invariant",
    "ignore_index",
    "stability_large_logits",
    "strided_inputs",
    "output_contract",
    "rejects_mismatch",
    "rejects_requires_grad",
    "rejects_out_of_range_targets",
    "edge_shapes",
    "fresh_results",
    "training_step",
    "triton_kernel",
)

HINTS = {
    "training_step": "your dx, as the backward of the loss of a small classifier trained on spiral data, made the "
                     "training go non-finite or away from the fp64 reference: look at the step and shape named (a "
                     "batch of 300 rows of 3 classes, as a training step gives it)",
    "example_three_class": "p=[0.25,0.60,0.15], target 1, grad 1, one row: dx = p - y = [0.25,-0.40,0.15]; "
                           "two rows: each row divided by n_valid = 2",
    "autograd_fp32": "dx = (softmax(x) - onehot(t)) * grad / n_valid per row, softmax over the last dimension, "
                     "n_valid = number of rows whose target is not ignore_index",
    "half_precision": "load x, convert to fp32, compute max, sum-exp and p - y in fp32; store in x's dtype",
    "central_difference": "the finite-difference slope of L = grad * F.cross_entropy(x, t) disagrees with your dx",
    "row_sum_invariant": "each valid row of dx must sum to ~0 (softmax sums to 1, the one-hot too); ignored rows to 0",
    "ignore_index": "rows whose target equals ignore_index (any int, default -100) get dx = 0 and are not "
                    "counted in n_valid; when every row is ignored dx is all zeros",
    "stability_large_logits": "subtract the row max before exp (exp(1e4) overflows fp32); keep the max and the "
                              "sum-exp consistent across chunks (rescale the sum when the max grows)",
    "strided_inputs": "load x with x.stride(0), x.stride(1) and t with t.stride(0); write dx contiguous",
    "output_contract": "return a fresh contiguous tensor of x's shape, dtype and device; never write into x, t or grad",
    "rejects_mismatch": "raise (ValueError/TypeError) unless x is 2-D float32/float16/bfloat16, t is 1-D int64 of "
                        "length M, grad is a 0-d float32 tensor, all on one device",
    "rejects_requires_grad": "this is an explicit backward function: raise if x or grad requires grad",
    "rejects_out_of_range_targets": "raise ValueError when a target is neither ignore_index nor in [0, C)",
    "edge_shapes": "handle C=1, M=1, odd C, many short rows and rows longer than one block (loop over the row)",
    "fresh_results": "compute from the values in memory on every call; do not cache by pointer",
    "triton_kernel": "the work must be done by @triton.jit kernels, n_valid included: the grader replays each "
                     "call's Triton launches alone on new x, t and grad, and the output must come out right "
                     "(a count or a sum made with PyTorch in the wrapper is not replayed)",
}

#: Added to the error of a call that crashed the process (a signal or a CUDA error).
CRASH_HINT = (
    " A crash inside a call is usually the kernel reading or writing outside its tensors: a missing or"
    " wrong mask, a target used as a column index without checking it (ignore_index is negative), or dx"
    " stored with x's strides instead of its own (it is a fresh contiguous tensor)."
)
