"""Unit tests of ``softmax_cross_entropy_backward``'s oracles, inputs, tolerances and plan, on
hand-checkable numbers (the lesson's worked examples) and against PyTorch autograd.

No child process and no Triton here: these run in about a second.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.assignments import get_assignment
from grader.assignments.softmax_cross_entropy_backward import diagnose
from grader.assignments.softmax_cross_entropy_backward.inputs import large_logits, make_targets, random_case
from grader.assignments.softmax_cross_entropy_backward.oracle import (
    autograd_xent_grad_fp64,
    central_difference_fp64,
    count_valid,
    loss_fp64,
    xent_grad_fp64,
)
from grader.assignments.softmax_cross_entropy_backward.spec import (
    CENTRAL_DIFFERENCE_H,
    CHECK_NAMES,
    EXPONENT_TERM,
    HINTS,
    LONG_ROW,
    TOLERANCES,
)
from grader.checks.plan import CallEvidence, CheckEvidence
from grader.checks.tolerance import compare

F64 = torch.float64
FP32 = TOLERANCES["float32"]


def _lesson_logits(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64).log()


# ---- the lesson's worked examples ---------------------------------------------------------
def test_lesson_example_p_minus_y():
    """p = [0.25, 0.60, 0.15], y = [0, 1, 0]: dL/dz = p - y = [0.25, -0.40, 0.15]."""
    x = _lesson_logits([0.25, 0.60, 0.15])
    dx, scale = xent_grad_fp64(x, torch.tensor([1]), 1.0)
    assert torch.allclose(dx, torch.tensor([[0.25, -0.40, 0.15]], dtype=F64), rtol=0, atol=1e-15)
    assert abs(float(dx.sum())) < 1e-15  # probability conservation: the row sums to 0
    assert bool((scale > 0).all())


def test_lesson_example_through_the_dense_jacobian():
    """The long way round: J = diag(p) - p p^T and dL/dp = -y/p; J^T dL/dp collapses to p - y.
    The lesson's column for z_1 is [-0.15, 0.24, -0.09] and its dot with dL/dp is -0.40."""
    p = torch.tensor([0.25, 0.60, 0.15], dtype=F64)
    y = torch.tensor([0.0, 1.0, 0.0], dtype=F64)
    jacobian = torch.diag(p) - torch.outer(p, p)
    assert torch.allclose(jacobian[:, 1], torch.tensor([-0.15, 0.24, -0.09], dtype=F64), rtol=0, atol=1e-15)
    dl_dp = -y / p
    assert math.isclose(float(dl_dp @ jacobian[:, 1]), -0.40, abs_tol=1e-15)
    dx, _ = xent_grad_fp64(p.log()[None], torch.tensor([1]), 1.0)
    assert torch.allclose(jacobian.T @ dl_dp, dx[0], rtol=0, atol=1e-15)


def test_second_lesson_example_and_the_mean_over_two_rows():
    """p = [0.25, 0.65, 0.10], class 1: p - y = [0.25, -0.35, 0.10]. In a batch of both
    examples the mean loss divides each row by n_valid = 2."""
    x = _lesson_logits([0.25, 0.65, 0.10])
    dx, _ = xent_grad_fp64(x, torch.tensor([1]), 1.0)
    assert torch.allclose(dx, torch.tensor([[0.25, -0.35, 0.10]], dtype=F64), rtol=0, atol=1e-15)
    both = _lesson_logits([0.25, 0.60, 0.15], [0.25, 0.65, 0.10])
    dx, _ = xent_grad_fp64(both, torch.tensor([1, 1]), 1.0)
    expected = torch.tensor([[0.125, -0.20, 0.075], [0.125, -0.175, 0.05]], dtype=F64)
    assert torch.allclose(dx, expected, rtol=0, atol=1e-15)
    assert torch.allclose(autograd_xent_grad_fp64(both, torch.tensor([1, 1]), 1.0), expected, rtol=0, atol=1e-15)


def test_upstream_gradient_and_ignored_rows_scale_the_rows():
    both = _lesson_logits([0.25, 0.60, 0.15], [0.25, 0.65, 0.10])
    dx, scale = xent_grad_fp64(both, torch.tensor([1, -100]), -3.0)
    # n_valid = 1: row 0 is -3 (p - y); row 1 is ignored: exactly 0, with error scale 0
    assert torch.allclose(dx[0], -3.0 * torch.tensor([0.25, -0.40, 0.15], dtype=F64), rtol=0, atol=1e-14)
    assert dx[1].tolist() == [0.0, 0.0, 0.0] and scale[1].tolist() == [0.0, 0.0, 0.0]


# ---- the formula against PyTorch autograd, the authority ---------------------------------------
@pytest.mark.parametrize("ignore_index, ignored", [(-100, ()), (-100, (1, 4)), (-1, (0, 2)), (3, (1,))])
def test_formula_equals_autograd_of_cross_entropy(ignore_index, ignored):
    generator = torch.Generator().manual_seed(7)
    x, t = random_case(generator, 6, 50, ignored=ignored, ignore_index=ignore_index)
    for grad in (1.0, -0.37, 4.0):
        dx, _ = xent_grad_fp64(x, t, grad, ignore_index)
        assert torch.allclose(dx, autograd_xent_grad_fp64(x, t, grad, ignore_index), rtol=0, atol=1e-15)


def test_all_ignored_gives_zeros_as_autograd_does():
    x, t = random_case(torch.Generator().manual_seed(1), 4, 10, ignored=range(4))
    assert count_valid(t) == 0
    assert math.isnan(loss_fp64(x, t, 1.0))  # the mean of no rows is NaN ...
    assert autograd_xent_grad_fp64(x, t, 1.0).abs().max() == 0  # ... but its gradient is zero
    dx, scale = xent_grad_fp64(x, t, 1.0)
    assert dx.abs().max() == 0 and scale.abs().max() == 0


def test_central_difference_matches_the_formula():
    generator = torch.Generator().manual_seed(3)
    x, t = random_case(generator, 3, 37, ignored=(1,))
    dx, _ = xent_grad_fp64(x, t, 0.8)
    for row, col in [(0, int(t[0])), (0, 5), (1, 5), (2, 36)]:
        slope = central_difference_fp64(x, t, 0.8, row, col, CENTRAL_DIFFERENCE_H)
        assert abs(slope - float(dx[row, col])) < 1e-9, (row, col, slope, float(dx[row, col]))
    assert central_difference_fp64(x, t, 0.8, 1, 5, CENTRAL_DIFFERENCE_H) == 0.0  # an ignored row is not in the loss


def test_oracle_file_loads_alone_with_torch_only():
    """The replay timer loads oracle.py by itself (as assignment_oracle.py), without the grader."""
    import subprocess
    import sys
    from pathlib import Path

    import grader.assignments.softmax_cross_entropy_backward.oracle as oracle_module

    code = (
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('assignment_oracle', {str(Path(oracle_module.__file__))!r})\n"
        "oracle = importlib.util.module_from_spec(spec); spec.loader.exec_module(oracle)\n"
        "x = torch.randn(5, 7); t = torch.tensor([0, -100, 6, 2, -100]); g = torch.tensor(0.5)\n"
        "dx, scale, _ = oracle.benchmark_oracle((x, t, g), {'M': torch.tensor([1, 2])})['dx']\n"
        "assert dx.shape == (2, 7) and float(dx[0].abs().max()) == 0.0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grader'))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_n_valid_of_the_whole_batch_for_a_few_rows():
    generator = torch.Generator().manual_seed(5)
    x, t = random_case(generator, 10, 20, ignored=(2, 3, 7))
    full, full_scale = xent_grad_fp64(x, t, 1.5)
    rows = torch.tensor([0, 3, 9])
    part, part_scale = xent_grad_fp64(x[rows], t[rows], 1.5, n_valid=count_valid(t))
    assert torch.equal(part, full[rows]) and torch.equal(part_scale, full_scale[rows])


# ---- tolerances: tight enough to catch, loose enough for fp32 ----------------------------------
def test_scale_grows_with_the_logits_magnitude_only_through_the_exponent_term():
    x = torch.tensor([[1e4, 1e4 - 1.0, 1e4 - 2.0]], dtype=F64)
    t = torch.tensor([0])
    _, scale = xent_grad_fp64(x, t, 1.0)
    p = torch.softmax(x, -1)
    expected = p * (1 + (x.abs() + 1e4) * EXPONENT_TERM) + torch.tensor([[1.0, 0.0, 0.0]], dtype=F64)
    assert torch.allclose(scale, expected, rtol=1e-15, atol=0)


def test_fp32_arithmetic_passes_and_small_relative_errors_fail():
    generator = torch.Generator().manual_seed(11)
    x, t = random_case(generator, 8, 3000, ignored=(3,))
    x32 = x.to(torch.float32)
    expected, scale = xent_grad_fp64(x32, t, 1.0)
    # An fp32 computation (torch's own softmax in fp32) is well inside the bound
    p32 = torch.softmax(x32, -1)
    y = torch.zeros_like(p32)
    valid = t != -100
    y[valid, t[valid]] = 1
    got = ((p32 - y) * valid.unsqueeze(1) / int(valid.sum())).to(torch.float32)
    assert compare(got, expected, scale, FP32).max_ratio < 0.2
    # ... while 1e-4 relative (e.g. a sum-exp kept in fp16-ish precision) is caught, and so is
    # all-zeros on long rows (dx is O(1/C) there).
    assert not compare(expected * (1 + 1e-4), expected, scale, FP32).passed
    long_x, long_t = random_case(generator, 2, LONG_ROW)
    long_expected, long_scale = xent_grad_fp64(long_x.to(torch.float32), long_t, 1.0)
    assert not compare(torch.zeros_like(long_expected), long_expected, long_scale, FP32).passed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_allows_rounding_the_result_once(dtype):
    generator = torch.Generator().manual_seed(2)
    x, t = random_case(generator, 4, 1000, ignored=(1,))
    xh = x.to(dtype)
    expected, scale = xent_grad_fp64(xh, t, 1.0)
    rounded = expected.to(dtype)
    assert compare(rounded, expected, scale, TOLERANCES[str(dtype).replace("torch.", "")]).max_ratio <= 0.5 + 1e-9
    truncated = expected.to(torch.float32).view(torch.int32).bitwise_and(~0xFFFF).view(torch.float32)
    if dtype is torch.bfloat16:  # the interpreter truncates: one ulp, within the two allowed
        assert compare(truncated.to(dtype), expected, scale, TOLERANCES[str(dtype).replace("torch.", "")]).passed
    for tolerance in TOLERANCES.values():
        assert tolerance.why and tolerance.summary and tolerance.rtol > 0 and tolerance.atol > 0


# ---- inputs and the plan: adversarial as STYLE.md item 12 asks -----------------------------------
def test_targets_hit_both_ends_and_ignored_rows():
    t = make_targets(torch.Generator().manual_seed(0), 9, 17, ignored=(2, 5))
    assert int(t[0]) == 0 and int(t[-1]) == 16 and int(t[2]) == -100 and int(t[5]) == -100
    assert bool(((t >= 0) & (t < 17) | (t == -100)).all())


def test_large_logits_patterns():
    x, hot = large_logits(torch.Generator().manual_seed(0), 4, 100)
    assert float(x[0].min()) > 9000 and float(x[1].max()) < -9000
    assert int((x[2] > 9000).sum()) == 1 and float(x[2, hot]) == 1e4
    assert int((x[3] > 9000).sum()) == 50 and int((x[3] < -9000).sum()) == 50
    p = torch.softmax(x.to(torch.float32), -1)
    assert bool(torch.isfinite(p).all())
    e = torch.exp(x.to(torch.float32))  # without the max: inf / inf on row 0, 0 / 0 on row 1
    naive = e / e.sum(-1, keepdim=True)
    assert bool(torch.isnan(naive[0]).all()) and bool(torch.isnan(naive[1]).all())


@pytest.fixture(scope="module")
def plan():
    return get_assignment("softmax_cross_entropy_backward").build_plan(seed=0, device="cpu")


def test_plan_runs_every_check_in_order_with_hints(plan):
    assert tuple(c.name for c in plan.checks) == CHECK_NAMES
    assert set(HINTS) == set(CHECK_NAMES)
    ids = [call.id for check in plan.checks for call in check.calls]
    assert len(ids) == len(set(ids))


def test_plan_inputs_are_adversarial(plan):
    shapes, ignore_kwargs, strides, magnitudes, n_valid_zero = set(), set(), set(), [], False
    targets_at_ends = 0
    for check in plan.checks:
        for call in check.calls:
            if call.expect != "output":
                continue
            x_spec, t_spec, grad_spec = call.args
            shapes.add(tuple(x_spec.size))
            strides.add((tuple(x_spec.stride), tuple(t_spec.stride)))
            ignore_kwargs.add(call.kwargs["ignore_index"].value if call.kwargs else None)
            x = plan.bank.values_of(x_spec).double()
            t = plan.bank.values_of(t_spec)
            magnitudes.append(float(x.abs().max()))
            n_valid_zero |= count_valid(t, call.extra["placed"]["ignore_index"]) == 0
            targets_at_ends += int(int(t[0]) == 0 and int(t[-1]) == x.shape[1] - 1)
            assert plan.bank.values_of(grad_spec).shape == ()
    cols = {c for _, c in shapes}
    assert {1, 2, 3} <= cols  # tiny
    assert any(c % 2 == 1 and c > 1000 for c in cols)  # odd, over one block
    assert {4096, 65536} <= cols and max(cols) > 131072  # exactly at a block, long rows, longest
    assert any(m >= 257 for m, _ in shapes)  # many short rows
    assert {None, -1, 3} <= ignore_kwargs  # the default, a negative and a class index
    assert n_valid_zero  # a whole batch ignored
    assert max(magnitudes) >= 1e4  # stability: logits at +-1e4
    assert any(x_stride[1] != 1 for x_stride, _ in strides) and any(t_stride == (3,) for _, t_stride in strides)
    assert targets_at_ends > 20


def test_diagnosis_names_a_flipped_sign(plan):
    check = next(c for c in plan.checks if c.name == "autograd_fp32")
    call = check.calls[0]
    evidence = CheckEvidence(calls={call.id: CallEvidence(report=None, out=None)}, bank=plan.bank)
    flipped = (-call.expected[0]).to(torch.float32)
    assert "the sign is flipped" in diagnose(flipped, call, evidence)
    assert diagnose(call.expected[0].to(torch.float32) * 0.5, call, evidence) == ""


def test_replay_inputs_keep_layouts_and_change_n_valid_and_grad(plan):
    """Every recorded call is replayed on new inputs of its layout, except the training step's,
    replayed on their own (a step's inputs come from the trajectory, not from a draw)."""
    recorded = [call for check in plan.checks for call in check.calls if call.record_launches]
    own = {call.id for call in recorded if all(a is b for a, b in zip(call.replay_args, call.args))}
    assert own and {call_id.split("/")[0] for call_id in own} == {"training_step"}
    recorded = [call for call in recorded if call.id not in own]
    assert recorded and all(call.expect == "output" for call in recorded)
    for call in recorded:
        ignore_index = call.extra["placed"]["ignore_index"]
        for original, again in zip(call.args, call.replay_args):
            assert (original.size, original.stride, original.offset) == (again.size, again.stride, again.offset)
            assert again.base != original.base
        assert call.replay_kwargs == call.kwargs
        t, t_again = plan.bank.values_of(call.args[1]), plan.bank.values_of(call.replay_args[1])
        grad, grad_again = float(plan.bank.values_of(call.args[2])), float(plan.bank.values_of(call.replay_args[2]))
        assert grad_again != grad and grad_again * grad < 0  # another grad, of the other sign
        if t.shape[0] > 1:
            assert count_valid(t_again, ignore_index) != count_valid(t, ignore_index), call.id
        replay = xent_grad_fp64(*(plan.bank.values_of(s) for s in call.replay_args), ignore_index)[0]
        assert torch.equal(replay, call.replay_expected)
