"""Layout copies in recordings (grader/harness/launches.py, protocol.LayoutCopy): a wrapper's
``contiguous()``/``clone()``/``to(memory_format=...)``/``copy_`` of an input before its launches
is redone by the replay on the replay's inputs; any other copy is named as work outside Triton.

The recorder patches Triton's interpreter globally, so the recordings are made in a child
Python under TRITON_INTERPRET=1 (a few seconds), which prints what ``describe`` gave and
whether the replay on new inputs reproduced the right output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from grader.harness.protocol import CallRecording

HARNESS = Path(__file__).resolve().parents[3] / "grader" / "harness"

SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import torch, triton, triton.language as tl
    from launches import LaunchRecorder, as_bytes, fresh_buffers

    @triton.jit
    def scale_rows(x_ptr, out_ptr, N, BLOCK: tl.constexpr):  # contiguous rows only
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N)
        tl.store(out_ptr + row * N + cols, x * 3.0, mask=cols < N)

    def launch(x):
        out = torch.empty(x.shape, dtype=x.dtype)
        scale_rows[(x.shape[0],)](x, out, x.shape[1], BLOCK=8)
        return out

    wrappers = {
        "contiguous": lambda x: launch(x.contiguous()),
        "clone_of_clone": lambda x: launch(x.clone(memory_format=torch.contiguous_format).clone()),
        "to_memory_format": lambda x: launch(x.to(memory_format=torch.contiguous_format, copy=True)),
        "empty_like_copy": lambda x: launch(torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)),
        "computed_then_cloned": lambda x: launch((x * 1.0).contiguous()),
        "dtype_change": lambda x: launch(x.to(torch.float64, memory_format=torch.contiguous_format)),
        "into_input": lambda x: launch(x[1:].copy_(x[:-1]) is not None and x.contiguous()),
    }

    def after_launch(x):
        first = launch(x.contiguous())
        return launch(first.t().contiguous().t().contiguous()) / 3.0

    wrappers["after_launch"] = after_launch
    recorder = LaunchRecorder(interpret=True)
    recorder.install()
    results = {}
    for name, wrapper in wrappers.items():
        x = torch.randn(6, 5).t()  # (5, 6), strides (1, 5): not contiguous
        with recorder.recording() as (launches, ops):
            out = wrapper(x)
        recording, _ = recorder.describe(name, launches, ops, args=[x], kwargs={}, output=out, current_stream=None)
        original_right = bool(torch.allclose(out.double(), x.double() * 3, atol=1e-5))
        new = torch.randn(6, 5).t()  # new values, the same layout
        fresh = fresh_buffers(recording, {"arg0": as_bytes(new)}, "cpu")
        outputs = recorder.replay_interpreted(launches, recording, fresh)  # in return order
        replayed = outputs[0] if outputs else None
        right = replayed is not None and bool(torch.allclose(replayed.double(), new.double() * 3, atol=1e-5))
        results[name] = {"recording": recording, "replay_right": right, "original_right": original_right}
    print(json.dumps(results))
''')


@pytest.fixture(scope="module")
def recorded() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(HARNESS)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["contiguous", "clone_of_clone", "to_memory_format", "empty_like_copy"])
def test_layout_copies_of_inputs_are_redone_by_the_replay(recorded, name):
    entry = recorded[name]
    recording = CallRecording.model_validate(entry["recording"])  # what the parent accepts
    assert recording.layout_copies, entry
    assert recording.layout_copies[0].source == "arg0"
    assert recording.torch_ops == [], entry
    assert entry["original_right"] and entry["replay_right"], entry


@pytest.mark.parametrize(("name", "named"), [
    ("computed_then_cloned", "clone (of memory that is not an input)"),
    ("dtype_change", "_to_copy"),
    ("into_input", "copy_ (into an input)"),
    ("after_launch", "clone (after a launch)"),
])
def test_other_copies_are_named_and_not_redone(recorded, name, named):
    entry = recorded[name]
    recording = CallRecording.model_validate(entry["recording"])
    assert named in recording.torch_ops, entry
    assert all(copy.op != named.split()[0] or name == "after_launch" for copy in recording.layout_copies), entry
    assert entry["original_right"], entry
    if name != "into_input":  # writes into inputs are the input checks' business (save_inputs_after)
        assert not entry["replay_right"], entry  # the replay does not reproduce work done outside Triton


def test_computed_values_cannot_pass_as_a_layout_copy(recorded):
    """The arithmetic before the clone is named too: a clone only ever moves an input's values."""
    recording = CallRecording.model_validate(recorded["computed_then_cloned"]["recording"])
    assert "mul" in recording.torch_ops and not recording.layout_copies


def _forged(**copy) -> dict:
    view = {"offset": 0, "size": [5, 6], "stride": [6, 1]}
    return {"call_id": "c", "buffers": [{"name": "arg0", "nbytes": 120}, {"name": "scratch0", "nbytes": 120},
                                        {"name": "scratch1", "nbytes": 120}],
            "layout_copies": [{"op": "clone", "source": "arg0", "target": "scratch0", "dtype": "float32",
                               "source_view": view, "target_view": view, **copy}]}


def test_the_parent_accepts_a_copy_of_an_input_into_scratch():
    assert CallRecording.model_validate(_forged()).layout_copies[0].target == "scratch0"


@pytest.mark.parametrize(("copy", "why"), [
    ({"source": "scratch1"}, "neither an input nor an earlier copy"),
    ({"target": "out"}, "into a scratch buffer"),
    ({"target": "arg0"}, "into a scratch buffer"),
    ({"target_view": {"offset": 1, "size": [5, 6], "stride": [6, 1]}}, "outside its buffer"),
    ({"source_view": {"offset": 0, "size": [5, 6], "stride": [7, 1]}}, "outside its buffer"),
    ({"source_view": {"offset": 0, "size": [6, 5], "stride": [5, 1]}}, "does not broadcast"),
    ({"dtype": "float64"}, "outside its buffer"),
    ({"op": "add"}, "Input should be"),
])
def test_the_parent_rejects_a_forged_copy(copy, why):
    with pytest.raises(ValidationError, match=why):
        CallRecording.model_validate(_forged(**copy))
