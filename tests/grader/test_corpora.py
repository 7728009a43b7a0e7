"""Every assignment's corpus graded for real, one module parametrised over the manifest.

For each assignment in grader.manifest.MANIFESTS: the course reference, the starter template,
every correct file (tests/corpus/<assignment>/correct/) and every wrong file
(tests/corpus/<assignment>/wrong/), each graded once (seed 0, CPU interpreter, in the sandboxed
child) in the session's pool. A new assignment with a corpus folder is covered with no edit here.

Every wrong file is a complete, plausible Triton submission with one known mistake; its
docstring says which checks it must fail ("Expected failed checks: ..."); the test asserts that
exact set failed and every other check passed, or was skipped: the assignment's GPU-only checks
(a file whose only failure is GPU-only passes here; tests/grader/test_gpu.py grades it on a GPU),
and triton_kernel where no value check passed (nothing right was left to replay).
tests/grader/test_corpus_hints.py reads the same gradings (the same keys) for its hint test.

The tables below are data about the corpora (required styles, the mistake each wrong file
holds, the diagnosis a value check adds); the tests after them are what a particular file shows
beyond its verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from grading_support import (
    TESTS_DIR,
    check,
    expected_failed_from_docstring,
    failed_checks,
    passed_checks,
    requires_bwrap,
    settings,
    skipped_checks,
    summary,
)

from grader.assignments import get_assignment
from grader.assignments.protocol import corpus_minimums
from grader.manifest import MANIFESTS
from grader.report.document import ResultDocument

pytestmark = requires_bwrap

NAMES = tuple(MANIFESTS)

#: The styles each correct corpus must have (one of them the Triton tutorial's for the op).
STYLES = {
    "softmax_backward": {"whole_row_block.py", "chunked_loop.py", "tiles_2d.py", "autotuned.py", "block_pointers.py",
                         "scratch_two_kernels.py"},
    "softmax_cross_entropy_backward": {"online_rowloop.py", "three_pass_lse.py"},
    "gemm_epilogue": {"tutorial_grouped.py", "block_pointers.py", "split_k_two_kernels.py"},
    "layernorm_backward": {"tutorial_locks.py", "atomics.py", "column_pass.py"},
    "attention_forward": {"tutorial06_block_pointers.py", "two_pass_lse.py", "prescaled_q_head_loop.py"},
    "attention_backward": {"tutorial06_bwd.py", "atomic_dq.py", "inline_delta_exp2.py"},
}

#: Where an assignment lists its known mistakes, one wrong file each, and no file outside the list.
MISTAKES = {
    "softmax_backward": {
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
    },
    "softmax_cross_entropy_backward": {
        "softmax without the max subtraction (unstable)": "unstable_softmax.py",
        "forgetting the mean's 1/n_valid": "forgot_mean.py",
        "flipped sign (y - p)": "flipped_sign.py",
        "softmax over the wrong axis (dim 0)": "wrong_axis.py",
        "ignoring ignore_index": "ignores_ignore_index.py",
        "mean over all M rows instead of n_valid": "mean_over_all_rows.py",
        "upstream gradient dropped": "forgot_upstream_grad.py",
        "online softmax without rescaling the running sum": "online_no_rescale.py",
        "targets read as contiguous": "ignores_target_stride.py",
        "no check of out-of-range targets": "no_target_check.py",
        "no requires_grad rejection": "no_requires_grad_check.py",
        "pure PyTorch": "pure_pytorch.py",
        "n_valid counted by PyTorch outside the Triton launches": "n_valid_from_torch.py",
        "the output allocated with torch.empty_like(x) (x's strides when x is transposed)": "empty_like_output.py",
        "a three-class fast path, unmasked, reached only by a training step's batch": "nan_on_training_batch.py",
    },
}

#: The sentence a failing value check adds when the output matches a common mistake:
#: (assignment, wrong file) -> (check, fragment).
DIAGNOSES = {
    ("softmax_backward", "sum_g_instead_of_dot.py"): ("example_two_element", "the reduction must be sum(y*g), not sum(g)"),
    ("softmax_backward", "flipped_sign.py"): ("example_two_element", "the sign of the subtraction is flipped"),
    ("softmax_backward", "missing_dot_term.py"): ("example_two_element", "the dot term is missing"),
    ("softmax_backward", "wrong_axis.py"): ("autograd_fp32", "the sum ran along dim 0"),  # one row: y*g itself
    ("softmax_backward", "all_zeros.py"): ("example_two_element", "all zeros"),
    ("softmax_cross_entropy_backward", "flipped_sign.py"): ("example_three_class", "the sign is flipped"),
    ("softmax_cross_entropy_backward", "forgot_mean.py"): ("example_three_class", "without the division by n_valid"),
    ("softmax_cross_entropy_backward", "wrong_axis.py"): ("autograd_fp32", "a softmax over dim 0"),
    ("softmax_cross_entropy_backward", "forgot_upstream_grad.py"): ("autograd_fp32",
                                                                    "the upstream gradient grad is missing"),
    ("softmax_cross_entropy_backward", "ignores_ignore_index.py"): ("ignore_index", "ignore_index is not honoured"),
    ("softmax_cross_entropy_backward", "mean_over_all_rows.py"): ("ignore_index",
                                                                  "divides by every row (M) instead of n_valid"),
    ("gemm_epilogue", "gelu_erf.py"): ("example_small", "the erf GELU"),
    ("gemm_epilogue", "gelu_before_bias.py"): ("example_small", "the bias was added after GELU"),
    ("gemm_epilogue", "bias_on_rows.py"): ("float16_values", "the bias added along rows"),
    ("layernorm_backward", "missing_xhat_term.py"): ("autograd_fp32", "the xhat * c1 term of dx is missing"),
    ("layernorm_backward", "missing_mean_term.py"): ("autograd_fp32", "the c2 = mean_j(w*dy) term of dx is missing"),
    ("layernorm_backward", "divides_by_rstd.py"): ("autograd_fp32", "rstd was used as the standard deviation"),
    ("attention_forward", "no_causal_mask.py"): ("float16_values", "attention without the causal mask"),
    ("attention_forward", "no_scale.py"): ("float16_values", "scores without the 1/sqrt(D) scale"),
    ("attention_forward", "empty_like_output.py"): ("output_contract", "q permuted(0, 2, 1, 3), k permuted(0, 2, 1, 3), "
                                                                       "v permuted(0, 2, 1, 3): output is not contiguous"),
    ("attention_backward", "wrong_lse_base.py"): ("float16_values", "the natural-log lse used as a base-2 one"),
    ("attention_backward", "delta_missing.py"): ("float16_values", "without Delta"),
    ("attention_backward", "no_causal_mask.py"): ("float16_values", "keys j > i must be masked before the exponential"),
    ("attention_backward", "inputs_through_bf16.py"): ("float16_values", "rounded to bfloat16 (8 significant bits)"),
}

#: Checks each starter template passes already: its wrapper validates its inputs.
TEMPLATE_PASSES = {
    "softmax_cross_entropy_backward": {"rejects_mismatch", "rejects_requires_grad", "output_contract"},
    "gemm_epilogue": {"rejects_mismatch", "rejects_requires_grad"},
    "layernorm_backward": {"rejects_mismatch", "rejects_requires_grad"},
    "attention_forward": {"rejects_mismatch", "rejects_requires_grad", "rejects_unsupported", "output_contract"},
    "attention_backward": {"rejects_mismatch", "rejects_requires_grad"},
}


def _files(name: str, folder: str) -> list[Path]:
    return sorted((TESTS_DIR / "corpus" / name / folder).glob("*.py"))


def key(name: str, path: Path) -> str:
    """The pool key of a file's grading (tests/grader/test_corpus_hints.py uses it too)."""
    return f"{name}/{path.parent.name}/{path.name}"


def _params(folder: str):
    return [pytest.param(name, path, id=f"{name}/{path.stem}") for name in NAMES for path in _files(name, folder)]


def _gpu_only(name: str) -> set[str]:
    return set(get_assignment(name).gpu_only_checks)


def submit_assignment(gradings, name: str) -> None:
    """Queue every corpus grading of one assignment (a key already queued is not graded again).
    The limit is generous: these tests are about verdicts, and the slowest files (fp16 kernels
    with short chunks) run for minutes under the interpreter on a busy machine."""
    assignment = get_assignment(name)
    for path in [assignment.reference_file, assignment.template_file, *_files(name, "correct"),
                 *_files(name, "wrong")]:
        gradings.submit(key(name, path), path, assignment=name, grader_settings=settings(child_timeout_s=900))


class CorpusGradings:
    """The corpus gradings of the assignments the session's tests ask for, and no other:
    ``pytest tests/grader/test_corpora.py -k NAME`` grades NAME's corpus only.

    The assignments of the selected tests that take a ``name`` are queued when the fixture is
    set up (so the pool works on all of them at once); any other is queued by the first
    ``result`` of one of its files (the tests about particular files)."""

    def __init__(self, gradings, names) -> None:
        self.gradings = gradings
        self.queued: set[str] = set()
        for name in names:
            self.queue(name)

    def queue(self, name: str) -> None:
        if name not in self.queued:
            self.queued.add(name)
            submit_assignment(self.gradings, name)

    def result(self, key_: str) -> dict:
        self.queue(key_.split("/")[0])
        return self.gradings.result(key_)


def selected_names(request) -> list[str]:
    """The assignments named by the ``name`` parameter of this session's selected corpus tests."""
    found = {}
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if Path(str(item.fspath)).name in CORPUS_MODULES and params.get("name") in NAMES:
            found[params["name"]] = None
    return list(found)


#: The modules whose tests read corpus gradings (tests/grader/test_corpus_hints.py too).
CORPUS_MODULES = {"test_corpora.py", "test_corpus_hints.py"}


@pytest.fixture(scope="module")
def graded(gradings, request):
    return CorpusGradings(gradings, selected_names(request))


def _result(graded, name: str, folder: str, file: str) -> dict:
    return graded.result(f"{name}/{folder}/{file}")


# ---- every assignment: the reference, the template, the correct and wrong corpora ----------------
@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_every_check_well_inside_the_tolerances(name, graded):
    assignment = get_assignment(name)
    document = graded.result(key(name, assignment.reference_file))
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert document["assignment"] == name
    assert [c["name"] for c in document["checks"]] == list(assignment.check_names)
    assert skipped_checks(document) == _gpu_only(name), summary(document)
    for c in document["checks"]:
        if c["max_err_over_tolerance"] is not None:
            assert c["max_err_over_tolerance"] < 0.6, c  # half an ulp of the one allowed for the result
    assert ResultDocument.model_validate(document).exit_code == 0
    assert document["log"]["total_bytes"] < 4096, document["log"]  # a clean run prints (almost) nothing


@pytest.mark.parametrize("name", NAMES)
def test_the_starter_template_runs_and_fails(name, graded):
    document = graded.result(key(name, get_assignment(name).template_file))
    assert document["verdict"] == "failed" and document["error"] is None, summary(document)
    assert TEMPLATE_PASSES.get(name, set()) <= passed_checks(document), summary(document)


@pytest.mark.parametrize("name", NAMES)
def test_the_corpora_have_their_styles_and_mistakes(name):
    # The assignment's own minimums (``corpus``: three correct styles and eight known mistakes
    # unless it says otherwise; docs/authoring.md); STYLES names the ones an assignment must
    # keep, where it lists them.
    minimums = corpus_minimums(get_assignment(name))
    correct = {p.name for p in _files(name, "correct")}
    assert correct >= STYLES.get(name, set()) and len(correct) >= minimums.correct, (minimums, correct)
    wrong = {p.name for p in _files(name, "wrong")}
    assert len(wrong) >= minimums.wrong, (minimums, wrong)
    if name in MISTAKES:
        assert set(MISTAKES[name].values()) == wrong, set(MISTAKES[name].values()) ^ wrong


@pytest.mark.parametrize("name, path", _params("correct"))
def test_correct_files_pass_every_check_that_runs(name, path, graded):
    document = graded.result(key(name, path))
    assignment = get_assignment(name)
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(assignment.check_names), summary(document)
    assert skipped_checks(document) == _gpu_only(name), summary(document)
    for result in document["checks"]:
        ratio = result["max_err_over_tolerance"]
        assert result["skipped"] or ratio is None or ratio <= 1.0, (result["name"], ratio)


@pytest.mark.parametrize("name, path", _params("wrong"))
def test_docstring_names_only_real_checks(name, path):
    expected = expected_failed_from_docstring(path)
    assert expected, f"{path.name} must fail at least one check"
    assert expected <= set(get_assignment(name).check_names), f"unknown check names in {path.name}"


@pytest.mark.parametrize("name, path", _params("wrong"))
def test_wrong_files_fail_exactly_the_expected_checks(name, path, graded):
    document = graded.result(key(name, path))
    names = get_assignment(name).check_names
    expected = expected_failed_from_docstring(path) - _gpu_only(name)  # CPU interpreter
    assert document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(names), "every check is listed, in order"
    assert _gpu_only(name) <= skipped_checks(document) <= {"triton_kernel", *_gpu_only(name)}, summary(document)
    assert failed_checks(document) == expected, summary(document)
    assert passed_checks(document) | skipped_checks(document) == set(names) - expected, summary(document)
    assert document["verdict"] == ("failed" if expected else "passed"), summary(document)


@pytest.mark.parametrize("name, file", sorted(DIAGNOSES), ids=[f"{n}/{f}" for n, f in sorted(DIAGNOSES)])
def test_a_value_failure_names_the_mistake(name, file, graded):
    check_name, fragment = DIAGNOSES[(name, file)]
    message = check(_result(graded, name, "wrong", file), check_name)["message"]
    assert fragment in message, message
    if name == "softmax_cross_entropy_backward":
        assert "Your output matches" in message and "Hint:" not in message.split("(+")[0], message


@pytest.mark.parametrize("name", NAMES)
def test_nothing_is_compiled_under_the_interpreter(name, graded):
    for path in _files(name, "correct"):
        document = graded.result(key(name, path))
        assert document["timings_s"]["compile"] == 0.0, (name, path.name, document["timings_s"])


# ---- softmax_backward: what particular files show ---------------------------------------------------
SOFTMAX = "softmax_backward"


def test_autotuned_kernel_runs_its_first_config_under_the_interpreter_and_says_so(graded):
    # Without the narrowing, every call raised "0 active drivers" (Triton 3.6's autotuner times
    # configs with the GPU driver's benchmarker, which the interpreter lacks).
    document = _result(graded, SOFTMAX, "correct", "autotuned.py")
    assert document["verdict"] == "passed", summary(document)
    notes = [n for n in document["notes"] if "@triton.autotune kernel _vjp_autotuned: 3 configs" in n]
    assert len(notes) == 1, document["notes"]
    assert "BLOCK_N: 1024" in notes[0] and "first one" in notes[0], notes[0]
    launches = check(document, "triton_kernel")["details"]
    assert launches["launches"] == launches["calls"], launches  # one launch per call: configs were not run


def test_heuristics_kernel_needs_no_narrowing(graded):
    document = _result(graded, SOFTMAX, "correct", "tiles_2d.py")
    assert document["verdict"] == "passed" and document["notes"] == [], summary(document)


def test_value_failure_message_shows_where_and_by_how_much(graded):
    message = check(_result(graded, SOFTMAX, "wrong", "sum_g_instead_of_dot.py"), "autograd_fp32")["message"]
    for part in ("elements outside tolerance", "worst at [", "got ", "expected ", "allowed", "x scale",
                 "Your output matches y*(g - sum(g))"):
        assert part in message, message
    assert "Hint:" not in message, message  # the named cause replaces the generic hint


def test_stale_memoised_result_is_reported_on_a_refill(graded):
    assert "refill" in check(_result(graded, SOFTMAX, "wrong", "memoised_by_pointer.py"), "fresh_results")["message"]


def test_half_precision_dot_is_caught_in_fp16_and_not_in_bf16(graded):
    # The fp16 running total is off by fp16 ulps of |dot|; the value-relative part of the
    # tolerance (vtol) does not cover that, so the first fp16 case already shows it.
    result = check(_result(graded, SOFTMAX, "wrong", "half_precision_dot.py"), "half_precision")
    assert not result["passed"]
    assert result["message"].startswith(("(4, 1000) float16", "(3, 4097) float16", "(4, 65536) float16")), \
        result["message"]


@pytest.mark.parametrize("file", ["half_precision_dot.py", "half_precision_lanes.py"])
def test_half_precision_accumulation_is_named(file, graded):
    message = check(_result(graded, SOFTMAX, "wrong", file), "half_precision")["message"]
    assert "accumulated in float16" in message and ("Accumulate y*g in fp32" in message or "Keep dot" in message), message
    assert "too few programs" not in message and "Hint:" not in message, message


def test_half_precision_subtraction_is_named(graded):
    document = _result(graded, SOFTMAX, "wrong", "half_precision_subtraction.py")
    for name in ("half_precision", "strided_inputs"):
        message = check(document, name)["message"]
        assert "dot rounded to float16 before the subtraction" in message, message


def test_fp16_lanes_show_on_the_rows_with_exact_products(graded):
    # Up to 1024 columns each lane holds one product rounded to fp16 (allowed arithmetic,
    # tests/grader/test_half_precision.py): the failures come from the exact 4096-column rows.
    document = _result(graded, SOFTMAX, "wrong", "half_precision_lanes.py")
    assert check(document, "half_precision")["message"].startswith("(4, 4096) float16, exactly representable")
    strided = check(document, "strided_inputs")["message"]
    assert "exactly representable products" in strided and "load y and g" not in strided, strided


def test_non_contiguous_output_of_empty_like_is_named(graded):
    message = check(_result(graded, SOFTMAX, "wrong", "empty_like_output.py"), "output_contract")["message"]
    assert "y transposed, g transposed: output is not contiguous (strides (1, 4))" in message, message


def test_int32_offsets_pass_on_cpu_with_large_offsets_skipped(graded):
    # The overflow needs tensors past 2^31 elements: a GPU-only check (tests/grader/test_gpu.py).
    large = check(_result(graded, SOFTMAX, "wrong", "int32_offsets.py"), "large_offsets")
    assert large["skipped"] and not large["passed"] and large["message"].startswith("not run: GPU only"), large


def test_a_hint_is_given_only_where_its_pattern_matches(graded):
    # sum(g) fails every value check: each names the formula it matches or points at
    # autograd_fp32; none appends its own (shape, refill, row-sum) hint. The fp32 output for
    # fp16 inputs fails strided_inputs' fp16 case, which points at half_precision instead of
    # suggesting strides.
    document = _result(graded, SOFTMAX, "wrong", "sum_g_instead_of_dot.py")
    for name in ("edge_shapes", "fresh_results", "row_sum_invariant"):
        message = check(document, name)["message"]
        assert "autograd_fp32 fails too, on simpler inputs" in message or "Your output matches" in message, message
        assert "Hint:" not in message, message
    own = check(_result(graded, SOFTMAX, "wrong", "truncated_long_rows.py"), "edge_shapes")["message"]
    assert "fails too" not in own and ("Hint: handle N=1" in own or "left those outputs unwritten" in own), own
    message = check(_result(graded, SOFTMAX, "wrong", "fp32_output_for_half.py"), "strided_inputs")["message"]
    assert "half_precision fails too" in message and "Hint: load y and g" not in message, message


def test_precision_errors_with_correct_grids_are_not_called_coverage_bugs(graded):
    for file in ("half_precision_dot.py", "half_precision_lanes.py", "half_precision_subtraction.py"):
        for result in _result(graded, SOFTMAX, "wrong", file)["checks"]:
            assert "too few programs" not in result["message"], (file, result["message"])
            assert "stops short" not in result["message"], (file, result["message"])


def test_wrong_dtype_is_named(graded):
    document = _result(graded, SOFTMAX, "wrong", "fp32_output_for_half.py")
    assert "dtype float32, expected float16" in check(document, "output_contract")["message"]
    assert "keep the input dtype" in check(document, "half_precision")["message"]


def test_writing_into_g_is_named(graded):
    message = check(_result(graded, SOFTMAX, "wrong", "writes_into_g.py"), "output_contract")["message"]
    assert "shares memory with y or g" in message or "was modified by the call" in message, message


@pytest.mark.parametrize("name", [SOFTMAX, "softmax_cross_entropy_backward"])
def test_pure_pytorch_launches_no_kernel(name, graded):
    kernel = check(_result(graded, name, "wrong", "pure_pytorch.py"), "triton_kernel")
    assert not kernel["passed"] and kernel["details"]["failed"] == kernel["details"]["calls"] > 0, kernel
    assert kernel["details"]["launches"] == 0 and "launched no @triton.jit kernel" in kernel["message"], kernel


# ---- softmax_cross_entropy_backward: what particular files show ------------------------------------
XENT = "softmax_cross_entropy_backward"


def test_xent_reference_runs_few_interpreter_programs_per_call():
    """What keeps the reference's CPU grading fast (about 15 s on an idle 2-core machine):
    under the interpreter each program is a numpy call per block, so every call of the plan
    launches one counting program and at most two row programs. (Wall-clock limits are not
    asserted: the test machine is shared.)"""
    import torch

    from grader.assignments.softmax_cross_entropy_backward import reference as ref

    plan = get_assignment(XENT).build_plan(seed=0, device="cpu")
    for check_ in plan.checks:
        for call in check_.calls:
            if call.expect != "output":
                continue
            m, c = call.args[0].size
            launch = ref._plan(m, c, 4, torch.device("cpu"))
            programs = -(-m // launch["ROWS"]) if launch["kind"] == "rows" else m
            assert launch["kind"] == "rows" and programs <= 2, (call.id, launch)
            assert -(-m // min(1 << (m - 1).bit_length(), 1 << 16)) == 1, call.id  # one counting program


def test_xent_template_fails_what_it_leaves_to_do(graded):
    # Its wrapper already validates and launches the kernels; the kernel bodies and the target
    # check are the student's work.
    document = graded.result(key(XENT, get_assignment(XENT).template_file))
    assert {"example_three_class", "autograd_fp32", "rejects_out_of_range_targets"} <= failed_checks(document)
    assert not check(document, "triton_kernel")["passed"], summary(document)


def test_unstable_softmax_shows_nan_from_finite_logits(graded):
    message = check(_result(graded, XENT, "wrong", "unstable_softmax.py"), "stability_large_logits")["message"]
    assert "NaN" in message and "logits at +-1e4" in message, message


def test_row_sum_failure_says_the_row_was_ignored(graded):
    message = check(_result(graded, XENT, "wrong", "ignores_ignore_index.py"), "row_sum_invariant")["message"]
    assert "(ignored) of dx sums to" in message, message


def test_missing_target_check_is_reported_per_target(graded):
    message = check(_result(graded, XENT, "wrong", "no_target_check.py"), "rejects_out_of_range_targets")["message"]
    for case in ("t = [0, 3, 8, 7] with C = 8: did not raise", "t = [0, -1, 3, 7]", "with ignore_index=-1"):
        assert case in message, message


def test_count_outside_triton_is_caught_by_the_replay(graded):
    kernel = check(_result(graded, XENT, "wrong", "n_valid_from_torch.py"), "triton_kernel")
    assert "did not reproduce the output" in kernel["message"], kernel
    assert "PyTorch operators outside Triton" in kernel["message"], kernel
    assert kernel["details"]["launches"] > 0, kernel


def test_xent_reference_launches_replay_on_new_targets_and_grad(graded):
    kernel = check(graded.result(key(XENT, get_assignment(XENT).reference_file)), "triton_kernel")
    # two launches per value call: the target count and the row kernel
    assert kernel["passed"] and kernel["details"]["launches"] == 2 * kernel["details"]["calls"], kernel


def test_cli_grades_the_xent_reference_with_another_seed(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("GRADER_")}
    env["GRADER_SANDBOX"] = "bwrap"
    env["PYTHONPATH"] = str(TESTS_DIR.parent) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(get_assignment(XENT).reference_file), "--assignment", XENT,
         "--device", "cpu", "--json", "-", "--seed", "7"],
        check=False, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    assert document["seed"] == 7 and document["assignment"] == XENT
    assert all(c["passed"] for c in document["checks"]), summary(document)


# ---- the CPU interpreter as the GPU compiler (issue #37) ----------------------------------------
def test_tensor_and_masks_run_element_wise_and_the_notes_say_so(graded):
    # FlagGems' `row_mask and col_mask`: element-wise as compiled (Python's `and` wrote every row
    # of the block, dw NaN, then a crash); the compiler's deprecation warning is a note.
    document = _result(graded, "layernorm_backward", "correct", "flaggems_two_kernels.py")
    notes = " ".join(document["notes"])
    assert "deprecated for non-scalar tensors" in notes and "element-wise and" in notes, document["notes"]
    # Its dw/db kernel runs one program per 32 columns: a slow call under the interpreter is
    # named with its programs (what to change there), whenever it took SLOW_CALL_S or more.
    slow = document["timings_s"]["slowest_call"] >= 5.0
    assert slow == ("one after another in Python" in notes), (document["timings_s"], document["notes"])


def test_libdevice_math_runs_on_the_cpu(graded):
    document = _result(graded, "gemm_epilogue", "correct", "libdevice_tanh.py")
    assert document["verdict"] == "passed", summary(document)
    assert any("deprecated for non-scalar tensors" in note for note in document["notes"]), document["notes"]
