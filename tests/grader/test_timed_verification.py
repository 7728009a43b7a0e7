"""The timed verification (grader/harness/replay_child.py ``check_timed_outputs``) applies the
checks' own tolerance rule, ``Tolerance.allowed`` with its slack, through the typed
``TimedVerification`` the parent sends (grader.benchmark.timed_verification), for every
assignment: outputs made with each arithmetic an assignment allows pass in every dtype; an
output just beyond the bound is flagged; the timed check and the parent's ``compare`` give the
same worst ratio on the same elements. Also the index sets: a selection picks rows of some
tensors and all of others. CPU, small tensors; the replay child is imported, not run.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from grader.assignments import get_assignment
from grader.benchmark import timed_verification
from grader.benchmark.verify import load_bench_module
from grader.checks.tolerance import compare
from grader.harness import replay_child
from grader.harness.protocol import BenchmarkPlan, TimedOutput, TimedVerification, Tolerance
from grader.manifest import MANIFESTS

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SHAPE = (48, 1000)


def _to_bf16_toward_zero(values: torch.Tensor) -> torch.Tensor:
    """Round fp32 to bf16 by truncation (what Triton's CPU interpreter does; spec allows 2 ulps)."""
    bits = values.float().contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


def _finish(values32: torch.Tensor, dtype: torch.dtype, truncate: bool) -> torch.Tensor:
    return _to_bf16_toward_zero(values32) if truncate and dtype == torch.bfloat16 else values32.to(dtype)


# Each arithmetic the assignment's spec allows, as a function of the bench inputs (in their dtype).
def _softmax_fp32(y, g, truncate=False):
    y32, g32 = y.float(), g.float()
    return _finish(y32 * (g32 - (y32 * g32).sum(-1, keepdim=True)), y.dtype, truncate)


def _softmax_products_in_dtype(y, g, truncate=False):
    """PyTorch's CUDA softmax backward: p = fl(y*g) in the input dtype, dx = p - y * sum(p) in fp32."""
    p = (y * g).float()
    return _finish(p - y.float() * p.sum(-1, keepdim=True), y.dtype, truncate)


def _xent(x, t, grad, route: str, truncate=False):
    x32 = x.float()
    m = x32.amax(-1, keepdim=True)
    if route == "max_subtracted":
        e = torch.exp(x32 - m)
        p = e / e.sum(-1, keepdim=True)
    elif route == "log_sum_exp":
        p = torch.exp(x32 - (m + torch.log(torch.exp(x32 - m).sum(-1, keepdim=True))))
    else:  # exp2 of scaled arguments, as Triton lowers tl.exp on the GPU
        log2e = 1.4426950408889634
        e = torch.exp2(x32 * log2e - m * log2e)
        p = e / e.sum(-1, keepdim=True)
    valid = t != -100
    onehot = torch.zeros_like(p).scatter_(1, torch.where(valid, t, 0).unsqueeze(1), 1.0)
    row_scale = torch.where(valid, grad / valid.sum().clamp(min=1), 0.0)
    return _finish((p - onehot) * row_scale.unsqueeze(1), x.dtype, truncate)


def _gemm_fp32(a, b, bias):
    """fp32 accumulation and epilogue, one rounding of out to the input dtype."""
    z = a.float() @ b.float() + bias.float()
    return torch.nn.functional.gelu(z, approximate="tanh").to(a.dtype)


def _gemm_unfused(a, b, bias):
    """The unfused expression's rounding: a @ b and + bias each rounded to the input dtype
    before GELU (what the baseline does; the spec allows it)."""
    z = ((a.float() @ b.float()).to(a.dtype).float() + bias.float()).to(a.dtype)
    return torch.nn.functional.gelu(z.float(), approximate="tanh").to(a.dtype)


def _layernorm_fp32(dy, x, w, mean, rstd):
    """(dx, dw, db) in fp32 from the saved statistics, each rounded once to the input dtype."""
    dy32, x32, w32 = dy.float(), x.float(), w.float()
    xhat = (x32 - mean[:, None]) * rstd[:, None]
    wdy = w32 * dy32
    c1 = (xhat * wdy).mean(-1, keepdim=True)
    c2 = wdy.mean(-1, keepdim=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd[:, None]
    return dx.to(x.dtype), (dy32 * xhat).sum(0).to(w.dtype), dy32.sum(0).to(w.dtype)


def _causal_scores(q, k):
    """fp32 scaled scores of (B, H, S, D) q and k with the causal mask (-inf above the diagonal)."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    length = q.shape[-2]
    allowed = torch.ones(length, length, dtype=torch.bool).tril()
    return scores.masked_fill(~allowed, -math.inf)


def _attention_fp32(q, k, v, p_in_dtype=False):
    """Causal softmax(q k^T / sqrt(D)) v in fp32, out rounded once; with `p_in_dtype` P is
    rounded to the input dtype before P @ V, as FlashAttention does (the spec allows it)."""
    p = torch.softmax(_causal_scores(q, k), dim=-1)
    if p_in_dtype:
        p = p.to(q.dtype).float()
    return (p @ v.float()).to(q.dtype)


def _attention_backward_fp32(q, k, v, out, dout, lse):
    """The FlashAttention-2 backward in fp32 from the saved lse: P = exp(S - lse), dv = P^T dout,
    dp = dout v^T, ds = P (dp - rowsum(dout * out)), dq = ds k / sqrt(D), dk = ds^T q / sqrt(D);
    each output rounded once to the input dtype."""
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(_causal_scores(q, k) - lse.float()[..., None])
    dout32, v32 = dout.float(), v.float()
    dv = p.transpose(-1, -2) @ dout32
    delta = (dout32 * out.float()).sum(-1, keepdim=True)
    ds = p * (dout32 @ v32.transpose(-1, -2) - delta)
    dq = (ds @ k.float()) * scale
    dk = (ds.transpose(-1, -2) @ q.float()) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


#: The benchmark-input shape each assignment's bench.make_inputs takes here (small, CPU).
SHAPES = {"softmax_backward": SHAPE, "softmax_cross_entropy_backward": SHAPE,
          "gemm_epilogue": (48, 40, 64), "layernorm_backward": (48, 300),
          "attention_forward": (2, 2, 48, 16), "attention_backward": (2, 2, 48, 16)}

ALLOWED = {
    "gemm_epilogue": {
        "fp32 accumulation and epilogue": _gemm_fp32,
        "a @ b and + bias rounded to the input dtype before GELU (the unfused expression)": _gemm_unfused,
    },
    "layernorm_backward": {
        "fp32 from the saved mean and rstd": _layernorm_fp32,
    },
    "softmax_backward": {
        "fp32 products, fp32 sum": lambda y, g: _softmax_fp32(y, g),
        "products rounded to the input dtype (aten's CUDA backward)": lambda y, g: _softmax_products_in_dtype(y, g),
        "products in the input dtype, bf16 result truncated": lambda y, g: _softmax_products_in_dtype(y, g, True),
    },
    "attention_forward": {
        "fp32 scores, softmax and P @ V, one rounding of out": lambda q, k, v: _attention_fp32(q, k, v),
        "P rounded to the input dtype before P @ V (FlashAttention)": lambda q, k, v: _attention_fp32(q, k, v, True),
    },
    "attention_backward": {
        "fp32 from the saved lse (FlashAttention-2), each output rounded once": _attention_backward_fp32,
    },
    "softmax_cross_entropy_backward": {
        "exp(x - max) / sum": lambda x, t, g: _xent(x, t, g, "max_subtracted"),
        "exp(x - (max + log sum))": lambda x, t, g: _xent(x, t, g, "log_sum_exp"),
        "exp2 of x log2e - max log2e, bf16 result truncated": lambda x, t, g: _xent(x, t, g, "exp2", True),
    },
}


def _setup(name: str, dtype: str):
    assignment = get_assignment(name)
    bench = load_bench_module(assignment.benchmark.bench_file)
    inputs = list(bench.make_inputs(SHAPES[name], DTYPES[dtype], 11, "cpu"))
    # The oracle file as the replay timer loads it (assignment_oracle.py: the file alone).
    spec = importlib.util.spec_from_file_location(f"oracle_{name}", assignment.benchmark.oracle_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return assignment, inputs, module, timed_verification(assignment, dtype)


def test_every_assignment_has_allowed_arithmetic_here():
    assert set(ALLOWED) == set(MANIFESTS)


#: (assignment, dtype) for every dtype each assignment is timed in.
TIMED = [(name, dtype) for name in sorted(MANIFESTS) for dtype in get_assignment(name).benchmark.dtypes]


@pytest.mark.parametrize("name, dtype", TIMED)
def test_outputs_of_every_allowed_arithmetic_pass_the_timed_check(name, dtype):
    assignment, inputs, oracle, verification = _setup(name, dtype)
    assert [o.name for o in verification.outputs] == [o.name for o in assignment.outputs]
    assert verification.outputs[0].tolerance == assignment.tolerance(DTYPES[dtype])
    expected_all = oracle.benchmark_oracle(tuple(inputs), None)
    every_row = _every_index(verification, expected_all)
    for what, arithmetic in ALLOWED[name].items():
        made = arithmetic(*inputs)
        outs = list(made) if isinstance(made, tuple) else [made]
        worst, bad, changed, by_output = replay_child.check_timed_output(outs, inputs, inputs, every_row, oracle,
                                                                         verification)
        assert (int(bad), int(changed)) == (0, 0) and float(worst) <= 1, (what, float(worst))
        for k, (out, declared) in enumerate(zip(outs, verification.outputs)):
            expected, scale, slack = expected_all[declared.name]
            same = compare(out, expected, scale, declared.tolerance, slack)
            assert same.passed and float(by_output[k]) == pytest.approx(same.max_ratio, rel=1e-12), (what, k)
        assert float(worst) == max(float(value) for value in by_output)


def test_the_slack_is_what_lets_aten_arithmetic_pass_in_bf16():
    """The bug the one rule fixes: without the slack (the bound the replay child once re-wrote),
    products rounded to bf16 are flagged; with the checks' own rule they pass."""
    assignment, inputs, oracle, verification = _setup("softmax_backward", "bfloat16")
    out = _softmax_products_in_dtype(*inputs)
    expected, scale, slack = oracle.benchmark_oracle(tuple(inputs), None)["dx"]
    tolerance = verification.outputs[0].tolerance
    without_slack = ((out.double() - expected).abs() / tolerance.allowed(expected, scale)).max()
    assert float(without_slack) > 1
    assert compare(out, expected, scale, tolerance, slack).passed


def _axis_sizes(verification: TimedVerification, oracles: dict) -> dict[str, int]:
    """Each drawn axis's length, read off the outputs that carry it."""
    sizes = {}
    for declared in verification.outputs:
        for axis, size in zip(declared.axes, oracles[declared.name][0].shape):
            if axis is not None:
                sizes[axis] = size
    return sizes


def _every_index(verification: TimedVerification, oracles: dict) -> dict[str, torch.Tensor]:
    """An index set that selects every element of every drawn axis."""
    return {axis: torch.arange(size) for axis, size in _axis_sizes(verification, oracles).items()}


@pytest.mark.parametrize("name, dtype", TIMED)
def test_an_output_just_beyond_the_bound_is_flagged(name, dtype):
    assignment, inputs, oracle, verification = _setup(name, dtype)
    oracles = oracle.benchmark_oracle(tuple(inputs), None)
    expected, scale, slack = oracles[assignment.outputs[0].name]
    allowed = verification.outputs[0].tolerance.allowed(expected, scale, slack)
    # Two drawn positions per drawn axis (3 and 17 where the axis is that long); the element
    # moved sits on the second of each drawn axis and at position 5 of every other axis.
    sizes = _axis_sizes(verification, oracles)
    rows = {axis: torch.tensor(sorted({min(3, size - 1), min(17, size - 1)})) for axis, size in sizes.items()}
    element = tuple(min(17, length - 1) if axis is not None else min(5, length - 1)
                    for axis, length in zip(verification.outputs[0].axes, expected.shape))
    for factor, flagged in ((0.999, False), (1.001, True)):
        out = expected.clone()  # fp64: no rounding moves the element back inside
        out[element] += factor * allowed[element]
        others = [oracles[declared.name][0] for declared in verification.outputs[1:]]  # exact
        worst, bad, _, _ = replay_child.check_timed_output([out, *others], inputs, inputs, rows, oracle, verification)
        assert (int(bad) == 1) is flagged and (float(worst) > 1) is flagged, (factor, float(worst))
        assert float(worst) == pytest.approx(factor, rel=1e-9)


def test_changed_inputs_are_counted_on_the_selected_elements_only():
    assignment, inputs, oracle, verification = _setup("softmax_cross_entropy_backward", "float32")
    out = _xent(*inputs, "max_subtracted")
    pristine = [t.clone() for t in inputs]
    inputs[0][5, :] = 0  # a row that is not selected
    rows = {"M": torch.tensor([1, 2])}
    _, _, changed, _ = replay_child.check_timed_output([out], inputs, pristine, rows, oracle, verification)
    assert int(changed) == 0
    inputs[0][2, 7] = 1.0
    _, _, changed, _ = replay_child.check_timed_output([out], inputs, pristine, rows, oracle, verification)
    assert int(changed) == 1


class _GemmLikeOracle:
    """out = A @ B + bias on rows ``index["M"]`` (those rows of A, all of B); colsum = the column
    sums of A @ B, which need every row of A (as layernorm's dw needs every row)."""

    @staticmethod
    def benchmark_oracle(inputs, index):
        a, b, bias = (t.double() for t in inputs)
        rows = a if index is None else a.index_select(0, index["M"])
        return {"out": (rows @ b + bias, rows.abs() @ b.abs() + bias.abs(), None),
                "colsum": ((a @ b).sum(0), (a.abs() @ b.abs()).sum(0), None)}


def test_a_selection_picks_rows_of_some_tensors_and_all_of_others():
    """Two outputs of different shapes (out (M, N) by drawn rows, colsum (N,) whole), inputs
    A by rows, B and bias whole: a change to B anywhere is caught, to A only on drawn rows."""
    tolerance = Tolerance(rtol=1e-12, atol=1e-12, why="fp64 test")
    verification = TimedVerification(
        draws={"M": 3}, input_axes=[["M", None], [None, None], [None]],
        outputs=[TimedOutput(name="out", axes=["M", None], tolerance=tolerance),
                 TimedOutput(name="colsum", axes=[None], tolerance=tolerance)])
    generator = torch.Generator().manual_seed(0)
    a, b, bias = torch.randn(10, 4, generator=generator), torch.randn(4, 6, generator=generator), torch.randn(6)
    inputs = [a.double(), b.double(), bias.double()]
    outs = [inputs[0] @ inputs[1] + inputs[2], (inputs[0] @ inputs[1]).sum(0)]
    drawn = replay_child.draw_indices(verification, outs, inputs, 2, torch.Generator().manual_seed(1))
    assert [set(d) for d in drawn] == [{"M"}, {"M"}] and drawn[0]["M"].shape == (3,)
    assert int(drawn[0]["M"].max()) < 10
    index = {"M": torch.tensor([0, 4, 9])}
    worst, bad, changed, by_output = replay_child.check_timed_output(outs, inputs, inputs, index, _GemmLikeOracle,
                                                                     verification)
    assert (int(bad), int(changed)) == (0, 0) and len(by_output) == 2
    wrong = [outs[0], outs[1].clone()]
    wrong[1][2] += 1.0
    _, bad, _, by_output = replay_child.check_timed_output(wrong, inputs, inputs, index, _GemmLikeOracle, verification)
    assert int(bad) == 1 and float(by_output[1]) > 1 and float(by_output[0]) <= 1
    bent = [t.clone() for t in inputs]
    bent[1][3, 5] += 1.0
    bent[0][1, 0] += 1.0  # row 1 is not drawn
    _, _, changed, _ = replay_child.check_timed_output(outs, bent, inputs, index, _GemmLikeOracle, verification)
    assert int(changed) == 1


def test_axes_must_name_drawn_dimensions():
    tolerance = Tolerance(rtol=0.0, atol=1.0, why="t")
    with pytest.raises(ValueError, match="not drawn"):
        TimedVerification(draws={"M": 1}, input_axes=[["K", None]],
                          outputs=[TimedOutput(name="out", axes=["M", None], tolerance=tolerance)])


def test_the_benchmark_plan_carries_the_checks_tolerances_as_they_are():
    from grader.benchmark import BenchmarkOptions, replay_phase
    from grader.harness.protocol import CallRecording, KernelRecord, LaunchRecord, Recording

    assignment = get_assignment("softmax_backward")
    kernel = KernelRecord(id="a" * 64, name="k", signature=["*fp16"], num_warps=4)
    call = CallRecording(call_id="4x8/bfloat16", buffers=[{"name": "arg0", "nbytes": 64}],
                         launches=[LaunchRecord(kernel=kernel.id, grid=(1, 1, 1),
                                                args=[{"kind": "pointer", "buffer": "arg0", "offset_bytes": 0}])])
    recording = Recording(kernels=[kernel], calls=[call])
    rows = [{"id": "4x8/bfloat16", "shape": [4, 8], "dtype": "bfloat16", "seed": 1}]
    plan, unreplayable = replay_phase(assignment, rows, recording, BenchmarkOptions())
    assert unreplayable == {}
    again = BenchmarkPlan.model_validate_json(plan.model_dump_json())
    assert again.rows[0].verification.outputs[0].tolerance == assignment.tolerance(torch.bfloat16)
    assert again.rows[0].verification.draws == {"M": 2}
