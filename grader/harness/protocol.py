"""The messages between the grader parent and its sandboxed children (pydantic models).

This file is bound into the sandbox beside the harness scripts (as /harness/protocol.py) and
imported there, so it imports only the standard library and pydantic, never the ``grader``
package. The parent imports it as ``grader.harness.protocol``.

Direction matters for trust:

- parent -> child (``CheckPlan``): written by the trusted parent; the child may read it.
- child -> parent (``StepReport``, ``DoneReport``, ``LaunchRecord``): written in a process
  where the submission's Python runs, so hostile. The parent validates every field here:
  strings are cut to a cap, numbers must be of the right type, and a report that does not
  validate counts as missing. Nothing in them is a verdict (docs/security.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

#: Longest text kept from any string a child reports (messages, type names), characters.
MESSAGE_CAP = 2000
NAME_CAP = 200


def _capped(limit: int):
    def cut(value: Any) -> str:
        text = value if isinstance(value, str) else str(value)
        return text if len(text) <= limit else text[:limit] + " [...]"

    return BeforeValidator(cut)


Message = Annotated[str, _capped(MESSAGE_CAP)]
Name = Annotated[str, _capped(NAME_CAP)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---- parent -> child ---------------------------------------------------------------------
class TensorSpec(_Model):
    """A strided view of one flat base buffer of ``inputs.safetensors`` (torch.as_strided).

    ``device`` ``primary`` is the grading device; ``other`` a second device (CPU when grading
    on CUDA, ``meta`` on CPU) for the device-mismatch check.
    """

    kind: Literal["tensor"] = "tensor"
    base: str
    size: list[int]
    stride: list[int]
    offset: int = 0
    device: Literal["primary", "other"] = "primary"
    requires_grad: bool = False


class ScalarSpec(_Model):
    """A Python scalar passed as it is (an int, a float or a bool)."""

    kind: Literal["scalar"] = "scalar"
    value: int | float | bool


ArgSpec = Annotated[TensorSpec | ScalarSpec, Field(discriminator="kind")]


class CallSpec(_Model):
    """One call ``function(*args, **kwargs)``.

    Attributes:
        id: unique in the plan; reports and output tensors are keyed by it.
        args / kwargs: the arguments, in the assignment's order.
        refills: further rounds of the same call on the same buffers: before round i + 1 the
            tensor arguments named (by position) in ``refills[i]`` are overwritten in place with
            the values of the named base (contiguous, of the argument's size). An output cached
            by address or by call count is then stale.
        save_inputs_after: save every primary base buffer the call's tensors view, as it is
            after the call (the parent compares them bitwise with what it sent).
        record_launches: keep a record of every Triton launch of the call (the parent replays
            it to see whether the launches alone produce the output).
    """

    id: str
    args: list[ArgSpec]
    kwargs: dict[str, ArgSpec] = Field(default_factory=dict)
    refills: list[dict[int, str]] = Field(default_factory=list)
    save_inputs_after: bool = False
    record_launches: bool = False


class StepSpec(_Model):
    """The calls of one named check, run in order; one report file per step."""

    check: str
    calls: list[CallSpec]


class CheckPlan(_Model):
    """Everything the correctness child needs (``plan.json``)."""

    function: str
    module_file: str
    device: str
    other_device: str
    steps: list[StepSpec]


# ---- child -> parent (hostile) -----------------------------------------------------------
class ExceptionReport(_Model):
    """An exception a call (or the import) raised."""

    type: Name = "?"
    message: Message = ""
    exit: bool = False
    traceback: Message = ""


class OutputMeta(_Model):
    """What the child saw of a returned tensor (the parent reads the values themselves)."""

    shape: list[int] = Field(default_factory=list)
    stride: list[int] = Field(default_factory=list)
    dtype: Name = ""
    device: Name = ""
    contiguous: bool = False
    aliases_input: bool = False
    requires_grad: bool = False


class CallReport(_Model):
    """How one round of one call went, as the child reports it."""

    id: Name
    status: Literal["ok", "raised", "not_tensor"] = "raised"
    exception: ExceptionReport | None = None
    returned_type: Name | None = None
    out: OutputMeta | None = None
    launches: int = Field(0, ge=0)
    duration_s: float = Field(0.0, ge=0.0)
    fatal: bool = False


class StepReport(_Model):
    """``step_<i>.json``: the reports of one step's calls."""

    check: Name = ""
    calls: list[Any] = Field(default_factory=list)  # each validated on its own (CallReport)


class DoneReport(_Model):
    """``done.json``: how the run ended (``done``, or an import, lookup or CUDA failure).

    The parent believes ``done`` only if the progress pipe also said ``done``.
    """

    phase: Literal["done", "import", "lookup", "fatal"]
    exception: ExceptionReport | None = None
    missing: Name | None = None
    step: int | None = None
    notes: list[Message] = Field(default_factory=list)
