"""``softmax_backward``: the numbers that make up the assignment's public contract.

Tolerances (each with where it comes from), row lengths of the checks, benchmark rows, the
check names in order and one hint per check. docs/checks.md states the same in words.

The assignment (workshop I2, "Softmax backward without a dense Jacobian"): for probabilities
y = softmax(x) and upstream gradient g = dL/dy, both (M, N) with their own strides, dtype
float32, float16 or bfloat16,

    dot[r] = sum_j y[r, j] * g[r, j]          (one reduction per row, in fp32)
    dx[r, j] = y[r, j] * (g[r, j] - dot[r])   (a fresh contiguous tensor of y's dtype)

which is J^T g for the softmax Jacobian J = diag(y) - y y^T, without forming J.
"""

from __future__ import annotations

import torch

from grader.checks import Tolerance

# Error bound per element: |got - expected| <= atol + rtol * scale + vtol * |expected|, with
# scale[r, j] = |y| * (|g| + |dot| + sum_k |y*g|) over row r: the magnitudes of the terms that
# make dx[r, j] (the product, the subtraction and the row reduction), so the bound follows each
# row's own size; dx is O(1/N) on a row of length N, and a fixed atol would let all-zeros pass.
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
# Long rows for edge_shapes and half_precision (N >= 65536).
LONG_ROW = 65536
LONGEST_ROW = 131072

# Benchmark rows (M, N) x dtypes, timed on a GPU only (grader/benchmark).
BENCHMARK_SHAPES: tuple[tuple[int, int], ...] = ((65536, 256), (4096, 4096), (1024, 32768), (256, 131072))
BENCHMARK_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")

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
    "triton_kernel": "the work must be done by @triton.jit kernels: the grader replays each call's Triton "
                     "launches alone, on new inputs, and the output must come out right",
}

#: Added to the error of a call that crashed the process (a signal or a CUDA error).
CRASH_HINT = (
    " A crash inside a call is usually the kernel reading or writing outside its tensors: a missing or"
    " wrong mask, or dx stored with y's or g's strides instead of its own (it is a fresh contiguous tensor)."
)
