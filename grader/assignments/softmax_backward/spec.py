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

from grader.assignments.protocol import TensorInput
from grader.checks.tolerance import Tolerance

# Error bound per element:
#
#     |got - expected| <= atol + rtol * scale + vtol * (|expected| + slack) + slack
#
# scale[r, j] = |y| * (|g| + |dot| + sum_k |y*g|) over row r: the magnitudes of the terms that
# make dx[r, j] (the product, the subtraction and the row reduction), so the bound follows each
# row's own size; dx is O(1/N) on a row of length N, and a fixed atol would let all-zeros pass.
#
# The arithmetic the assignment allows (its text: "convert both to FP32 before multiplying;
# reduce their product once", and "Triton promotes FP16 reductions to FP32 on its own, so the
# checker cannot detect a missing conversion"), and the error each step may make:
#   1. the products y*g, formed in fp32 or rounded to the input dtype (PyTorch's CUDA softmax
#      backward rounds them: p = fl(y*g), dx = p - y*sum(p)). Rounding p[j] to the input dtype
#      moves dx[j] by dp[j] and dot by sum_k dp[k]: slack = |dp[j]| + |y[j]| |sum_k dp[k]|,
#      computed exactly from the inputs (oracle.product_rounding_slack), 0 where the products
#      are exact. A worst-case bound instead (unit roundoff u x scale: u = 2^-11 for fp16, 2^-8
#      for bf16, i.e. 25x and 200x rtol) would let a dot accumulated in half precision pass
#      (docs/checks.md has the measurements);
#   2. the row sum in fp32, in any order and blocking: rtol x scale;
#   3. one rounding of the result to the output dtype: vtol x |value|, where the value the
#      arithmetic produced lies within slack of the exact one.
# Not allowed, and caught because their errors are far outside these terms: a dot accumulated
# in fp16/bf16 (each addition rounds to an ulp of the running sum), and g - dot computed in
# fp16/bf16 (dot rounded to the input dtype: up to half an ulp of |dot| on every element). The
# half_precision check's exact rows (inputs.exact_case) make the products exact (slack 0), so
# there the bound is fp32 rounding plus the final rounding only.
#: The call's arguments in order (grader.assignments.protocol): probabilities y and upstream
#: gradient g, both (M, N) in the call's dtype.
INPUTS = (TensorInput("y", ("M", "N")), TensorInput("g", ("M", "N")))

TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(
        rtol=2e-5,
        atol=1e-30,
        summary="fp32 rounding of y plus a blocked fp32 sum, with 6x room",
        why="fp32 vs fp64 oracle: rounding y to fp32 (1 ulp = 6e-8) plus a blocked fp32 sum of up "
        "to 65536 products, worst case (log2(block) + chunks) ulps ~ 50 ulps = 3e-6; 2e-5 leaves 6x room. "
        "atol 1e-30 only absorbs flush-to-zero below the fp32 normal range (1.2e-38). Rounding the "
        "products to fp32 (slack) is ~1e-8 of |y*g|",
    ),
    torch.float16: Tolerance(
        rtol=2e-5,
        vtol=2.0**-10,
        atol=2.0**-24,
        summary="products in fp16 or fp32, fp32 sum, one rounding of the result to fp16",
        why="the arithmetic the assignment allows: products y*g in fp32 or rounded to fp16 (the exact "
        "effect of that rounding, |dp| + |y| |sum dp|, is added per element as slack), an fp32 row sum "
        "(rtol 2e-5 x scale, as for float32) and one rounding of the result to fp16: half an ulp (2^-11) "
        "to nearest, under one ulp toward zero; allow one ulp (vtol 2^-10 x |value|). atol = 2^-24, the "
        "spacing of fp16 subnormals. A dot accumulated in fp16, or g - dot in fp16, is off by ulps of "
        "|dot|, which these terms do not cover",
    ),
    torch.bfloat16: Tolerance(
        rtol=2e-5,
        vtol=2.0**-6,
        atol=1e-30,
        summary="products in bf16 or fp32, fp32 sum, one rounding of the result to bf16",
        why="the arithmetic the assignment allows: products y*g in fp32 or rounded to bf16 (their exact "
        "effect is added per element as slack), an fp32 row sum (rtol 2e-5 x scale) and one rounding of "
        "the result to bf16 (8 significant bits, one ulp is at most 2^-7 of the value). The GPU rounds to "
        "nearest (half an ulp) but Triton's CPU interpreter truncates (up to one ulp); allow two ulps "
        "(vtol 2^-6). bf16 has the fp32 exponent range, so the floor is the fp32 one",
    ),
}
# Central difference: (L(x+h e_j) - L(x-h e_j)) / 2h with h = 1e-5 in fp64 has truncation error
# h^2/6 |L'''| ~ 2e-11 and rounding error eps64 |L| / h ~ 2e-11 for the O(1) losses used here.
CENTRAL_DIFFERENCE_H = 1e-5
CENTRAL_DIFFERENCE_ATOL = 1e-9

# Row lengths N of the checks. Every distinct N (with each dtype and layout) is a new Triton
# specialisation, compiled on a GPU before its first call: a kernel with a whole row in one
# block (BLOCK = next_power_of_2(N)) compiles one block size per length, an autotuned kernel
# compiles and times every config per new key. So the checks reuse this small set, each length
# there for a reason:
ROW_LENGTHS: dict[str, int] = {
    "single_column": 1,
    "tiny_odd": 3,
    "odd": 37,  # not a multiple of 16 (Triton specialises integers divisible by 16)
    "medium_odd": 300,
    "between_powers": 1000,
    "just_over_1024": 1025,
    "block": 4096,  # exactly a common block size
    "just_over_block": 4097,  # one element past it: loop bounds and masks
    "long": 65536,  # longer than any single block a looped kernel uses
}
LONG_ROW = ROW_LENGTHS["long"]
# The longest row is 65536: a whole-row block of 65536 elements compiles in 7 s (fp32) and 13 s
# (fp16) of CPU at 4 warps, under 1 s at 32 (Triton 3.6, sm_90, ptxas on a CPU; docs/checks.md).
# The 131075 row the checks had before needed a 262144-element block: 239 s of CPU at 4 warps,
# and 125 s of one call on the H200 host, for a kernel that is otherwise correct. A kernel that
# caps its block at 65536 and does not loop is therefore not caught (docs/checks.md, "What the
# checks cannot see").

# large_offsets (GPU only): rows that start past 2^31 elements, in float16 (4.3 GB per tensor).
# 65536 rows of 32768 elements are exactly 2^31 elements, so rows 65536..65544 start past it.
LARGE_OFFSET_SHAPE = (65545, 32768)
LARGE_OFFSET_DTYPE = torch.float16
#: Distinct rows of the tiled large_offsets inputs (row r holds pattern row r % 8).
LARGE_OFFSET_PATTERN_ROWS = 8
#: The output rows the parent compares: the first rows, the last rows below 2^31 elements, the
#: first rows past it and the last row.
LARGE_OFFSET_SAMPLE_ROWS = (0, 1, 65534, 65535, 65536, 65537, 65543, 65544)
#: First row whose offset is at least 2^31 elements.
LARGE_OFFSET_FIRST_ROW_PAST = 2**31 // LARGE_OFFSET_SHAPE[1]
#: GPU memory large_offsets needs: y, g and dx (3 x 4.3 GB) plus 8 GiB for the submission's own
#: buffers and the CUDA context; on a GPU with less the check is skipped with a note.
LARGE_OFFSET_MIN_GPU_BYTES = 3 * LARGE_OFFSET_SHAPE[0] * LARGE_OFFSET_SHAPE[1] * 2 + 8 * 2**30

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
    "large_offsets",
)
#: Checks that run only on a GPU (skipped, with a note, on the CPU interpreter).
GPU_ONLY_CHECKS = ("large_offsets",)

HINTS = {
    "example_two_element": "y=[0.25,0.75], g=[2,-1]: dot=-0.25, dx=[0.5625,-0.5625]",
    "autograd_fp32": "dx = y * (g - sum(y*g)) per row, with the sum over the last dimension",
    "half_precision": "upcast y and g to fp32 and keep dot and g - dot in fp32; store the result in the input dtype",
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
    "large_offsets": "compute offsets in int64 (tl.program_id(0).to(tl.int64) * stride): row * row_stride "
                     "overflows int32 once a tensor has more than 2^31 elements",
}

#: The checks whose passing makes a check's own hint likely to be the right one: when one of
#: them failed too, the same mistake shows on simpler inputs, and the failure message points
#: there instead (grader.checks.evaluate.hint_for).
HINT_REQUIRES: dict[str, tuple[str, ...]] = {
    "half_precision": ("autograd_fp32",),
    "central_difference": ("autograd_fp32",),
    "row_sum_invariant": ("autograd_fp32",),
    "strided_inputs": ("autograd_fp32", "half_precision"),
    "edge_shapes": ("autograd_fp32",),
    "fresh_results": ("autograd_fp32",),
    "large_offsets": ("autograd_fp32", "half_precision", "edge_shapes"),
}

#: Added to the error of a call that crashed the process (a signal or a CUDA error).
CRASH_HINT = (
    " A crash inside a call is usually the kernel reading or writing outside its tensors: a missing or"
    " wrong mask, or dx stored with y's or g's strides instead of its own (it is a fresh contiguous tensor)."
)
