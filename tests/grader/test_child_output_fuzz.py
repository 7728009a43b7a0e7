"""Every reader of what a sandboxed child produces, fed hostile bytes (Hypothesis): step
reports and tensor files, done.json, the recording, the progress pipe's lines, the stage file,
and the text every renderer and export shows. Each reader must return, or refuse with the
submission's own error (``ChildFileRejected`` / ``RecordingRejected``), never crash the trusted
parent, and stay linear: the worst inputs of each kind below are read within a CPU bound.
(docs/security.md, "Who pays".)"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from grader.assignments import get_assignment
from grader.children.replay_process import RecordingRejected, load_recording
from grader.evidence.child_files import ChildFileRejected
from grader.evidence.reader import read_done, read_evidence
from grader.report.document import CheckOutcome, ErrorKind, GradingError, ResultDocument, Verdict, summarize
from grader.report.render import render_result
from grader.sandbox.parent_limits import ParentBudgetSpent, charged_cpu_budget
from grader.sandbox.progress import ProgressLines
from grader.stages import read_stage_file
from submissions.csv_cells import FORMULA_TRIGGERS, SafeCsvWriter

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def plan():
    """The softmax_backward plan on the CPU: the steps and input bank the readers are bounded by."""
    return get_assignment("softmax_backward").build_plan(seed=0, device="cpu")


def _safetensors(header: object, payload: bytes = b"") -> bytes:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return len(raw).to_bytes(8, "little") + raw + payload


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=40)


@FUZZ
@given(report=json_values, header=json_values | st.binary(max_size=200), payload=st.binary(max_size=256),
       raw_report=st.binary(max_size=300))
def test_step_files_never_crash_the_parent(tmp_path_factory, plan, report, header, payload, raw_report) -> None:
    workdir = tmp_path_factory.mktemp("step")
    steps = plan.steps(isolated=False)
    (workdir / "step_0.json").write_bytes(json.dumps(report).encode() if report is not None else raw_report)
    (workdir / "step_0.safetensors").write_bytes(_safetensors(header, payload))
    (workdir / "step_1.json").write_bytes(raw_report)
    try:
        calls, finished = read_evidence(steps, workdir, plan.bank)
    except ChildFileRejected:
        return
    planned = {round_id for step in steps for call in step.calls for round_id in call.round_ids}
    assert set(calls) <= planned


def test_step_files_of_huge_counts_are_read_in_linear_time(tmp_path: Path, plan) -> None:
    """The quadratic attack (100,000 call reports, 200,000 tensor names) and its neighbours:
    refused or read in well under a second of CPU each."""
    steps = plan.steps(isolated=False)
    first = steps[0].calls[0].id
    cases = {
        "many reports": ({"check": "x", "calls": [{"id": first, "status": "ok"}] * 60_000}, {}),
        "many tensors": ({"check": "x", "calls": [{"id": first, "status": "ok"}]},
                         {f"{first}:base_after:b{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                          for i in range(200_000)}),
        "many unplanned ids": ({"check": "x", "calls": [{"id": f"c{i}", "status": "ok"} for i in range(100_000)]},
                               {f"c{i}:out": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                                for i in range(2_000)}),
    }
    for name, (report, header) in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        (folder / "step_0.json").write_text(json.dumps(report))
        (folder / "step_0.safetensors").write_bytes(_safetensors(header))
        started = time.process_time()
        try:
            calls, _ = read_evidence(steps, folder, plan.bank)
            assert len(calls) <= 1, name
        except ChildFileRejected as exc:
            assert "tensors" in str(exc) or "header" in str(exc), exc
        assert time.process_time() - started < 5.0, f"{name}: {time.process_time() - started:.1f} CPU s"


def test_a_sparse_tensor_file_is_read_not_mapped_and_refused_past_its_steps_bytes(tmp_path: Path, plan) -> None:
    steps = plan.steps(isolated=False)
    first = steps[0].calls[0].id
    (tmp_path / "step_0.json").write_text(json.dumps({"check": "x", "calls": [{"id": first, "status": "ok"}]}))
    header = json.dumps({f"{first}:out": {"dtype": "F32", "shape": [64 << 20], "data_offsets": [0, 256 << 20]}})
    with open(tmp_path / "step_0.safetensors", "wb") as handle:
        handle.write(len(header).to_bytes(8, "little") + header.encode())
        handle.truncate(8 + len(header) + (256 << 20))  # a hole: no page behind it
    with pytest.raises(ChildFileRejected, match="bytes"):
        read_evidence(steps, tmp_path, plan.bank)


@FUZZ
@given(raw=st.binary(max_size=400) | json_values.map(lambda v: json.dumps(v).encode()))
def test_done_and_stage_files_never_crash_the_parent(tmp_path_factory, raw) -> None:
    folder = tmp_path_factory.mktemp("done")
    (folder / "done.json").write_bytes(raw)
    (folder / "stage.json").write_bytes(raw)
    read_done(folder)
    read_stage_file(folder / "stage.json")


@FUZZ
@given(recording=json_values, raw=st.binary(max_size=300))
def test_recordings_are_read_or_rejected(tmp_path_factory, recording, raw) -> None:
    folder = tmp_path_factory.mktemp("rec") / "recording"
    folder.mkdir()
    (folder / "recording.json").write_bytes(json.dumps(recording).encode() if recording is not None else raw)
    (folder / f"kernel_{'0' * 64}.cubin").write_bytes(raw)
    try:
        load_recording(folder)
    except (RecordingRejected, ChildFileRejected):
        pass


@FUZZ
@given(lines=st.lists(st.binary(max_size=120), max_size=30))
def test_progress_lines_of_any_bytes_are_read(lines) -> None:
    read_end, write_end = os.pipe()
    reader = ProgressLines(read_end)
    reader.start()
    os.write(write_end, b"import\n" + b"\n".join(lines) + b"\ncall [/] [bold]x\xff\xfe\n")
    os.close(write_end)
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert reader.started
    reader.compile_report()


hostile_text = st.text(alphabet=st.sampled_from(list("[]/\\=+-@\t\r\n:link bold red x 0\u202e\x00")), max_size=60)


@FUZZ
@given(message=hostile_text, hint=hostile_text, note=hostile_text, log=hostile_text)
def test_any_child_text_renders_as_data(message, hint, note, log) -> None:
    document = ResultDocument(
        assignment="softmax_backward", verdict=Verdict.FAILED, notes=[note],
        checks=[CheckOutcome(name="autograd_fp32", passed=False, message=message, details={"hint": hint})],
        error=GradingError(kind=ErrorKind.UNREADABLE_OUTPUT, message=message, traceback=log))
    document.log.text = log
    buffer = io.StringIO()
    render_result(document, Console(file=buffer, width=120), source_name=f"{note}.py")
    render_result(document, Console(file=io.StringIO()), quiet=True)
    assert summarize(document).hint == (hint.strip() or None)


@FUZZ
@given(cells=st.lists(hostile_text | st.integers() | st.floats(allow_nan=False), min_size=1, max_size=8))
def test_no_csv_cell_starts_a_formula(cells) -> None:
    buffer = io.StringIO(newline="")
    SafeCsvWriter(buffer).writerow(cells)
    rows = list(csv.reader(io.StringIO(buffer.getvalue(), newline="")))
    assert len(rows) == 1  # no cell breaks its row (a CR or LF inside is quoted)
    row = rows[0]
    assert len(row) == len(cells)
    for written, cell in zip(cells, row, strict=True):
        if isinstance(written, str):  # text: never a formula; numbers are written as numbers
            assert not cell.startswith(FORMULA_TRIGGERS), cell
            assert cell.removeprefix("'") == written


def test_the_parents_cpu_budget_ends_any_reader_that_spins() -> None:
    started = time.process_time()
    with pytest.raises(ParentBudgetSpent):
        with charged_cpu_budget(0.5):
            while True:
                pass
    assert time.process_time() - started < 3.0
    with charged_cpu_budget(5.0):  # a reader within its budget is not disturbed
        sum(range(10_000))
    assert ParentBudgetSpent(60).grading_error().kind is ErrorKind.RESOURCE_LIMIT
