"""``attention_backward``: the numbers and declarations that make up the assignment's contract.

The assignment: the backward of causal softmax attention, FlashAttention-2's interface:

    attention_backward(q, k, v, out, dout, lse) -> (dq, dk, dv)

q, k, v, out = attention(q, k, v) and its upstream gradient dout, all (B, H, S, D) of one
dtype (float16 or bfloat16), D in {16, 32, 64, 128}; lse (B, H, S) float32, the natural-log
logsumexp of each query's scaled (1/sqrt(D)), causally masked scores, as the forward saved it.
With P = exp(S / sqrt(D) - lse) (keys j > i masked), Delta = rowsum(dout * out):

    dv = P^T dout,  dS = P * (dout v^T - Delta),  dq = dS k / sqrt(D),  dk = dS^T q / sqrt(D)

returned as fresh contiguous tensors of q's dtype. The oracle is fp64 autograd of the fp64
forward (and the closed form, which the scale and slack come from).

The tolerance (oracle.backward_fp64 computes it, and says how): every element's error as the
sum of what each allowed fp32 operation can make (the dots over D, exp, lse's fp32 rounding,
Delta, the sums over S in any blocking), in fp32 ulps (rtol 2^-23), plus the slack of the
roundings to the input dtype FlashAttention-2 makes (P and dS before their dots, q times the
scale, the given out) at one ulp r of the input dtype (2^-10 fp16, 2^-7 bf16), plus one ulp of
the output dtype (vtol) for the result's rounding.

Invariants the maths gives: sum over the keys of dk is 0 (adding one vector to every key adds
the same q.c to every score of a row: no softmax changes); sum over the keys of dv equals the
sum over the queries of dout (each row of P sums to one).

The inputs: on the 2^-5 grid (inputs.make_case: exact in float16 and bfloat16, so out and lse
drawn in fp64 are those of the inputs the call gets), except one float16_values case whose
inputs use every bit of float16 (inputs.full_precision_case): on the grid alone a kernel that
drops input bits down to bfloat16's is exact.
"""

from __future__ import annotations

from grader.assignments.protocol import (
    CaseSpec,
    CentralDifference,
    CustomCheck,
    FreshResults,
    Invariant,
    OutputContract,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorInput,
    TensorOutput,
    TrainingStep,
    TritonKernel,
    ValueCheck,
)
from grader.checks.plan import Layout, PlannedCheck
from grader.checks.tolerance import Tolerance

_FP16 = Tolerance(
    rtol=2.0**-23, atol=2.0**-24, vtol=2.0**-10,
    summary="fp32 recomputed scores, P, dP, Delta, dS and sums; P and dS rounded to fp16; one rounding of the result",
    why="fp32 vs the fp64 oracle, per element in fp32 ulps of the magnitudes each output sums (oracle.backward_fp64: "
        "the dots over D, exp, lse's fp32 rounding, Delta, sums over S in any blocking); slack 2^-10 for P, dS and "
        "q times the scale rounded to fp16 before the dots and out given in fp16; one fp16 ulp for the result; "
        "atol 2^-24 is fp16's subnormal spacing",
)
_BF16 = Tolerance(
    rtol=2.0**-23, atol=1e-30, vtol=2.0**-7,
    summary="as float16, with bf16's roundings",
    why="as for float16, with bf16's ulp 2^-7 for the roundings before the dots, of out and of the result; atol only "
        "absorbs flush-to-zero",
)
TOLERANCES: dict[str, Tolerance] = {"float16": _FP16, "bfloat16": _BF16}

BSHD = Layout.permuted(0, 2, 1, 3)
_AXES = ("B", "H", "S", "D")
_LAYOUTS = (BSHD, "transposed", "step")
INPUTS = tuple(TensorInput(name, _AXES, strided=_LAYOUTS) for name in ("q", "k", "v", "out", "dout")) + (
    TensorInput("lse", ("B", "H", "S"), dtype="float32", strided=("step",)),)
OUTPUTS = (TensorOutput("dq", _AXES, TOLERANCES), TensorOutput("dk", _AXES, TOLERANCES),
           TensorOutput("dv", _AXES, TOLERANCES))

BENCHMARK_SHAPES: tuple[tuple[int, int, int, int], ...] = ((4, 16, 4096, 64), (2, 16, 8192, 128), (16, 16, 1024, 64))
BENCHMARK_DTYPES: tuple[str, ...] = ("float16", "bfloat16")
#: Call dtypes the CPU interpreter can run (bf16 tl.dot: triton-lang/triton#11584).
CPU_DTYPES = ("float16",)


def _case(b: int, h: int, s: int, d: int, dtype: str = "float16", **layouts) -> CaseSpec:
    return CaseSpec(dims={"B": b, "H": h, "S": s, "D": d}, dtype=dtype, layouts=layouts)


def _full_precision(b: int, h: int, s: int, d: int, dtype: str = "float16") -> CaseSpec:
    """A case whose inputs use every bit of ``dtype`` (inputs.full_precision_case says why)."""
    from grader.assignments.attention_backward.inputs import full_precision_case
    dims, draw = {"B": b, "H": h, "S": s, "D": d}, full_precision_case(dtype)
    return CaseSpec(dims=dims, dtype=dtype, draw=lambda generator: draw(generator, dims))


def _autograd(case, values):
    from grader.assignments.attention_backward.oracle import autograd_fp64
    return autograd_fp64(values["q"], values["k"], values["v"], values["dout"])


def _loss(case, **perturbed):
    from grader.assignments.attention_backward.oracle import loss_fp64
    given = {name: case.values[name] for name in ("q", "k", "v", "dout")}
    given.update(perturbed)
    return loss_fp64(given["q"], given["k"], given["v"], given["dout"])


def _training_problem():
    from grader.assignments.attention_backward.training import problem
    return problem()


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
    """The checks in order; small shapes (the interpreter runs a numpy call per tile); on the CPU
    the bfloat16 cases are left out and bfloat16_values is skipped whole."""
    small = _case(1, 1, 19, 16)
    declared = (
        ValueCheck("float16_values", (_case(1, 2, 37, 16), _case(1, 1, 130, 32), _case(2, 1, 20, 64),
                                      _full_precision(1, 2, 45, 16)),
                   reference=_autograd),
        ValueCheck("bfloat16_values", (_case(1, 2, 37, 16, "bfloat16"), _case(1, 1, 130, 32, "bfloat16")),
                   reference=_autograd),
        CentralDifference("central_difference_dq", (small,), output="dq", variable="q",
                          loss=lambda case, q: _loss(case, q=q), points=3),
        CentralDifference("central_difference_dk", (small,), output="dk", variable="k",
                          loss=lambda case, k: _loss(case, k=k), points=3),
        CentralDifference("central_difference_dv", (small,), output="dv", variable="v",
                          loss=lambda case, v: _loss(case, v=v), points=3),
        Invariant("dk_key_sum", (_case(1, 2, 70, 16),), output="dk", dim=-2,
                  what="sums to ~0 over the keys (one vector added to every key changes no softmax)"),
        Invariant("dv_key_sum", (_case(1, 2, 70, 16),), output="dv", dim=-2,
                  what="sums over the keys to dout summed over the queries (each row of P sums to one)"),
        ValueCheck("strided_inputs", (
            _case(1, 2, 37, 32, q=BSHD, k="transposed", v="step", out=BSHD, dout="transposed", lse="step"),
            _case(2, 1, 21, 16, q="step", k=BSHD, v=BSHD, out="offset", dout=BSHD),
            _case(1, 2, 37, 32, "bfloat16", q=BSHD, k=BSHD, v=BSHD, out=BSHD, dout=BSHD),
        )),
        OutputContract("output_contract", (_case(1, 2, 37, 16), _case(1, 1, 21, 32, "bfloat16"))),
        RejectsMismatch("rejects_mismatch", {"B": 1, "H": 2, "S": 19, "D": 16}, dtype="float16"),
        RejectsRequiresGrad("rejects_requires_grad", {"B": 1, "H": 2, "S": 19, "D": 16}, dtype="float16"),
        ValueCheck("edge_shapes", (_case(1, 1, 1, 16), _case(3, 1, 2, 32), _case(1, 1, 65, 16), _case(1, 1, 17, 128))),
        FreshResults("fresh_results", _case(1, 2, 40, 32)),
        TrainingStep("training_step", _training_problem),
        TritonKernel(),
    )
    import dataclasses
    if device != "cpu":
        return tuple(dataclasses.replace(c, cases=c.cases + GPU_LONG_CASES[c.name]) if c.name in GPU_LONG_CASES
                     else c for c in declared)
    cpu = []
    for c in declared:
        if c.name in GPU_ONLY_CHECKS:
            cpu.append(_skipped(c.name))
        elif isinstance(c, (ValueCheck, OutputContract)):
            cpu.append(dataclasses.replace(c, cases=tuple(s for s in c.cases if s.dtype in CPU_DTYPES)))
        else:
            cpu.append(c)
    return tuple(cpu)


def _skipped(name: str) -> CustomCheck:
    reason = ("not run on the CPU interpreter: Triton 3.6's interpreter multiplies the raw bits of bfloat16 operands "
              "in tl.dot (triton-lang/triton#11584), so a correct bf16 kernel cannot pass there; it runs on a GPU")
    return CustomCheck(name, lambda plan, declared: PlannedCheck(name, [], _never_evaluated, skip_reason=reason))


def _never_evaluated(check, evidence):
    raise AssertionError(f"{check.name} is skipped on the CPU and never evaluated")


CHECK_NAMES = ("float16_values", "bfloat16_values", "central_difference_dq", "central_difference_dk",
               "central_difference_dv", "dk_key_sum", "dv_key_sum", "strided_inputs", "output_contract",
               "rejects_mismatch", "rejects_requires_grad", "edge_shapes", "fresh_results", "training_step", "triton_kernel")
GPU_ONLY_CHECKS = ("bfloat16_values",)

HINTS = {
    "float16_values": "recompute P = exp(q k^T / sqrt(D) - lse) with keys j > i masked (natural exp: lse is a natural "
                      "log); dv = P^T dout; dS = P * (dout v^T - Delta) with Delta = rowsum(dout * out); "
                      "dq = dS k / sqrt(D), dk = dS^T q / sqrt(D); fp32 accumulators",
    "bfloat16_values": "the same kernels in bfloat16: fp32 accumulators, round only P and dS before the dots and "
                       "the results",
    "central_difference_dq": "the finite-difference slope of L = sum(attention(q, k, v) * dout) in q disagrees with "
                             "your dq: dq = dS k / sqrt(D)",
    "central_difference_dk": "the slope of L in k disagrees with your dk: dk = dS^T q / sqrt(D), summed over the "
                             "queries i >= j",
    "central_difference_dv": "the slope of L in v disagrees with your dv: dv = P^T dout, summed over the queries "
                             "i >= j",
    "dk_key_sum": "dk summed over the keys must be ~0: keep Delta = rowsum(dout * out) in dS = P * (dP - Delta)",
    "dv_key_sum": "dv summed over the keys must equal dout summed over the queries: P's rows must sum to one "
                  "(P = exp(s - lse) with the natural-log lse, every masked key at 0)",
    "strided_inputs": "load every input with its own strides (four each; lse three): (B, S, H, D) buffers viewed as "
                      "(B, H, S, D), transposed and stepped views are all valid inputs",
    "output_contract": "return fresh contiguous dq, dk, dv of q's shape and dtype (torch.empty(q.shape, ...)); never "
                       "write into the inputs",
    "rejects_mismatch": "raise (ValueError/TypeError) unless q, k, v, out, dout are (B, H, S, D) of one shape, dtype "
                        "and device and lse is float32 (B, H, S)",
    "rejects_requires_grad": "this is an explicit backward: raise if an input requires grad",
    "edge_shapes": "mask the loads past S (other=0) and the stores past S: S = 1, 2, one past a block, D = 128",
    "fresh_results": "compute from the values in memory on every call; zero your accumulators on every call; do "
                     "not cache by pointer",
    "training_step": "your dq, dk, dv, as the backward of one causal attention layer trained for a few steps, made "
                     "the training go non-finite or away from the fp64 reference: look at the step named (S = 48, "
                     "D = 16, float16, as the training step gives them)",
    "triton_kernel": "the work must be done by @triton.jit kernels (Delta included: a PyTorch rowsum is not "
                     "replayed); the grader replays each call's Triton launches alone, on new inputs",
}
HINT_REQUIRES: dict[str, tuple[str, ...]] = {
    "central_difference_dq": ("float16_values",),
    "central_difference_dk": ("float16_values",),
    "central_difference_dv": ("float16_values",),
    "dk_key_sum": ("float16_values",),
    "dv_key_sum": ("float16_values",),
    "strided_inputs": ("float16_values",),
    "edge_shapes": ("float16_values",),
    "fresh_results": ("float16_values",),
    "training_step": ("float16_values",),
}
CRASH_HINT = (" A crash inside a call is usually a kernel reading or writing outside its tensors: a load past S"
              " without a mask, or a gradient stored with an input's strides instead of its own.")

