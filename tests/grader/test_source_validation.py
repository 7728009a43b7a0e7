"""The one source validator (grader/source_validation.py): its rules, and parsing under load.

Torch-free module, so these tests import nothing heavy.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.manifest import DEFAULT_ASSIGNMENT, MANIFESTS, UnknownAssignment, get_manifest
from grader.source_validation import SourceRejected, validate_source

MANIFEST = get_manifest(DEFAULT_ASSIGNMENT)


@pytest.mark.parametrize(
    "source",
    [
        "def softmax_backward(y, g):\n    return y\n",
        "def _f(y, g):\n    return y\nsoftmax_backward = _f\n",
        "from helpers import softmax_backward\n",
        "import helpers as softmax_backward\n",
        "softmax_backward: object = None\n",
        "if True:\n    def softmax_backward(y, g):\n        return y\n",
        "try:\n    pass\nfinally:\n    softmax_backward = print\n",
        "with open(__file__) as softmax_backward:\n    pass\n",
        "class softmax_backward:\n    pass\n",
        "\ufeffdef softmax_backward(y, g):\n    return y\n",
    ],
)
def test_module_level_bindings_are_accepted(source):
    assert validate_source(source.encode(), MANIFEST) == source


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        (b"", "empty"),
        (b" \n\t\n", "empty"),
        (b"\xef\xbb\xbf\n", "empty"),
        (b"\xff\xfe", "not_utf8"),
        (b"def softmax_backward(y, g):\n    return (\n", "syntax"),
        (b"x = 1\x00\n", "syntax"),
        (b"def other(y, g):\n    return y\n", "missing_function"),
        (b"def f():\n    softmax_backward = 1\n", "missing_function"),
        (b"class K:\n    def softmax_backward(self, y, g):\n        return y\n", "missing_function"),
        (b"# a comment\n", "missing_function"),
        (b"(" * 300 + b")" * 300 + b"\n", "syntax"),
    ],
)
def test_rejections_name_their_kind(source, kind):
    with pytest.raises(SourceRejected) as caught:
        validate_source(source, MANIFEST)
    assert caught.value.problem.kind == kind
    assert caught.value.problem.message


def test_syntax_error_carries_line_and_column():
    with pytest.raises(SourceRejected) as caught:
        validate_source("import math\n\ndef softmax_backward(y, g):\n    return (y\n", MANIFEST)
    assert caught.value.problem.details["line"] == 4
    assert isinstance(caught.value.problem.details["column"], int)


def test_unknown_assignment_lists_the_known_ones():
    with pytest.raises(UnknownAssignment) as caught:
        get_manifest("no_such_assignment")
    assert all(name in str(caught.value) for name in MANIFESTS)


def test_manifest_and_validator_import_no_torch():
    # The API validates uploads with these modules and must never import torch.
    code = ("import sys, grader.manifest, grader.source_validation; "
            "sys.exit(1 if {'torch', 'triton'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_concurrent_validations_never_parse_at_the_same_time(monkeypatch):
    # CPython 3.11 issue 106905: two threads converting syntax trees at once can raise
    # SystemError("AST constructor recursion depth mismatch"); the API saw 5 of them in 300
    # concurrent uploads. The validator's immunity is that no two of its parses overlap: count
    # the parses in flight under 32 threads (each parse held open for a moment).
    import threading
    import time

    real_parse = ast.parse
    in_flight = 0
    most = 0
    counter_lock = threading.Lock()

    def observed_parse(*args, **kwargs):
        nonlocal in_flight, most
        with counter_lock:
            in_flight += 1
            most = max(most, in_flight)
        try:
            time.sleep(0.001)
            return real_parse(*args, **kwargs)
        finally:
            with counter_lock:
                in_flight -= 1

    monkeypatch.setattr(ast, "parse", observed_parse)
    sources = [f"def softmax_backward(y, g):\n    return y  # {i}\n".encode() for i in range(300)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda s: validate_source(s, MANIFEST), sources))
    assert len(results) == 300
    assert most == 1
