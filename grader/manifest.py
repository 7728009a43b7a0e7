"""The assignment manifest: the one registry of assignments that the service and the grader read.

Torch-free on purpose: the API validates uploads with it (api/ and submissions/ never import
torch or triton), and the student's command-line client lists assignments with it. Everything
heavier about an assignment (inputs, oracles, tolerances, checks, benchmark peers) lives in its
folder ``grader/assignments/<name>/`` and is loaded only by the grader, through
``grader.assignments.get_assignment``.

Adding an assignment: one entry in ``MANIFESTS`` and one folder under grader/assignments/.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AssignmentManifest:
    """What every layer may know about one assignment without importing torch.

    Attributes:
        name: registry key, used in URLs, the database and ``grader check --assignment``.
        title: one line for people (CLI listings, web pages).
        function: the top-level callable the student's file must define.
        arguments: the positional argument names of ``function``, in order, an optional one
            written with its default (``ignore_index=-100``); documentation, the starter
            template and error messages use them.
        module_file: the file name the student edits and uploads; the grader writes the
            source under this name before importing it in the sandbox.
        package: the grader package that holds the assignment's folder (spec, oracle, inputs,
            checks, benchmark file, reference solution, starter template).
    """

    name: str
    title: str
    function: str
    arguments: tuple[str, ...]
    module_file: str
    package: str

    @property
    def signature(self) -> str:
        """``function(arg, ...)``, as shown in messages."""
        return f"{self.function}({', '.join(self.arguments)})"

    @property
    def template_file(self) -> Path:
        """The starter file (``template.py`` in the assignment's folder), found without
        importing the assignment's package, which needs torch: ``grader template`` runs on a
        student's install without the grader extra."""
        return Path(__file__).resolve().parent.joinpath(*self.package.split(".")[1:], "template.py")


MANIFESTS: dict[str, AssignmentManifest] = {
    "softmax_backward": AssignmentManifest(
        name="softmax_backward",
        title="Softmax backward (VJP) without a dense Jacobian: dx = y * (g - sum(y*g, dim=-1))",
        function="softmax_backward",
        arguments=("y", "g"),
        module_file="softmax_backward.py",
        package="grader.assignments.softmax_backward",
    ),
    "softmax_cross_entropy_backward": AssignmentManifest(
        name="softmax_cross_entropy_backward",
        title="Softmax cross-entropy backward, fused per row: dx = (softmax(x) - onehot(t)) * grad / n_valid",
        function="softmax_cross_entropy_backward",
        arguments=("x", "t", "grad", "ignore_index=-100"),
        module_file="softmax_cross_entropy_backward.py",
        package="grader.assignments.softmax_cross_entropy_backward",
    ),
    "gemm_epilogue": AssignmentManifest(
        name="gemm_epilogue",
        title="GEMM with a fused epilogue: out = gelu_tanh(a @ b + bias), fp16/bf16 in, fp32 accumulation",
        function="gemm_epilogue",
        arguments=("a", "b", "bias"),
        module_file="gemm_epilogue.py",
        package="grader.assignments.gemm_epilogue",
    ),
    "layernorm_backward": AssignmentManifest(
        name="layernorm_backward",
        title="Layer norm backward from the saved mean and rstd: dx per row, dw and db reduced across rows",
        function="layernorm_backward",
        arguments=("dy", "x", "w", "mean", "rstd"),
        module_file="layernorm_backward.py",
        package="grader.assignments.layernorm_backward",
    ),
    "attention_forward": AssignmentManifest(
        name="attention_forward",
        title="Causal attention forward on (B, H, S, D), FlashAttention style: fp16/bf16, online softmax",
        function="attention_forward",
        arguments=("q", "k", "v"),
        module_file="attention_forward.py",
        package="grader.assignments.attention_forward",
    ),
    "attention_backward": AssignmentManifest(
        name="attention_backward",
        title="Causal attention backward from the saved out and lse (FlashAttention-2's interface): dq, dk, dv",
        function="attention_backward",
        arguments=("q", "k", "v", "out", "dout", "lse"),
        module_file="attention_backward.py",
        package="grader.assignments.attention_backward",
    ),
}

#: The assignment a request or a command means when it names none.
DEFAULT_ASSIGNMENT = "softmax_backward"


class UnknownAssignment(KeyError):
    """No assignment of that name is in ``MANIFESTS``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown assignment"


def get_manifest(name: str) -> AssignmentManifest:
    """The manifest entry of assignment ``name``.

    Raises:
        UnknownAssignment: ``name`` is not registered; the message lists the known names.
    """
    try:
        return MANIFESTS[name]
    except KeyError:
        known = ", ".join(sorted(MANIFESTS))
        raise UnknownAssignment(f"unknown assignment {name!r}; known: {known}") from None


def assignments_defined_in(source: str) -> list[str]:
    """The assignments whose function `source` (a student's Python file) defines at its top
    level (``def`` or ``async def``, or a name assigned there), in ``MANIFESTS`` order; []
    when it defines none of them or is not valid Python. For suggesting ``--assignment``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return [m.name for m in MANIFESTS.values() if m.function in names]


def resolve_assignment(requested: str | None, source: str) -> tuple[str | None, str | None]:
    """The assignment to grade `source` as, and what to tell the student, from ``--assignment``
    (None when not given) and the functions the file defines (``assignments_defined_in``).

    Returns:
        (name, note): not given: the one assignment whose function the file defines (note
        says so), else ``DEFAULT_ASSIGNMENT``; given: that name, unless the file lacks its
        function but defines another assignment's: then (None, the suggestion to pass).
    """
    defined = assignments_defined_in(source)
    if requested is None:
        if len(defined) == 1:
            return defined[0], f"assignment {defined[0]} (the file defines {MANIFESTS[defined[0]].function})"
        return DEFAULT_ASSIGNMENT, None
    manifest = MANIFESTS.get(requested)
    if manifest is not None and defined and requested not in defined:
        others = " or ".join(f"--assignment {name}" for name in defined)
        return None, (f"the file defines {', '.join(MANIFESTS[n].function for n in defined)}, not "
                      f"{manifest.function} (assignment {requested}): pass {others}")
    return requested, None
