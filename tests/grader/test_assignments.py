"""The contract every assignment in the manifest keeps with the generic core, one module
parametrised over the manifest (a new assignment is covered by adding its manifest entry).

Fast and on the CPU: the declared call matches the manifest; every output has a tolerance for
every dtype its checks and benchmark use, and the plan's calls carry exactly those; the timed
selection names every output and input by the declared axes; the benchmark oracle on selected
elements is the selection of the whole oracle (within ORACLE_ULPS fp64 ulps of the scale); the
baseline peer is within the tolerance in every dtype; the floor has a kind and a positive
value; the corpus folders exist and every wrong file names real checks. Grading the corpora is in the corpus modules.
"""

from __future__ import annotations

import math

import pytest
import torch
from grading_support import TESTS_DIR, expected_failed_from_docstring

from grader.assignments import get_assignment
from grader.assignments.protocol import ScalarInput, TensorInput
from grader.benchmark import timed_verification
from grader.benchmark.score import row_floor
from grader.benchmark.verify import load_bench_module
from grader.checks.plan import dtype_name
from grader.checks.tolerance import compare
from grader.harness import replay_child
from grader.manifest import MANIFESTS

NAMES = sorted(MANIFESTS)

#: How far the oracle on selected elements may be from the same elements of the whole oracle:
#: units of fp64's eps (2^-52) of each element's error scale. An fp64 sum or product computed
#: over the selected rows only may be blocked differently from the whole one (an fp64 p @ v
#: over 2 rows differs from one over 96 rows by 2.2e-16); each of its n terms rounds once, so
#: 64 ulps of the scale covers a reordered sum of up to 64 terms at worst and far longer ones
#: in practice, while any formula error is many orders of magnitude larger.
ORACLE_ULPS = 64


def assert_within_ulps(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, what: str,
                       ulps: int = ORACLE_ULPS) -> None:
    """``got`` within ``ulps`` fp64 ulps of ``scale`` of ``want`` at every element (same shape)."""
    assert tuple(got.shape) == tuple(want.shape), (what, tuple(got.shape), tuple(want.shape))
    allowed = ulps * torch.finfo(torch.float64).eps * scale.double().abs()
    err = (got.double() - want.double()).abs()
    bad = ~(err <= allowed) & ~(got.double() == want.double())
    assert not bool(bad.any()), (what, f"{int(bad.sum())} elements beyond {ulps} ulps of the scale, worst "
                                       f"{float((err / allowed).nan_to_num(nan=float('inf')).max()):.3g}x")


def _small(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A benchmark shape cut down to CPU size (same rank, odd sizes kept odd)."""
    return tuple(min(int(d), 96 + (int(d) % 2)) for d in shape)


@pytest.fixture(scope="module", params=NAMES)
def assignment(request):
    return get_assignment(request.param)


def test_the_declared_call_is_the_manifests(assignment):
    arguments = assignment.manifest.arguments
    declared = []
    for item in assignment.inputs:
        if isinstance(item, ScalarInput):
            declared.append(f"{item.name}={item.default}")
        else:
            assert isinstance(item, TensorInput)
            declared.append(item.name)
    assert tuple(declared) == arguments
    bench = load_bench_module(assignment.benchmark.bench_file)
    assert tuple(bench.ARGUMENTS) == tuple(i.name for i in assignment.inputs if isinstance(i, TensorInput))
    assert assignment.outputs and len({o.name for o in assignment.outputs}) == len(assignment.outputs)


def test_every_call_carries_its_outputs_tolerance_from_the_table(assignment):
    plan = assignment.build_plan(seed=0, device="cpu")
    assert tuple(c.name for c in plan.checks) == assignment.check_names
    assert plan.outputs == len(assignment.outputs)
    for dtype in assignment.benchmark.dtypes:
        for out in assignment.outputs:
            assert dtype in out.tolerances, (out.name, dtype)
    calls = [call for check in plan.checks for call in check.calls if call.expect == "output"]
    assert calls
    for call in calls:
        for expectation in call.expectations(0):
            out = assignment.outputs[expectation.index]
            table = {t for t in out.tolerances.values()}
            assert expectation.tolerance in table, (call.id, expectation.name)
            assert expectation.tolerance == assignment.tolerance(expectation.dtype, out.name), call.id


def test_the_timed_selection_covers_every_output_and_input(assignment):
    selection = assignment.benchmark.selection
    assert set(selection.outputs) == {o.name for o in assignment.outputs}
    tensors = [i for i in assignment.inputs if isinstance(i, TensorInput)]
    assert len(selection.inputs) == len(tensors)
    for out in assignment.outputs:
        assert len(selection.outputs[out.name]) == len(out.dims), out.name
        assert {a for a in selection.outputs[out.name] if a} <= set(selection.draws)
    for item, axes in zip(tensors, selection.inputs):
        assert axes is None or len(axes) == len(item.dims), item.name
    for dtype in assignment.benchmark.dtypes:
        verification = timed_verification(assignment, dtype)
        assert [o.name for o in verification.outputs] == [o.name for o in assignment.outputs]


#: (assignment, dtype) for every dtype each assignment is timed in (no dtype it is not timed in).
TIMED = [(name, dtype) for name in NAMES for dtype in get_assignment(name).benchmark.dtypes]


@pytest.mark.parametrize("name, dtype", TIMED)
def test_the_benchmark_oracle_on_selected_elements_and_the_baseline(name, dtype):
    assignment = get_assignment(name)
    bench = load_bench_module(assignment.benchmark.bench_file)
    shape = _small(assignment.benchmark.shapes[0])
    inputs = bench.make_inputs(shape, getattr(torch, dtype), 3, "cpu")
    whole = assignment.benchmark.oracle(inputs, None)
    verification = timed_verification(assignment, dtype)
    outputs = bench.PEERS[assignment.benchmark.baseline](*inputs)
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    [index] = replay_child.draw_indices(verification, outputs, list(inputs), 1, torch.Generator().manual_seed(0))
    part = assignment.benchmark.oracle(inputs, index)
    for spec, out in zip(verification.outputs, outputs):
        expected, scale, slack = whole[spec.name]
        assert tuple(expected.shape) == tuple(out.shape), spec.name
        picked = replay_child.select(expected, spec.axes, index)
        picked_scale = replay_child.select(scale.expand_as(expected), spec.axes, index)
        assert_within_ulps(part[spec.name][0], picked, picked_scale, spec.name)
        result = compare(out, expected, scale.expand_as(expected), spec.tolerance,
                         None if slack is None else slack.expand_as(expected))
        assert result.passed, (spec.name, dtype_name(out.dtype), result.describe())
    worst, bad, changed, _ = replay_child.check_timed_output(outputs, list(inputs), list(inputs), index,
                                                             _OracleOf(assignment), verification)
    assert (int(bad), int(changed)) == (0, 0) and float(worst) <= 1


class _OracleOf:
    """The assignment's benchmark oracle in the shape the replay timer calls it."""

    def __init__(self, assignment) -> None:
        self.benchmark_oracle = assignment.benchmark.oracle


def test_the_floor_has_a_kind_and_a_value(assignment):
    floor = assignment.benchmark.floor
    peaks = {dtype: {"flops_per_s": 1e15} for dtype in assignment.benchmark.dtypes}
    for shape in assignment.benchmark.shapes:
        for dtype in assignment.benchmark.dtypes:
            found = row_floor(floor, tuple(shape), dtype, 3e12, peaks)
            assert found["kind"] == floor.kind and not found["missing"]
            assert math.isfinite(found["s_min"]) and 0 < found["s_min"] <= found["s_two_pass"]
    missing = row_floor(floor, tuple(assignment.benchmark.shapes[0]), assignment.benchmark.dtypes[0], None, {})
    assert missing["missing"] and math.isnan(missing["s_min"])


def test_the_corpus_folders_exist_and_wrong_files_name_real_checks(assignment):
    corpus = TESTS_DIR / "corpus" / assignment.manifest.name
    assert (corpus / "correct").is_dir() and (corpus / "wrong").is_dir()
    for path in sorted((corpus / "wrong").glob("*.py")):
        named = expected_failed_from_docstring(path)
        assert named and named <= set(assignment.check_names), (path.name, named - set(assignment.check_names))
