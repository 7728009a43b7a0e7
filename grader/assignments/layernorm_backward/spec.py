"""``layernorm_backward``: the numbers and declarations that make up the assignment's contract.

The assignment: the backward pass of y = (x - mean) * rstd * w + b over rows of length N, from
the forward's saved statistics. Inputs, all given: dy = dL/dy (M, N), x (M, N), w (N,) of one
dtype (float32, float16 or bfloat16, each tensor with its own strides), and mean (M,) and rstd
(M,) in float32 (rstd = 1/sqrt(var + eps), as Triton's tutorial 05 and PyTorch's CUDA kernels
save them; eps is not an input: it is inside rstd). Outputs, a tuple (dx, dw, db) of fresh
contiguous tensors of x's dtype:

    xhat = (x - mean) * rstd,  wdy = w * dy
    c1 = sum_j(xhat * wdy) / N,  c2 = sum_j(wdy) / N                  (per row)
    dx = (wdy - (xhat * c1 + c2)) * rstd                              (M, N)
    dw = sum_i dy * xhat,  db = sum_i dy                              (N,), across rows

dw and db reduce across rows: partial buffers under a lock (tutorial 05), atomics, or a second
pass; each grades alike (scratch buffers are replayed as the wrapper prepared them).
"""

from __future__ import annotations

from grader.assignments.protocol import (
    CaseSpec,
    CentralDifference,
    FreshResults,
    Invariant,
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
# the scales of oracle.layernorm_backward_fp64 (the magnitudes of the terms and reductions that
# make each element). The arithmetic the assignment allows: x, dy and w converted to fp32 on
# load (exact), xhat and wdy in fp32 (2 roundings, relative to |xhat|, |wdy|), the row sums c1
# and c2 and the column sums dw and db in fp32 in any order and blocking (lock-protected partial
# rows, atomics in any order, a tree in a second kernel), and one rounding of each result to
# the output dtype. fp32 errors, as multiples of u = 2^-24 of the scale: a blocked sum of up to
# 65536 terms, worst case (log2(block) + chunks) ~ 50 u; a sequential sum of M terms (atomics
# across M rows) has a worst case of M u but, with rounding to nearest, a standard deviation of
# sqrt(M/12) u: 19 u at M = 4096, the benchmark's rows, where 2e-5 (335 u) is 18 standard
# deviations. So rtol 2e-5 of the scale is 6x the blocked worst case.
# The scales use (|x| + |mean|) rstd, the magnitudes of xhat's two terms, for |xhat|: the saved
# statistics are fp32 roundings, and a kernel that recomputes the mean from x differs by that.
# Not allowed, and caught: the xhat term or the mean term left out of dx (the invariants),
# lanes past N left unmasked in the row sums, dividing by rstd, dw/db from one row only (a
# store race).
_FP32 = Tolerance(
    rtol=2e-5, atol=1e-30,
    summary="fp32 arithmetic on the given inputs: row and column sums in any order",
    why="fp32 vs the fp64 oracle of the given inputs: xhat and w*dy in fp32 (2 roundings), row sums c1, c2 over N "
        "and column sums dw, db over M in any order or blocking (lock-protected partial rows, atomics, a second "
        "pass): worst case ~50 ulps of the terms' magnitudes for blocked sums, 18 standard deviations of an "
        "atomic sum over M = 4096 rows; 2e-5 = 335 ulps of the scale. atol 1e-30 only absorbs flush-to-zero",
)
_FP16 = Tolerance(
    rtol=2e-5, atol=2.0**-24, vtol=2.0**-10,
    summary="fp32 arithmetic, one rounding of the result to fp16",
    why="fp32 arithmetic on the fp16 inputs as given (converted exactly), as for float32, plus one fp16 ulp for "
        "rounding the result (half needed on the GPU; Triton's CPU interpreter truncates); atol 2^-24 is fp16's "
        "subnormal spacing",
)
_BF16 = Tolerance(
    rtol=2e-5, atol=1e-30, vtol=2.0**-6,
    summary="fp32 arithmetic, one rounding of the result to bf16",
    why="fp32 arithmetic on the bf16 inputs as given, plus two bf16 ulps for the rounding of the result (8 "
        "significant bits: the GPU rounds to nearest, Triton's CPU interpreter truncates: up to one ulp; two "
        "for room, as softmax_backward); bf16 has the fp32 exponent range",
)
TOLERANCES: dict[str, Tolerance] = {"float32": _FP32, "float16": _FP16, "bfloat16": _BF16}

_ROWS = ("transposed", "step")
INPUTS = (
    TensorInput("dy", ("M", "N"), strided=_ROWS),
    TensorInput("x", ("M", "N"), strided=_ROWS),
    TensorInput("w", ("N",), strided=("step",)),
    TensorInput("mean", ("M",), dtype="float32", strided=("step",)),
    TensorInput("rstd", ("M",), dtype="float32", strided=("step",)),
)
OUTPUTS = (
    TensorOutput("dx", ("M", "N"), TOLERANCES),
    TensorOutput("dw", ("N",), TOLERANCES),
    TensorOutput("db", ("N",), TOLERANCES),
)

# Row lengths: not multiples of 16 (Triton specialises integers divisible by 16) except where
# said, one past a power of two (a block plus a masked remainder), and 65537, longer than any
# block a looped kernel holds. Each distinct N, dtype and layout compiles anew on a GPU, so the
# checks reuse this small set.
ROW_LENGTHS = {"one": 1, "odd": 37, "medium": 300, "just_over_1024": 1025, "block": 4096, "long": 65537}

# Benchmark rows (M, N), timed on a GPU only: the tutorial's M = 4096 with hidden sizes 1024,
# 4096 and 8192.
BENCHMARK_SHAPES: tuple[tuple[int, int], ...] = ((4096, 1024), (4096, 4096), (4096, 8192))
BENCHMARK_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")


def _case(m: int, n: int, dtype: str = "float32", **layouts: str) -> CaseSpec:
    return CaseSpec(dims={"M": m, "N": n}, dtype=dtype, layouts=layouts)


def checks(device: str) -> tuple:
    """The checks in order; the CPU interpreter gets 4 rows where a GPU gets 64."""
    rows = 4 if device == "cpu" else 64
    lengths = ROW_LENGTHS
    half = tuple(_case(m, n, dtype) for dtype in ("float16", "bfloat16")
                 for m, n in ((rows, lengths["medium"]), (3, lengths["just_over_1024"]), (2, lengths["long"])))
    return (
        ValueCheck("autograd_fp32", (_case(rows, lengths["medium"]), _case(3, lengths["just_over_1024"]),
                                     _case(rows + 1, lengths["block"]), _case(2, lengths["odd"])),
                   reference=lambda case, values: _autograd(case, values)),
        ValueCheck("half_precision", half),
        CentralDifference("central_difference_dx", (_case(3, lengths["odd"]),), output="dx", variable="x",
                          loss=lambda case, x: _loss(case, x=x)),
        CentralDifference("central_difference_dw", (_case(3, lengths["odd"]),), output="dw", variable="w",
                          loss=lambda case, w: _loss(case, w=w)),
        Invariant("dx_row_sum", (_case(rows, lengths["just_over_1024"]), _case(3, lengths["block"])), output="dx",
                  what="sum_j dx = 0 per row (layer norm is shift-invariant)"),
        Invariant("dx_xhat_sum", (_case(rows, lengths["just_over_1024"]), _case(3, lengths["block"])), output="dx",
                  weights=lambda case, values: _xhat(values),
                  what="sum_j dx * xhat = 0 per row (layer norm is scale-invariant; eps leaves ~eps rstd^2)"),
        ValueCheck("strided_inputs", (
            _case(rows, lengths["medium"], dy="transposed", x="step", w="step"),
            _case(3, lengths["just_over_1024"], dy="step", x="transposed", mean="step", rstd="step"),
            _case(rows + 1, lengths["odd"], "float16", dy="transposed", x="transposed", w="step"),
        )),
        OutputContract("output_contract", (_case(5, lengths["medium"]), _case(3, 257, "float16"))),
        RejectsMismatch("rejects_mismatch", {"M": 3, "N": 40}),
        RejectsRequiresGrad("rejects_requires_grad", {"M": 3, "N": 40}),
        ValueCheck("edge_shapes", (_case(1, 1), _case(7, 1), _case(1, lengths["odd"]), _case(3, 3), _case(257, 2),
                                   _case(2, 4097), _case(1, lengths["long"]))),
        FreshResults("fresh_results", _case(4, 512)),
        TritonKernel(),
    )


def _autograd(case, values):
    from grader.assignments.layernorm_backward.oracle import autograd_fp64
    return autograd_fp64(values["x"], values["w"], case.hidden["b"], values["dy"])


def _loss(case, **perturbed):
    from grader.assignments.layernorm_backward.oracle import loss_fp64
    given = {"x": case.values["x"], "w": case.values["w"], **perturbed}
    return loss_fp64(given["x"], given["w"], case.hidden["b"], case.values["dy"])


def _xhat(values):
    from grader.assignments.layernorm_backward.oracle import normalised
    return normalised(values["x"], values["mean"], values["rstd"])


CHECK_NAMES = ("autograd_fp32", "half_precision", "central_difference_dx", "central_difference_dw", "dx_row_sum",
               "dx_xhat_sum", "strided_inputs", "output_contract", "rejects_mismatch", "rejects_requires_grad",
               "edge_shapes", "fresh_results", "triton_kernel")
GPU_ONLY_CHECKS: tuple[str, ...] = ()

HINTS = {
    "autograd_fp32": "dx = (w*dy - (xhat*c1 + c2)) * rstd with xhat = (x - mean) * rstd, c1 = mean_j(xhat*w*dy), "
                     "c2 = mean_j(w*dy); dw = sum over rows of dy*xhat, db = sum over rows of dy",
    "half_precision": "convert x, dy and w to fp32 on load and keep every sum (c1, c2 and the partial sums of dw and "
                      "db) in fp32; round only the results to the input dtype",
    "central_difference_dx": "the finite-difference slope of L = sum(dy * layer_norm(x)) in x disagrees with your dx",
    "central_difference_dw": "the finite-difference slope of L in w disagrees with your dw: dw = sum_i dy * xhat",
    "dx_row_sum": "each row of dx must sum to ~0: keep the c2 = mean_j(w*dy) term, over the whole row",
    "dx_xhat_sum": "sum_j dx * xhat must be ~0 per row: keep the xhat * c1 term, with c1 over the whole row, and "
                   "mask the lanes past N (xhat there is -mean*rstd, not 0)",
    "strided_inputs": "load dy and x with their own row and column strides, w, mean and rstd with their own strides",
    "output_contract": "return fresh contiguous dx (M, N), dw (N,), db (N,) in x's dtype; never write into the inputs",
    "rejects_mismatch": "raise (ValueError/TypeError) when shapes, dtypes or devices of dy, x, w disagree, or mean "
                        "and rstd are not float32 (M,)",
    "rejects_requires_grad": "this is an explicit backward: raise if an input requires grad",
    "edge_shapes": "handle N = 1, M = 1, odd N, rows longer than one block (loop over the row), and dw/db over "
                   "many rows (257)",
    "fresh_results": "compute from the values in memory on every call; zero your dw/db buffers and locks on every "
                     "call; do not cache by pointer",
    "triton_kernel": "the work must be done by @triton.jit kernels (dw and db included: a final sum in PyTorch is "
                     "not replayed); the grader replays each call's Triton launches alone, on new inputs",
}
HINT_REQUIRES: dict[str, tuple[str, ...]] = {
    "half_precision": ("autograd_fp32",),
    "central_difference_dx": ("autograd_fp32",),
    "central_difference_dw": ("autograd_fp32",),
    "dx_row_sum": ("autograd_fp32",),
    "dx_xhat_sum": ("autograd_fp32",),
    "strided_inputs": ("autograd_fp32",),
    "edge_shapes": ("autograd_fp32",),
    "fresh_results": ("autograd_fp32",),
}
CRASH_HINT = (" A crash inside a call is usually a kernel reading or writing outside its tensors (a missing mask on"
              " the last block of a row), or a spin lock that never sees its release.")
