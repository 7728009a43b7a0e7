"""``gemm_epilogue``: the numbers that make up the assignment's public contract.

The assignment ("Next: fuse a GEMM epilogue"): for a (M, K), b (K, N) and bias (N,), all of one
dtype, float16 or bfloat16, each with its own strides (a transposed a or b included),

    out = gelu(a @ b + bias)        (M, N), a fresh contiguous tensor of the inputs' dtype

with the products accumulated in fp32 and the bias and GELU applied to the fp32 accumulator
before the one rounding to the output dtype (the "epilogue", fused into the GEMM kernel).

GELU is the tanh approximation, 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), which is what
cuBLASLt's GELU epilogue computes: PyTorch's torch._addmm_activation(bias, a, b, use_gelu=True)
runs cuBLASLt's CUBLASLT_EPILOGUE_GELU_BIAS, and where it cannot (the cuBLAS path, and builds
without the epilogue) it applies at::gelu_(result, "tanh") to keep the same function
(aten/src/ATen/native/cuda/Blas.cpp, addmm_out_cuda_impl). The erf GELU (F.gelu's default)
differs from it by up to 4.7e-4, and by 10% of the value near z = -3, where fp16 holds 11
significant bits: it fails.
"""

from __future__ import annotations

import torch

from grader.assignments.protocol import (
    Case,
    CaseSpec,
    CustomCheck,
    FreshResults,
    OutputContract,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorInput,
    TensorOutput,
    TritonKernel,
    ValueCheck,
)
from grader.checks.plan import PlannedCheck
from grader.checks.tolerance import Tolerance

# Error bound per element (grader.checks.tolerance.Tolerance.allowed, with oracle.gemm_gelu_fp64's scale
# and slack):
#
#     |got - expected| <= atol + rtol * scale + vtol * (|expected| + slack) + slack
#
# z = a @ b + bias is exact in fp64 from the rounded inputs (a product of two fp16 or bf16
# numbers has at most 22 significant bits, so it is exact in fp32 and fp64; fp64 sums of up to
# 2^20 of them lose under 2^-33 of sum|a b|). The arithmetic the assignment allows, and the
# error each step may make:
#   1. the products, exact in fp32 (above), accumulated in fp32 in any order and blocking
#      (tl.dot's MMA chains, split-K, atomics): a sum of K terms in any order is off by at most
#      (K - 1) u sum|terms| with u the unit roundoff (Higham, "Accuracy and Stability of
#      Numerical Algorithms", 2nd ed., eq. 4.4), and adding the bias one more: with
#      s = sum_k |a_ik| |b_kj|, z is off by at most K u' (s + |bias_j|), u' = 2^-23 (one ulp,
#      not half: tensor cores truncate the aligned products inside an MMA (Fasi, Higham,
#      Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021) and
#      the bound must hold for them). We use (K + 1) u' (s + |bias|);
#   2. optionally, the fp32 accumulator rounded to the output dtype before the bias is added,
#      and a @ b + bias rounded to it before GELU (what the unfused PyTorch expression, the
#      baseline, and torch.compile's extern-mm graph do): one ulp of each, r (|a @ b| + |z|),
#      r = INTERMEDIATE_ROUNDING (one ulp relative: the CPU interpreter truncates);
#   3. GELU evaluated in fp32 (the cubic, tanh or an exp/sigmoid form of it, 0.5 z (1 + t)):
#      the cubic and its product with sqrt(2/pi) have a relative error of 3u, which tanh'
#      (<= 1) carries into t; tanh itself (libdevice, or 2 sigmoid(2y) - 1 with the GPU's
#      ex2.approx) is off by a few u absolute; 0.5 z (1 + t) adds 2 roundings. Together under
#      8u |z|; we allow 16 ulps = 32u (GELU_EVALUATION_ULPS: 4x room);
#   4. the result rounded once to the output dtype: vtol x |value|.
# An error e in z moves gelu(z) by at most D e, D = max |gelu'| over [z - e, z + e] <=
# |gelu'(z)| + 0.8 e (mean value theorem, |gelu''| <= sqrt(2/pi) = 0.798, at 0): steps 1 and 2
# enter multiplied by D. So, in fp32 ulps (rtol = 2^-23):
#     scale = D (K + 1) (s + |bias|) + 16 |z|,        slack = D r (|a @ b| + |z|).
# D follows gelu's slope: where z << 0, gelu is flat and the bound is tight (|gelu'(-4)| =
# 3e-4), which is what makes the erf GELU visible there.
#
# Not allowed, and caught: an accumulator of the input dtype (each partial sum rounds to 11 or 8
# bits; the exact inputs of fp32_accumulation make the partial sums ~100 times the result, so
# the roundings show several times outside the bound), the erf GELU (above), GELU applied before the bias, or
# tanh as (e^2y - 1)/(e^2y + 1) (inf/inf = NaN once |z| > 11: inputs.LARGE_BIASES).
#
# The bound is a worst case, linear in K: at K = 4096 step 1 allows 2^-11 of s, about as much as
# fp16 rounding. That is why the accumulation check uses K = 256, where it allows 2^-15 of s.
TOLERANCES: dict[str, Tolerance] = {
    "float16": Tolerance(
        rtol=2.0**-23,
        atol=2.0**-24,
        vtol=2.0**-10,
        summary="fp32 accumulation (K+1 ulps of sum|a||b|, x gelu'), intermediate fp16 roundings, one rounding of the result",
        why="scale (in fp32 ulps) = D (K+1) (sum_k |a||b| + |bias|) + 16 |z|: the worst-case error of a K-term fp32 sum in "
        "any order with truncating additions (one ulp each) plus the bias, times D = |gelu'(z)| + 0.8 e (a bound on "
        "gelu' over the interval z lies in), and 16 ulps of |z| for evaluating GELU in fp32; slack = D 2^-10 "
        "(|a@b| + |z|) for rounding the accumulator and a@b + bias to fp16 before GELU (as the unfused baseline does); "
        "vtol 2^-10: one fp16 ulp for the result (half needed on the GPU; Triton's CPU interpreter truncates); atol "
        "2^-24: the fp16 subnormal spacing",
    ),
    "bfloat16": Tolerance(
        rtol=2.0**-23,
        atol=1e-30,
        vtol=2.0**-7,
        summary="fp32 accumulation (K+1 ulps of sum|a||b|, x gelu'), intermediate bf16 roundings, one rounding of the result",
        why="as float16, with bf16's ulp: slack = D 2^-7 (|a@b| + |z|), vtol 2^-7 (one bf16 ulp; 8 significant bits); "
        "bf16 has the fp32 exponent range, so the floor only absorbs flush-to-zero",
    ),
}
#: One ulp of each dtype relative to the value: the allowed intermediate rounding (slack).
INTERMEDIATE_ROUNDING: dict[str, float] = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)

INPUTS = (
    TensorInput("a", ("M", "K"), strided=("transposed", "step")),
    TensorInput("b", ("K", "N"), strided=("transposed", "step")),
    TensorInput("bias", ("N",), strided=("step",)),
)
OUTPUTS = (TensorOutput("out", ("M", "N"), TOLERANCES),)

# Shapes (M, N, K) of the checks. Triton specialises integer arguments divisible by 16 and each
# distinct block configuration compiles anew, so the checks reuse a few shapes, each there for
# a reason: none is a multiple of 16 except where said (a tile of any size 16..128 has a ragged
# edge in M, N and K), K = 1 (one product per output), a single row and a single column.
VALUE_SHAPES: tuple[tuple[int, int, int], ...] = ((16, 24, 32), (37, 19, 45), (5, 70, 100), (64, 64, 64))
EDGE_SHAPES: tuple[tuple[int, int, int], ...] = ((1, 1, 1), (7, 5, 1), (1, 33, 17), (65, 1, 3), (33, 65, 129))
#: K of the accumulation check: the worst-case fp32 bound (K + 1) 2^-23 s is then 2^-15 s, while
#: an fp16 accumulator's partial sums (~100x the result) round by up to 2^-12 of themselves; every
#: partial sum of the exact inputs stays below 2^9, exact in fp32.
ACCUMULATION_K = 256

# Benchmark rows (M, N, K), timed on a GPU only (grader/benchmark): a square GEMM large enough
# to be compute-bound, an MLP up-projection of 8192 tokens, and a skinny decode-like one.
BENCHMARK_SHAPES: tuple[tuple[int, int, int], ...] = ((4096, 4096, 4096), (8192, 11008, 4096), (128, 4096, 4096))
BENCHMARK_DTYPES: tuple[str, ...] = ("float16", "bfloat16")


def _case(m: int, n: int, k: int, dtype: str = "float16", exact: bool = False, label: str = "",
          **layouts: str) -> CaseSpec:
    return CaseSpec(dims={"M": m, "N": n, "K": k}, dtype=dtype, layouts=layouts, exact=exact, label=label)


def _example() -> Case:
    """a = [[1, 2]], b = [[1, 0], [0.5, -1]], bias = [0, -0.5]: z = [2, -2.5],
    out = gelu_tanh(z) = [1.954597694, -0.015084266] (exact in fp64; fp16 rounds the output)."""
    from grader.assignments.gemm_epilogue.oracle import gelu_tanh
    z = torch.tensor([[2.0, -2.5]], dtype=torch.float64)
    return Case(values={"a": torch.tensor([[1.0, 2.0]], dtype=torch.float64),
                        "b": torch.tensor([[1.0, 0.0], [0.5, -1.0]], dtype=torch.float64),
                        "bias": torch.tensor([0.0, -0.5], dtype=torch.float64)},
                expected={"out": gelu_tanh(z)})


def checks(device: str) -> tuple:
    """The checks in order. The shapes are the same on the CPU interpreter and a GPU (the
    interpreter runs one numpy matmul per tile, so these shapes take seconds there); on the CPU
    the bfloat16 cases of the value checks are left out (GPU_ONLY_CHECKS says why), and
    bfloat16_values is skipped whole; output_contract keeps its bfloat16 call (the dtype, shape
    and layout of a bf16 output are judged on the CPU too)."""
    declared = (
        ValueCheck("example_small", (_case(1, 2, 2, label="a=[[1,2]], b=[[1,0],[0.5,-1]], bias=[0,-0.5]"),),
                   example=_example),
        ValueCheck("float16_values", tuple(_case(m, n, k) for m, n, k in VALUE_SHAPES)),
        ValueCheck("bfloat16_values", tuple(_case(m, n, k, "bfloat16") for m, n, k in VALUE_SHAPES)),
        ValueCheck("epilogue_values", (_case(8, 40, 24), _case(3, 200, 16, "bfloat16"))),
        ValueCheck("fp32_accumulation", (_case(16, 24, ACCUMULATION_K, exact=True),
                                         _case(16, 24, ACCUMULATION_K, "bfloat16", exact=True))),
        ValueCheck("strided_inputs", (
            _case(37, 19, 45, a="transposed"),
            _case(37, 19, 45, b="transposed"),
            _case(16, 24, 32, a="transposed", b="transposed", bias="step"),
            _case(5, 70, 100, a="step", b="step"),
        )),
        # A bfloat16 call on the CPU too: its dtype, shape and layout are seen there although its
        # values are judged on a GPU only (a kernel that hard-codes an fp16 output fails here).
        OutputContract("output_contract", (_case(16, 24, 32), _case(5, 7, 9), _case(5, 7, 9, "bfloat16"))),
        RejectsMismatch("rejects_mismatch", {"M": 5, "N": 7, "K": 9}, dtype="float16"),
        RejectsRequiresGrad("rejects_requires_grad", {"M": 5, "N": 7, "K": 9}, dtype="float16"),
        ValueCheck("edge_shapes", tuple(_case(m, n, k) for m, n, k in EDGE_SHAPES)),
        FreshResults("fresh_results", _case(16, 24, 32)),
        TritonKernel(),
    )
    if device != "cpu":
        return declared
    return tuple(_skipped(c.name) if c.name in GPU_ONLY_CHECKS else
                 ValueCheck(c.name, tuple(s for s in c.cases if s.dtype in CPU_DTYPES), c.reference, c.example)
                 if isinstance(c, ValueCheck) else c for c in declared)


def _skipped(name: str) -> CustomCheck:
    """A check reported as skipped on the CPU interpreter, with the reason."""
    reason = ("not run on the CPU interpreter: Triton 3.6's interpreter multiplies the raw bits of bfloat16 operands "
              "in tl.dot (triton-lang/triton#11584), so a correct bf16 kernel cannot pass there; it runs on a GPU")
    return CustomCheck(name, lambda plan, declared: PlannedCheck(name, [], _never_evaluated, skip_reason=reason))


def _never_evaluated(check, evidence):
    raise AssertionError(f"{check.name} is skipped on the CPU and never evaluated")

CHECK_NAMES = (
    "example_small",
    "float16_values",
    "bfloat16_values",
    "epilogue_values",
    "fp32_accumulation",
    "strided_inputs",
    "output_contract",
    "rejects_mismatch",
    "rejects_requires_grad",
    "edge_shapes",
    "fresh_results",
    "triton_kernel",
)
#: Checks that run only on a GPU: Triton 3.6's CPU interpreter multiplies the raw bits of
#: bfloat16 operands in tl.dot (triton-lang/triton#11584: "we just don't support it yet"), so a
#: correct bf16 kernel cannot pass there. The bf16 cases of epilogue_values and
#: fp32_accumulation are left out on the CPU for the same reason (CPU_DTYPES).
GPU_ONLY_CHECKS = ("bfloat16_values",)
#: Call dtypes the CPU interpreter can run (every other case is dropped there).
CPU_DTYPES = ("float16",)

HINTS = {
    "example_small": "a=[[1,2]], b=[[1,0],[0.5,-1]], bias=[0,-0.5]: z=[2,-2.5], out=gelu(z)=[1.9546,-0.015084]",
    "float16_values": "accumulate tl.dot in an fp32 accumulator, add bias[col] and apply the tanh GELU to it, and "
                      "store out in the inputs' dtype",
    "bfloat16_values": "the same kernel in bfloat16: accumulate in fp32, round only the result",
    "epilogue_values": "GELU is the tanh approximation 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) of "
                       "z = acc + bias[col]; write tanh in a form that cannot overflow (e.g. 2 sigmoid(2y) - 1)",
    "fp32_accumulation": "keep the accumulator in fp32 across the whole K loop (tl.zeros(..., dtype=tl.float32)); "
                         "round to the output dtype once, at the end",
    "strided_inputs": "load a with a.stride(0), a.stride(1) and b with b.stride(0), b.stride(1) (a transposed b has "
                      "stride (1, K)), and bias with bias.stride(0)",
    "output_contract": "return a fresh contiguous (M, N) tensor of the inputs' dtype and device; never write into "
                       "a, b or bias",
    "rejects_mismatch": "raise (ValueError/TypeError) unless a is (M, K), b is (K, N) and bias is (N,), all of one "
                        "dtype (float16 or bfloat16) on one device",
    "rejects_requires_grad": "this is an explicit forward kernel with no autograd: raise if an input requires grad",
    "edge_shapes": "mask the loads of a and b in M, N and K (other=0) and the store of out in M and N: K = 1, a "
                   "single row, a single column and shapes that are no multiple of any block",
    "fresh_results": "compute from the values in memory on every call; do not cache by pointer",
    "triton_kernel": "the work must be done by @triton.jit kernels: the grader replays each call's Triton "
                     "launches alone, on new inputs, and the output must come out right",
}

#: A check's hint is shown only when these passed too (grader.checks.evaluate.hint_for).
HINT_REQUIRES: dict[str, tuple[str, ...]] = {
    "epilogue_values": ("float16_values",),
    "fp32_accumulation": ("float16_values",),
    "strided_inputs": ("float16_values",),
    "edge_shapes": ("float16_values",),
    "fresh_results": ("float16_values",),
}

#: Added to the error of a call that crashed the process (a signal or a CUDA error).
CRASH_HINT = (
    " A crash inside a call is usually the kernel reading or writing outside its tensors: a load of a or b"
    " without a mask on the last tile in M, N or K, or out stored with a's strides instead of its own."
)
