"""``softmax_cross_entropy_backward``: the numbers that make up the assignment's public contract.

Tolerances (each with where it comes from), the input constants of the checks, benchmark rows,
the check names in order and one hint per check. docs/checks.md states the same in words.

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

import torch

from grader.assignments.protocol import ScalarInput, TensorInput
from grader.assignments.softmax_cross_entropy_backward.oracle import DEFAULT_IGNORE_INDEX, EXPONENT_TERM
from grader.checks import Tolerance

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

TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(
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
    torch.float16: Tolerance(
        rtol=2e-5,
        vtol=2.0**-10,
        atol=2.0**-24,
        summary="fp32 arithmetic on the fp16 logits plus one fp16 ulp of the result",
        why="fp32 arithmetic on the rounded fp16 logits as for float32 (rtol 2e-5 x scale; the oracle is computed "
        "from the same rounded x), plus rounding dx to fp16: half an ulp, at most 2^-11 of the value; allow one "
        "ulp (vtol 2^-10 x |dx|). atol = 2^-24, the spacing of fp16 subnormals, for |dx| below 6.1e-5. A row "
        "max or sum-exp kept in fp16 is off by fp16 ulps of the whole row, which these terms do not cover",
    ),
    torch.bfloat16: Tolerance(
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

# Central difference on the loss L(x) = grad * F.cross_entropy(x, t, ignore_index) in fp64:
# (L(x + h e) - L(x - h e)) / 2h has truncation error h^2/6 |L'''| ~ 1e-11 and rounding error
# ~ eps64 * |L| / h ~ 2e-10 for the losses of the check (|L| < ~10): atol 1e-9.
CENTRAL_DIFFERENCE_H = 1e-5
CENTRAL_DIFFERENCE_ATOL = 1e-9

#: Logit magnitude of stability_large_logits: exp(1e4) overflows fp32 (max 3.4e38 = e^88.7),
#: exp(-1e4) underflows to 0; both are exact in fp16 and bf16 too (fp16 max 65504).
LARGE_LOGIT = 1e4
#: Row lengths of the long cases (edge_shapes, half_precision).
LONG_ROW = 65536
LONGEST_ROW = 131072

# Benchmark rows (M, C) x dtypes, timed on a GPU only (grader/benchmark): an LM head over a
# 32k vocabulary, a 1k-class classifier, many rows of 128 classes, a 128k vocabulary.
BENCHMARK_SHAPES: tuple[tuple[int, int], ...] = ((4096, 32768), (16384, 1024), (65536, 128), (1024, 131072))
BENCHMARK_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
#: Fraction of benchmark rows whose target is ignore_index (padding tokens of a batch).
BENCHMARK_IGNORED_FRACTION = 1.0 / 16

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
    "triton_kernel",
)

HINTS = {
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
