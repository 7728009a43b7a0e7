"""The first call's own limit (GraderSettings.first_call_timeout_s, grader/sandbox/run.py
``_FirstCallWatch``): a kernel that never returns on the 1x2 example ends in seconds with the
loop named, while the honest first calls of the rest of the suite (the reference, the
corpus) are never stopped by it."""

from __future__ import annotations

import time

from grading_support import CORPUS, requires_bwrap, settings

from grader.report.document import ErrorKind, Verdict
from grader.runner import grade_file

pytestmark = requires_bwrap


def test_a_kernel_that_never_returns_on_the_first_input_ends_in_seconds_with_the_loop_named() -> None:
    started = time.monotonic()
    document = grade_file(CORPUS / "hostile" / "infinite_loop.py", assignment="softmax_backward", device="cpu",
                          settings=settings())  # the defaults: child_timeout_s 180, first call 5 CPU s
    elapsed = time.monotonic() - started
    assert document.verdict is Verdict.ERROR and document.error.kind is ErrorKind.TIMEOUT
    assert document.error.message.startswith("did not return on a 1x2 input: an infinite loop?")
    assert "block" not in document.error.message and "interpreter" not in document.error.message
    assert document.summary.line == "error (timeout): did not return on a 1x2 input: an infinite loop?"
    # Under 15 s once the inputs are built and the sandboxed Python and torch are up (about 0.5
    # and 1.5-3 s on an idle machine, where the whole grading takes 8-9 s; both grow with the
    # machine's load and are not what this limit is about).
    setup_s = document.timings_s["inputs"] + document.timings_s["child_startup"]
    assert elapsed - setup_s < 15, (elapsed, document.timings_s)


def test_the_first_calls_clock_runs_only_while_it_has_not_returned_and_not_while_compiling() -> None:
    import os

    from grader.sandbox.progress import ProgressLines

    read, write = os.pipe()
    progress = ProgressLines(read)
    progress.start()

    def say(*lines: str) -> None:
        os.write(write, "".join(f"{line}\n" for line in lines).encode())
        time.sleep(0.2)  # read by the thread

    say("import")
    assert progress.first_call_running_s() is None  # not started
    say("call example/0", "compile begin")
    time.sleep(0.5)
    say("compile end")
    running = progress.first_call_running_s()
    assert running is not None and running < 0.5  # the 0.5 s compiling is left out
    say("call example/1")
    assert progress.first_call_running_s() is None  # it returned: the next call began
    os.close(write)
    progress.join(timeout=5)
