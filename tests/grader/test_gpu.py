"""What only a GPU can show (marker ``gpu``; run on the lent H200 by scripts/gpu_styles.sh).

- PyTorch's own CUDA softmax backward (torch.ops.aten._softmax_backward_data, which rounds
  y*g to the input dtype before its fp32 sum) passes every value check of a real plan in every
  dtype: the half-precision tolerance is no stricter than the assignment
  (tests/grader/test_half_precision.py simulates its order on the CPU).
- The int32-offset kernel (tests/corpus/softmax_backward/wrong/int32_offsets.py) fails
  large_offsets and nothing else (scripts/gpu_styles.py grades the reference and the correct
  styles, which must pass it), and gets no score: the rows the replay process began to time
  before the checks were evaluated are stopped.

Without a CUDA device these tests are skipped; they are never counted as run on a CPU.
"""

from __future__ import annotations

import pytest
import torch
from grading_support import CORPUS, check, settings, strict_json, summary

from grader.assignments.softmax_backward.checks import build_plan
from grader.checks.tolerance import compare
from grader.harness.protocol import TensorSpec
from grader.runner import grade_file

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the lent H200)")]


def test_aten_cuda_softmax_backward_passes_every_value_call_in_every_dtype():
    plan = build_plan(seed=0, device="cuda")
    dtypes = set()
    for planned in plan.checks:
        for call in planned.calls:
            if not (call.expected and call.expect == "output" and all(isinstance(a, TensorSpec) for a in call.args[:2])):
                continue
            y = plan.bank.values_of(call.args[0]).cuda()
            g = plan.bank.values_of(call.args[1]).cuda()
            got = torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype).cpu()
            result = compare(got, call.expected[0], call.scale[0], call.tolerance, call.slack_of(0))
            assert result.passed, f"aten fails {planned.name} {call.label}: {result.describe()}"
            dtypes.add(y.dtype)
    assert dtypes == {torch.float32, torch.float16, torch.bfloat16}


def _grade_cuda(path, benchmark: str = "off"):
    document = grade_file(path, assignment="softmax_backward", device="cuda", seed=0, settings=settings(),
                          benchmark=benchmark)
    return strict_json(document.to_json())


def test_int32_offsets_fail_large_offsets_only():
    # With the benchmark on: the replay process starts timing the rows before the checks are
    # evaluated, and is stopped when large_offsets fails; the grading ends with no score.
    document = _grade_cuda(CORPUS / "wrong" / "int32_offsets.py", benchmark="on")
    failed = {c["name"] for c in document["checks"] if not c["passed"] and not c["skipped"]}
    assert document["verdict"] == "failed" and failed == {"large_offsets"}, summary(document)
    assert document.get("benchmark") is None and "replay" in document["timings_s"], summary(document)
    message = check(document, "large_offsets")["message"]
    assert "int32" in message, message  # named: wrong rows past 2^31, or the crash with the int64 hint
