"""The course reference solution passes every check on the CPU interpreter, through the library
(grader.runner.grade_file) and through the command line (`python -m grader check`), whose exit
code says the verdict: 0 passed, 1 failed, 2 error caused by the submission, 3 infrastructure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from grading_support import CORPUS, REFERENCE, requires_bwrap, strict_json, summary

from grader.assignments.softmax_backward.spec import CHECK_NAMES, GPU_ONLY_CHECKS
from grader.report.document import SCHEMA_VERSION, ResultDocument

pytestmark = requires_bwrap

CLI_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def reference(gradings) -> dict:
    return gradings.submit("reference", REFERENCE).result(timeout=900)


def test_reference_passes_every_check(reference):
    assert reference["verdict"] == "passed", summary(reference)
    assert reference["error"] is None
    assert [c["name"] for c in reference["checks"]] == list(CHECK_NAMES)
    ran = [c for c in reference["checks"] if c["name"] not in GPU_ONLY_CHECKS]
    assert all(c["passed"] and not c["skipped"] for c in ran), summary(reference)
    gpu_only = [c for c in reference["checks"] if c["name"] in GPU_ONLY_CHECKS]
    assert all(c["skipped"] and not c["passed"] and "GPU only" in c["message"] for c in gpu_only), summary(reference)
    assert ResultDocument.model_validate(reference).exit_code == 0


def test_reference_document_describes_the_run(reference):
    assert reference["schema"] == SCHEMA_VERSION and reference["assignment"] == "softmax_backward"
    assert reference["device"] == "cpu (Triton interpreter)"
    assert reference["sandbox"].startswith("bubblewrap")
    assert reference["seed"] == 0
    assert reference["benchmark"] is None
    for package in ("python", "torch", "triton"):
        assert reference["versions"][package], package
    assert reference["timings_s"]["child"] > 0 and reference["duration_s"] >= reference["timings_s"]["child"]
    assert reference["log"]["total_bytes"] < 4096, reference["log"]  # a clean run prints (almost) nothing
    json.dumps(reference)  # the document is plain JSON


def test_reference_stays_well_inside_the_tolerances(reference):
    for c in reference["checks"]:
        if c["max_err_over_tolerance"] is not None:
            assert c["max_err_over_tolerance"] < 1.0, c


# ---- the command line ----------------------------------------------------------------------------
def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("GRADER_")}
    env["GRADER_SANDBOX"] = "bwrap"
    return env


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict:
    """Every command line run of this module, started at once (separate processes), then awaited."""
    work = tmp_path_factory.mktemp("grader-cli")  # a private folder as the worker's cwd
    out_file = work / "wrong.json"
    commands = {
        "reference": ["check", str(REFERENCE), "--device", "cpu", "--json", "-", "--seed", "7"],
        "wrong": ["check", str(CORPUS / "wrong" / "pure_pytorch.py"), "--device", "cpu", "--json", str(out_file), "--quiet"],
        "syntax": ["check", str(CORPUS / "hostile" / "syntax_error.py"), "--device", "cpu", "--json", "-"],
        "no_such_file": ["check", str(work / "absent.py"), "--device", "cpu", "--json", "-"],
    }
    if not torch.cuda.is_available():
        commands["cuda_missing"] = ["check", str(REFERENCE), "--device", "cuda", "--json", "-"]
    processes = {
        name: subprocess.Popen([sys.executable, "-m", "grader", *args], cwd=work, env=_cli_env(),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, args in commands.items()
    }
    runs = {}
    for name, process in processes.items():
        stdout, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
        runs[name] = {"code": process.returncode, "stdout": stdout, "stderr": stderr}
    runs["wrong"]["file"] = out_file
    return runs


def _explain(run: dict) -> str:
    return f"exit {run['code']}\nstdout: {run['stdout'][-2000:]}\nstderr: {run['stderr'][-2000:]}"


def test_cli_reference_exits_0_with_the_json_on_stdout(cli_runs):
    run = cli_runs["reference"]
    assert run["code"] == 0, _explain(run)
    document = strict_json(run["stdout"])  # stdout holds the document and nothing else, strict JSON
    assert document["verdict"] == "passed", summary(document)
    assert document["seed"] == 7
    assert [c["name"] for c in document["checks"]] == list(CHECK_NAMES)
    assert all(c["passed"] for c in document["checks"] if c["name"] not in GPU_ONLY_CHECKS)


def test_cli_failed_verdict_exits_1_and_writes_the_file(cli_runs):
    run = cli_runs["wrong"]
    assert run["code"] == 1, _explain(run)
    document = strict_json(Path(run["file"]).read_text())
    assert document["verdict"] == "failed"
    assert {c["name"] for c in document["checks"] if not c["passed"] and not c["skipped"]} == {"triton_kernel"}


def test_cli_submission_error_exits_2(cli_runs):
    run = cli_runs["syntax"]
    assert run["code"] == 2, _explain(run)
    document = strict_json(run["stdout"])
    assert document["verdict"] == "error" and document["error"]["kind"] == "syntax"


def test_cli_missing_file_is_an_infrastructure_error(cli_runs):
    assert cli_runs["no_such_file"]["code"] == 3, _explain(cli_runs["no_such_file"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cli_cuda_without_a_gpu_exits_3(cli_runs):
    run = cli_runs["cuda_missing"]
    assert run["code"] == 3, _explain(run)
    assert "infrastructure" in run["stdout"] + run["stderr"]
