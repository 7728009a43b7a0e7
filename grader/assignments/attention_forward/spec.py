"""``attention_forward``: the numbers and declarations that make up the assignment's contract.

The assignment: causal softmax attention, FlashAttention style, as Triton kernels:

    out[b, h, i] = sum_{j <= i} softmax_j(q[b, h, i] . k[b, h, j] / sqrt(D)) v[b, h, j]

q, k, v of shape (B, H, S, D), one dtype (float16 or bfloat16), D in {16, 32, 64, 128}, S any
length (not a multiple of the block), each tensor with its own strides (a (B, S, H, D) buffer
viewed as (B, H, S, D), a transposed k, stepped strides). Returns a fresh contiguous
(B, H, S, D) tensor of the inputs' dtype. The scores never leave the chip in a FlashAttention
kernel (an online softmax over key blocks); any kernel that computes the same numbers grades
alike.

The tolerance (oracle.attention_fp64 computes its scale and slack). The arithmetic allowed:
the inputs converted exactly; the scores q.k in fp32 (tl.dot of the input dtype: products
exact, sums of D terms in any order: (D + 2) fp32 ulps of the terms' magnitudes M = max_j
sum_d |q_id k_jd| / sqrt(D)), scaled in fp32, possibly by log2(e) for exp2 (one more ulp);
exp or exp2 in fp32 (a few ulps of each p); the running maximum and sum of an online softmax
and the rescales of the accumulator (a few fp32 roundings per key block); P rounded to the
input dtype before the P @ V tl.dot, as FlashAttention does (one ulp r of the input dtype
relative to each p: r = 2^-10 fp16, 2^-7 bf16), and q times the softmax scale rounded to the
input dtype before the q k^T dot, as FlashAttention-2's Triton kernel does (r relative to
each score: r M); the P @ V sum of S terms in fp32 in any blocking; one division by the row
sum; one rounding of the result to the output dtype. A perturbation e_j of the scores moves
the output by at most max|e| sum_j p_j |v_j - out| <= max|e| W, W = P|v| + |out|; a relative
perturbation of each p by r moves it by at most r W. So, per element, in fp32 ulps (rtol
2^-23, twice the unit roundoff, for room):

    scale = (S + 16) A + (D + 8) M W + 4 W,      A = P |v|
    slack = r (1 + M) W                          (the roundings to the input dtype)
    vtol  = one ulp of the output dtype          (the final rounding; the interpreter truncates)

Not allowed, and caught (tests/corpus/attention_forward/wrong): scores without the causal mask,
without the 1/sqrt(D) scale, an online softmax whose accumulator is not rescaled when the
running maximum rises, the keys past S loaded without a mask (the NaN the grader puts around
every tensor reaches the output), the key loop stopped at the diagonal block's start (the
diagonal block left out), strides ignored, P @ V accumulated in the input dtype.
"""

from __future__ import annotations

import torch

from grader.assignments.protocol import (
    Bounds,
    CaseSpec,
    CustomCheck,
    FreshResults,
    OutputContract,
    Rejects,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorInput,
    TensorOutput,
    TritonKernel,
    ValueCheck,
)
from grader.checks.plan import Layout, PlannedCheck
from grader.checks.tolerance import Tolerance

_FP16 = Tolerance(
    rtol=2.0**-23, atol=2.0**-24, vtol=2.0**-10,
    summary="fp32 scores, online softmax and P @ V; P rounded to fp16; one rounding of the result",
    why="fp32 vs the fp64 oracle of the rounded inputs, per element in fp32 ulps: (S + 16) A for the P @ V sum and "
        "the online softmax's rescales, (D + 8) M W for the score errors, 4 W for exp (A = P|v|, W = A + |out|, "
        "M the row's largest score magnitude); slack 2^-10 (1 + M) W for P (and q times the scale) rounded to fp16 "
        "before the dots; one fp16 ulp (2^-10 of the value) for the result's rounding; atol 2^-24 is fp16's "
        "subnormal spacing",
)
_BF16 = Tolerance(
    rtol=2.0**-23, atol=1e-30, vtol=2.0**-7,
    summary="fp32 scores, online softmax and P @ V; P rounded to bf16; one rounding of the result",
    why="as for float16, with bf16's ulp 2^-7 for P (and q times the scale) rounded before the dots and for the "
        "result's rounding; bf16 has the fp32 exponent range, so atol only absorbs flush-to-zero",
)
TOLERANCES: dict[str, Tolerance] = {"float16": _FP16, "bfloat16": _BF16}

#: (B, S, H, D) storage viewed as (B, H, S, D): how a projection's output is usually split into heads.
BSHD = Layout.permuted(0, 2, 1, 3)
_AXES = ("B", "H", "S", "D")
_LAYOUTS = (BSHD, "transposed", "step")
INPUTS = (TensorInput("q", _AXES, strided=_LAYOUTS), TensorInput("k", _AXES, strided=_LAYOUTS),
          TensorInput("v", _AXES, strided=_LAYOUTS))
OUTPUTS = (TensorOutput("out", _AXES, TOLERANCES),)
HEAD_DIMS = (16, 32, 64, 128)

# Benchmark rows (B, H, S, D), timed on a GPU only: FlashAttention-2's sequence lengths at a
# model's head counts and head dims 64 and 128.
BENCHMARK_SHAPES: tuple[tuple[int, int, int, int], ...] = ((4, 16, 4096, 64), (2, 16, 8192, 128), (16, 16, 1024, 64))
BENCHMARK_DTYPES: tuple[str, ...] = ("float16", "bfloat16")

#: Call dtypes the CPU interpreter can run: Triton 3.6's interpreter multiplies the raw bits of
#: bfloat16 operands in tl.dot (triton-lang/triton#11584), so bf16 cases run on a GPU only.
CPU_DTYPES = ("float16",)


def _case(b: int, h: int, s: int, d: int, dtype: str = "float16", label: str = "", **layouts) -> CaseSpec:
    return CaseSpec(dims={"B": b, "H": h, "S": s, "D": d}, dtype=dtype, layouts=layouts, label=label)


def _future(b: int, h: int, s: int, d: int, split: int) -> CaseSpec:
    from grader.assignments.attention_forward.inputs import future_case
    dims = {"B": b, "H": h, "S": s, "D": d}
    draw = future_case(split)
    return CaseSpec(dims=dims, dtype="float16", draw=lambda generator: draw(generator, dims))


def _hull(case, placed):
    """The bounds of the convex-hull property: each output row lies within the elementwise min
    and max of the rows of v it may attend to (keys j <= i): softmax weights are >= 0 and sum
    to 1."""
    v = placed["v"].double()
    return torch.cummin(v, dim=-2).values, torch.cummax(v, dim=-2).values


def _where(placed, index) -> str:
    b, h, i, d = index
    return f"out[{b}, {h}, {i}, {d}] (query {i}: keys 0..{i})"


#: Value cases only a GPU runs (the CPU interpreter would take minutes on them): sequences of
#: several key blocks of 128, the block compiled kernels take for D <= 64, so that an online
#: softmax whose running maximum rises in a later block is exercised where it matters (a kernel
#: that never rescales its accumulator, corpus wrong/no_rescale.py, is right on one block; every
#: other case fits in one block of 128). Seen on the H200 on 2026-12-05: without them that file
#: passed every check there.
GPU_LONG_CASES = {
    "float16_values": (_case(1, 2, 300, 64), _case(1, 1, 520, 32)),
    "bfloat16_values": (_case(1, 1, 300, 64, "bfloat16"),),
}


def checks(device: str) -> tuple:
    """The checks in order. The shapes are small (the CPU interpreter runs a numpy call per
    tile, and attention's tiles are many); on the CPU the bfloat16 cases are left out
    (CPU_DTYPES) and bfloat16_values is skipped whole."""
    declared = (
        ValueCheck("float16_values", (_case(1, 2, 37, 16), _case(2, 1, 64, 32), _case(1, 1, 130, 64),
                                      _case(1, 2, 20, 128))),
        ValueCheck("bfloat16_values", (_case(1, 2, 37, 16, "bfloat16"), _case(1, 1, 130, 64, "bfloat16"),
                                       _case(1, 2, 20, 128, "bfloat16"))),
        ValueCheck("causality", (_future(1, 2, 50, 32, split=21), _future(1, 1, 97, 16, split=64))),
        Bounds("convex_hull", (_case(2, 1, 70, 16), _case(1, 1, 33, 64, "bfloat16")), output="out", bounds=_hull,
               what="lies within the min and max of the rows of v it attends to", where=_where),
        ValueCheck("strided_inputs", (
            _case(1, 2, 37, 32, q=BSHD, k="transposed", v="step"),
            _case(2, 2, 19, 16, q="transposed_step", k=BSHD, v="offset"),
            _case(1, 2, 40, 64, q="step", k="step", v=BSHD),
            _case(1, 2, 37, 32, "bfloat16", q=BSHD, k=BSHD, v=BSHD),
        )),
        OutputContract("output_contract", (_case(1, 2, 37, 16), _case(1, 1, 21, 32, "bfloat16"))),
        RejectsMismatch("rejects_mismatch", {"B": 1, "H": 2, "S": 19, "D": 16}, dtype="float16"),
        RejectsRequiresGrad("rejects_requires_grad", {"B": 1, "H": 2, "S": 19, "D": 16}, dtype="float16"),
        Rejects("rejects_unsupported", (
            ("head dim D = 24 (not 16, 32, 64 or 128)", _case(1, 1, 9, 24), dict),
            ("float32 q, k and v", _case(1, 1, 9, 16, "float32"), dict),
        ), other_device=()),
        ValueCheck("edge_shapes", (_case(1, 1, 1, 16), _case(3, 1, 2, 32), _case(1, 2, 65, 16), _case(1, 1, 129, 32),
                                   _case(1, 1, 17, 128))),
        FreshResults("fresh_results", _case(1, 2, 40, 32)),
        TritonKernel(),
    )
    if device != "cpu":
        return tuple(_replace_cases(c, c.cases + GPU_LONG_CASES[c.name]) if c.name in GPU_LONG_CASES else c
                     for c in declared)
    cpu = []
    for c in declared:
        if c.name in GPU_ONLY_CHECKS:
            cpu.append(_skipped(c.name))
        elif isinstance(c, (ValueCheck, OutputContract, Bounds)):
            cpu.append(_replace_cases(c, tuple(s for s in c.cases if s.dtype in CPU_DTYPES)))
        else:
            cpu.append(c)
    return tuple(cpu)


def _replace_cases(decl, cases):
    import dataclasses
    return dataclasses.replace(decl, cases=cases)


def _skipped(name: str) -> CustomCheck:
    """A check reported as skipped on the CPU interpreter, with the reason."""
    reason = ("not run on the CPU interpreter: Triton 3.6's interpreter multiplies the raw bits of bfloat16 operands "
              "in tl.dot (triton-lang/triton#11584), so a correct bf16 kernel cannot pass there; it runs on a GPU")
    return CustomCheck(name, lambda plan, declared: PlannedCheck(name, [], _never_evaluated, skip_reason=reason))


def _never_evaluated(check, evidence):
    raise AssertionError(f"{check.name} is skipped on the CPU and never evaluated")


CHECK_NAMES = ("float16_values", "bfloat16_values", "causality", "convex_hull", "strided_inputs", "output_contract",
               "rejects_mismatch", "rejects_requires_grad", "rejects_unsupported", "edge_shapes", "fresh_results",
               "triton_kernel")
#: Checks that run only on a GPU (CPU_DTYPES says why).
GPU_ONLY_CHECKS = ("bfloat16_values",)

HINTS = {
    "float16_values": "per query block: scores s = q k^T / sqrt(D) in fp32 (tl.dot), keys j > i masked to -inf, an "
                      "online softmax over key blocks (running max m, running sum l, the accumulator rescaled by "
                      "exp(m_old - m_new) whenever m rises), out = acc / l stored in the inputs' dtype",
    "bfloat16_values": "the same kernel in bfloat16: fp32 scores and accumulator, round only P before the P @ V dot "
                       "and the result",
    "causality": "apply the causal mask: a query i may only attend to keys j <= i (set the other scores to -inf "
                 "before the row max and the exponentials)",
    "convex_hull": "softmax weights are >= 0 and sum to 1: divide the accumulator by the sum of the same weights "
                   "it was built from, and mask every key you do not attend to",
    "strided_inputs": "load q, k and v with their own four strides each (q.stride(0..3)): a (B, S, H, D) buffer viewed "
                      "as (B, H, S, D), a transposed k and stepped views are all valid inputs",
    "output_contract": "return a fresh contiguous (B, H, S, D) tensor of the inputs' dtype (torch.empty(q.shape, ...)); "
                       "never write into q, k or v",
    "rejects_mismatch": "raise (ValueError/TypeError) unless q, k and v are (B, H, S, D) of one shape, one dtype and "
                        "one device",
    "rejects_requires_grad": "this is an explicit forward kernel with no autograd: raise if an input requires grad",
    "rejects_unsupported": "raise (ValueError/TypeError) for a head dim D not in (16, 32, 64, 128) and for dtypes "
                           "other than float16 and bfloat16",
    "edge_shapes": "mask the loads of q, k and v past S (other=0) and the scores of keys past S, and the store of out "
                   "past S: S = 1, 2, one past a block, several blocks with a ragged last one",
    "fresh_results": "compute from the values in memory on every call; do not cache by pointer",
    "triton_kernel": "the work must be done by @triton.jit kernels: the grader replays each call's Triton launches "
                     "alone, on new inputs, and the output must come out right",
}

#: A check's hint is shown only when these passed too (grader.checks.evaluate.hint_for).
HINT_REQUIRES: dict[str, tuple[str, ...]] = {
    "causality": ("float16_values",),
    "convex_hull": ("float16_values",),
    "strided_inputs": ("float16_values",),
    "edge_shapes": ("float16_values",),
    "fresh_results": ("float16_values",),
}

#: Added to the error of a call that crashed the process (a signal or a CUDA error).
CRASH_HINT = (" A crash inside a call is usually the kernel reading or writing outside its tensors: a load of q, k"
              " or v past S without a mask, or out stored with q's strides instead of its own.")
