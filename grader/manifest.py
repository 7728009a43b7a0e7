"""The assignment manifest: the one registry of assignments that the service and the grader read.

Torch-free on purpose: the API validates uploads with it (api/ and submissions/ never import
torch or triton), and the student's command-line client lists assignments with it. Everything
heavier about an assignment (inputs, oracles, tolerances, checks, benchmark peers) lives in its
folder ``grader/assignments/<name>/`` and is loaded only by the grader, through
``grader.assignments.get_assignment``.

Adding an assignment: one entry in ``MANIFESTS`` and one folder under grader/assignments/.
"""

from __future__ import annotations

from dataclasses import dataclass


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
