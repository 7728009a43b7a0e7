"""The wrong-solution corpus (tests/corpus/wrong/): each file fails exactly the checks it should.

Every file is a complete, plausible Triton submission with one known mistake. Its docstring
says which checks it must fail ("Expected failed checks: ..."); the test asserts that exact
set failed and that every other check ran and passed. On the CPU interpreter the GPU-only
checks (spec.GPU_ONLY_CHECKS) are skipped, so a file whose only expected failure is GPU-only
(int32_offsets.py) passes there; tests/grader/test_gpu.py grades it on a GPU. A wrong file that
passes a check it should fail is a grader weakness: those are marked xfail(strict=True) with
the reason, so the suite stays green and turns red the day the grader catches them (then drop
the mark).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import (
    CORPUS,
    check,
    expected_failed_from_docstring,
    failed_checks,
    passed_checks,
    requires_bwrap,
    settings,
    skipped_checks,
    summary,
)

from grader.assignments.softmax_backward.spec import CHECK_NAMES, GPU_ONLY_CHECKS

pytestmark = requires_bwrap

WRONG_DIR = CORPUS / "wrong"
FILES = sorted(WRONG_DIR.glob("*.py"))

# One file per known mistake (issue 2's list). A missing file fails test_every_mistake_has_a_file.
MISTAKES = {
    "sum(g) instead of sum(y*g)": "sum_g_instead_of_dot.py",
    "reduction along the wrong axis": "wrong_axis.py",
    "flipped sign": "flipped_sign.py",
    "ignored strides": "ignored_strides.py",
    "no requires_grad rejection": "no_requires_grad_check.py",
    "fp32 output for fp16 input": "fp32_output_for_half.py",
    "truncated long rows": "truncated_long_rows.py",
    "output written into g": "writes_into_g.py",
    "memoised results": "memoised_by_pointer.py",
    "pure PyTorch": "pure_pytorch.py",
    "all zeros": "all_zeros.py",
    "y*g without the dot term": "missing_dot_term.py",
    "dot accumulated in half precision (running total)": "half_precision_dot.py",
    "dot accumulated in half precision (fp16 lanes)": "half_precision_lanes.py",
    "g - dot in half precision": "half_precision_subtraction.py",
    "int32 row offsets (overflow past 2^31 elements)": "int32_offsets.py",
    "output allocated with torch.empty_like(y)": "empty_like_output.py",
}

# Grader weaknesses: wrong files that pass a check they should fail (see the file's docstring).
KNOWN_WEAKNESSES: dict[str, str] = {}

# The hint that the value checks add when the output matches a common mistake.
DIAGNOSES = {
    "sum_g_instead_of_dot.py": "the reduction must be sum(y*g), not sum(g)",
    "flipped_sign.py": "the sign of the subtraction is flipped",
    "missing_dot_term.py": "the dot term is missing",
    "wrong_axis.py": "the sum ran along dim 0",
    "all_zeros.py": "all zeros",
}


def _key(path: Path) -> str:
    return f"wrong/{path.name}"


@pytest.fixture(scope="module")
def wrong(gradings):
    """Every wrong file, graded once (seed 0, CPU interpreter), two at a time."""
    for path in FILES:
        # A generous limit: these tests are about verdicts, and the slowest file here (an fp16
        # kernel with 128-column chunks) runs for minutes under the interpreter on a busy machine.
        gradings.submit(_key(path), path, grader_settings=settings(child_timeout_s=900))
    return gradings


def _param(path: Path):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_WEAKNESSES[path.name])] if path.name in KNOWN_WEAKNESSES else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_every_mistake_has_a_file():
    present = {path.name for path in FILES}
    assert set(MISTAKES.values()) <= present, f"missing corpus files: {set(MISTAKES.values()) - present}"
    assert present <= set(MISTAKES.values()), f"files not in the MISTAKES table: {present - set(MISTAKES.values())}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_docstring_names_only_real_checks(path: Path):
    expected = expected_failed_from_docstring(path)
    assert expected, f"{path.name} must fail at least one check"
    assert expected <= set(CHECK_NAMES), f"unknown check names: {expected - set(CHECK_NAMES)}"


@pytest.mark.parametrize("path", [_param(p) for p in FILES])
def test_fails_exactly_the_expected_checks(path: Path, wrong):
    document = wrong.result(_key(path))
    expected = expected_failed_from_docstring(path) - set(GPU_ONLY_CHECKS)  # CPU interpreter
    assert document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(CHECK_NAMES), "every check is listed, in order"
    # GPU-only checks are skipped on the CPU interpreter; triton_kernel is skipped when no call's
    # output was right (nothing to attribute to Triton).
    assert set(GPU_ONLY_CHECKS) <= skipped_checks(document) <= {"triton_kernel", *GPU_ONLY_CHECKS}, summary(document)
    assert failed_checks(document) == expected, summary(document)
    assert passed_checks(document) | skipped_checks(document) == set(CHECK_NAMES) - expected, summary(document)
    assert document["verdict"] == ("failed" if expected else "passed"), summary(document)


@pytest.mark.parametrize("name, fragment", sorted(DIAGNOSES.items()))
def test_value_failure_names_the_mistake(name: str, fragment: str, wrong):
    document = wrong.result(f"wrong/{name}")
    message = check(document, "example_two_element")["message"]
    if name == "wrong_axis.py":  # one row: the column sum is y*g itself, so look at a multi-row case
        message = check(document, "autograd_fp32")["message"]
    assert fragment in message, message


def test_value_failure_message_shows_where_and_by_how_much(wrong):
    message = check(wrong.result("wrong/sum_g_instead_of_dot.py"), "autograd_fp32")["message"]
    for part in ("elements outside tolerance", "worst at [", "got ", "expected ", "allowed", "x scale",
                 "Your output matches y*(g - sum(g))"):
        assert part in message, message
    assert "Hint:" not in message, message  # the named cause replaces the generic hint


def test_stale_memoised_result_is_reported_on_a_refill(wrong):
    document = wrong.result("wrong/memoised_by_pointer.py")
    assert "refill" in check(document, "fresh_results")["message"]


def test_half_precision_dot_is_caught_in_fp16_and_not_in_bf16(wrong):
    # The fp16 running total is off by fp16 ulps of |dot|; the value-relative part of the
    # tolerance (vtol) does not cover that, so the first fp16 case already shows it.
    check_result = check(wrong.result("wrong/half_precision_dot.py"), "half_precision")
    assert not check_result["passed"]
    assert check_result["message"].startswith(("(4, 1000) float16", "(3, 4097) float16", "(4, 65536) float16")), \
        check_result["message"]


@pytest.mark.parametrize("name", ["half_precision_dot.py", "half_precision_lanes.py"])
def test_half_precision_accumulation_is_named(name: str, wrong):
    message = check(wrong.result(f"wrong/{name}"), "half_precision")["message"]
    assert "accumulated in float16" in message and ("Accumulate y*g in fp32" in message or "Keep dot" in message), message
    assert "too few programs" not in message and "Hint:" not in message, message


def test_half_precision_subtraction_is_named(wrong):
    document = wrong.result("wrong/half_precision_subtraction.py")
    for name in ("half_precision", "strided_inputs"):
        message = check(document, name)["message"]
        assert "dot rounded to float16 before the subtraction" in message, message


def test_fp16_lanes_show_on_the_rows_with_exact_products(wrong):
    # Up to 1024 columns each lane holds one product rounded to fp16 (allowed arithmetic,
    # tests/grader/test_half_precision.py): the failures come from the exact 4096-column rows.
    document = wrong.result("wrong/half_precision_lanes.py")
    assert check(document, "half_precision")["message"].startswith("(4, 4096) float16, exactly representable")
    strided = check(document, "strided_inputs")["message"]
    assert "exactly representable products" in strided and "load y and g" not in strided, strided


def test_non_contiguous_output_of_empty_like_is_named(wrong):
    message = check(wrong.result("wrong/empty_like_output.py"), "output_contract")["message"]
    assert "y transposed, g transposed: output is not contiguous (strides (1, 4))" in message, message


def test_int32_offsets_pass_on_cpu_with_large_offsets_skipped(wrong):
    # The overflow needs tensors past 2^31 elements: a GPU-only check (tests/grader/test_gpu.py).
    large = check(wrong.result("wrong/int32_offsets.py"), "large_offsets")
    assert large["skipped"] and not large["passed"] and large["message"].startswith("not run: GPU only"), large


def test_a_hint_is_given_only_where_its_pattern_matches(wrong):
    # sum(g) fails every value check: each names the formula it matches or points at
    # autograd_fp32; none appends its own (shape, refill, row-sum) hint. The fp32 output for
    # fp16 inputs fails strided_inputs' fp16 case, which points at half_precision instead of
    # suggesting strides.
    document = wrong.result("wrong/sum_g_instead_of_dot.py")
    for name in ("edge_shapes", "fresh_results", "row_sum_invariant"):
        message = check(document, name)["message"]
        assert "autograd_fp32 fails too, on simpler inputs" in message or "Your output matches" in message, message
        assert "Hint:" not in message, message
    own = check(wrong.result("wrong/truncated_long_rows.py"), "edge_shapes")["message"]  # autograd_fp32 passed
    assert "fails too" not in own and ("Hint: handle N=1" in own or "left those outputs unwritten" in own), own
    message = check(wrong.result("wrong/fp32_output_for_half.py"), "strided_inputs")["message"]
    assert "half_precision fails too" in message and "Hint: load y and g" not in message, message


def test_precision_errors_with_correct_grids_are_not_called_coverage_bugs(wrong):
    for name in ("half_precision_dot.py", "half_precision_lanes.py", "half_precision_subtraction.py"):
        for result in wrong.result(f"wrong/{name}")["checks"]:
            assert "too few programs" not in result["message"], (name, result["message"])
            assert "stops short" not in result["message"], (name, result["message"])


def test_wrong_dtype_is_named(wrong):
    document = wrong.result("wrong/fp32_output_for_half.py")
    assert "dtype float32, expected float16" in check(document, "output_contract")["message"]
    assert "keep the input dtype" in check(document, "half_precision")["message"]


def test_writing_into_g_is_named(wrong):
    message = check(wrong.result("wrong/writes_into_g.py"), "output_contract")["message"]
    assert "shares memory with y or g" in message or "was modified by the call" in message, message


def test_pure_pytorch_launches_no_kernel(wrong):
    kernel = check(wrong.result("wrong/pure_pytorch.py"), "triton_kernel")
    assert not kernel["passed"] and kernel["details"]["failed"] == kernel["details"]["calls"] > 0, kernel
    assert "launched no @triton.jit kernel" in kernel["message"], kernel
