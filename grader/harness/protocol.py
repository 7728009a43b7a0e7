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


# ---- tolerances (the one rule; read by the parent's checks and by the replay timer) -------
class Tolerance(BaseModel):
    """Per-element bound ``|got - expected| <= atol + rtol * scale + vtol * (|expected| + slack) + slack``.

    The one definition of an output's tolerance: the parent's checks (grader/checks/tolerance.py
    ``compare``) and the trusted replay timer (replay_child.py, timed outputs) both call
    ``allowed``, and it travels to the timer inside ``BenchmarkPlan`` as this model.

    ``scale`` is chosen by the assignment from the terms that form each output element (for
    the softmax VJP: |y| * (|g| + |dot| + sum|y*g|)), so the arithmetic part of the bound
    follows the row's own magnitude: an all-zero answer cannot pass on long rows, where every
    element is O(1/N). ``vtol`` covers rounding the result to a narrow output dtype, which is
    relative to the value itself, not to the terms that made it; keeping it out of ``rtol``
    keeps a low-precision dot (whose error scales with the terms) visible.

    Attributes:
        rtol: relative to ``scale`` (error of fp32 arithmetic on the given inputs).
        atol: absolute floor, in output units; well below any magnitude the checks produce.
        why: where the numbers come from (stored with a failing check's result).
        vtol: relative to |expected| (rounding of the stored result), default 0.
        summary: the reason in a few words, for the one-line failure message.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rtol: float = Field(ge=0.0)
    atol: float = Field(ge=0.0)
    why: str
    vtol: float = Field(0.0, ge=0.0)
    summary: str = ""

    def allowed(self, expected, scale, slack=None):
        """The allowed absolute error per element (fp64 tensors of one shape, any device).

        ``slack`` (optional, same shape, >= 0): error that arithmetic the assignment allows
        makes beyond fp32 rounding, computed exactly from the inputs (for the softmax VJP:
        products rounded to the input dtype, oracle.product_rounding_slack). It is added as it
        is, and the rounding of the stored result (``vtol``) applies to the value that
        arithmetic produced, which lies within ``slack`` of ``expected``.
        """
        if slack is None:
            return self.atol + self.rtol * scale + self.vtol * expected.abs()
        return self.atol + self.rtol * scale + self.vtol * (expected.abs() + slack) + slack

    def bound(self) -> str:
        value_part = f" + {self.vtol:.3g} x |expected|" if self.vtol else ""
        return f"{self.atol:.3g} + {self.rtol:.3g} x scale{value_part}"

    def describe(self) -> str:
        """The bound with its full reason (stored in the result as ``tolerance``)."""
        return f"{self.bound()} ({self.why})"

    def describe_short(self) -> str:
        """The bound with a few-word reason, for failure messages (docs/checks.md has the rest)."""
        return f"{self.bound()} ({self.summary or self.why}; see docs/checks.md)"


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


class TiledSpec(_Model):
    """A large contiguous (rows, cols) tensor the child builds on the grading device: row r
    holds row r % pattern_rows of the flat base ``pattern`` (pattern_rows x cols values, of the
    tensor's dtype), and the tensor sits at element ``offset`` of a NaN-filled buffer of
    offset + rows*cols + offset elements. Built before the submission is imported."""

    kind: Literal["tiled"] = "tiled"
    pattern: str
    pattern_rows: int = Field(ge=1)
    size: list[int]
    offset: int = 0


ArgSpec = Annotated[TensorSpec | ScalarSpec | TiledSpec, Field(discriminator="kind")]


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
        record_launches: keep a record of every Triton launch of the call, to be replayed on
            ``replay_args`` (the same layouts, other values): under the CPU interpreter the child
            replays it itself; on a GPU a trusted process replays the recorded binaries.
        sample_rows: send back only these rows of the output (outputs too large to send whole).
    """

    id: str
    args: list[ArgSpec]
    kwargs: dict[str, ArgSpec] = Field(default_factory=dict)
    refills: list[dict[int, str]] = Field(default_factory=list)
    save_inputs_after: bool = False
    record_launches: bool = False
    replay_args: list[ArgSpec] = Field(default_factory=list)
    replay_kwargs: dict[str, ArgSpec] = Field(default_factory=dict)
    sample_rows: list[int] | None = None


class StepSpec(_Model):
    """The calls of one named check, run in order; one report file per step."""

    check: str
    calls: list[CallSpec]


class BenchmarkRowSpec(_Model):
    """A benchmark row whose call the child records (GPU only): inputs from the assignment's
    bench.py ``make_inputs(shape, dtype, seed)``; a warm-up call on ``warmup_seed`` first."""

    id: str
    shape: list[int]
    dtype: Literal["float32", "float16", "bfloat16"]
    seed: int
    warmup_seed: int


class CheckPlan(_Model):
    """Everything the correctness child needs (``plan.json``).

    ``precompile_threads``: threads for the compile-only pass over the planned calls before
    the checks (GPU only; 0: no such pass, each specialisation compiles at its first launch).
    ``outputs``: how many tensors a call returns (1: a tensor; more: a tuple of that many).
    ``compile_memory_bytes``: the pass starts a compilation only while the child's resident
    memory is below this (one always may run; 0: no gate).
    """

    function: str
    module_file: str
    device: str
    other_device: str
    steps: list[StepSpec]
    outputs: int = Field(1, ge=1, le=8)
    benchmark_rows: list[BenchmarkRowSpec] = Field(default_factory=list)
    precompile_threads: int = Field(0, ge=0, le=64)
    compile_memory_bytes: int = Field(0, ge=0)


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


class ReplayReport(_Model):
    """What became of a recorded call's launches in the child.

    ``status``: ``replayed`` (CPU interpreter: the launches ran again on the replay inputs and
    the output was saved), ``recorded`` (GPU: written for the trusted replay process),
    ``not_replayable`` or ``raised`` (``message`` says why). ``layout_copies``: copies of
    inputs the replay redid before the launches (``LayoutCopy``).
    """

    status: Literal["replayed", "recorded", "not_replayable", "raised"]
    message: Message = ""
    launches: int = Field(0, ge=0)
    torch_ops: list[Name] = Field(default_factory=list, max_length=64)
    side_streams: int = Field(0, ge=0)
    layout_copies: int = Field(0, ge=0)


class CallReport(_Model):
    """How one round of one call went, as the child reports it (``out``: the returned tensor,
    or the first of a tuple; ``more_outputs``: the tuple's others)."""

    id: Name
    status: Literal["ok", "raised", "not_tensor"] = "raised"
    exception: ExceptionReport | None = None
    returned_type: Name | None = None
    out: OutputMeta | None = None
    more_outputs: list[OutputMeta] = Field(default_factory=list, max_length=7)
    launches: int = Field(0, ge=0)
    #: Programs its Triton launches ran (the product of each grid), and its launches with a grid
    #: of 0 programs (a grid computed with // for a size below the block): the parent's hints.
    programs: int = Field(0, ge=0)
    empty_launches: int = Field(0, ge=0)
    duration_s: float = Field(0.0, ge=0.0)
    fatal: bool = False
    replay: ReplayReport | None = None

    def outputs(self) -> list[OutputMeta]:
        """What the child saw of every returned tensor, in return order."""
        return [] if self.out is None else [self.out, *self.more_outputs]


class StepReport(_Model):
    """``step_<i>.json``: the reports of one step's calls."""

    check: Name = ""
    calls: list[Any] = Field(default_factory=list)  # each validated on its own (CallReport)


class CompileMark(_Model):
    """The JSON of a ``compiling <n> {...}`` or ``compiled <n> {...}`` progress line: which
    kernel a Triton compilation is of (its name, constexpr arguments such as block sizes,
    ``num_warps``, ``num_stages``), and after it the child's resident and peak resident memory
    and ``tree_peak_bytes``: the most the child and its subprocesses (ptxas) held at once so
    far, sampled while it compiled. Hostile like every child report: a diagnostic for the report, never evidence."""

    kernel: Name = "?"
    constants: dict[Name, int | float | bool | Name] = Field(default_factory=dict, max_length=32)
    num_warps: int | None = None
    num_stages: int | None = None
    rss_bytes: int = Field(0, ge=0)
    peak_rss_bytes: int = Field(0, ge=0)
    tree_peak_bytes: int = Field(0, ge=0)


class DoneReport(_Model):
    """``done.json``: how the run ended (``done``, or an import, lookup or CUDA failure, or
    ``inputs``: the harness could not build the inputs on the device, before any submission
    code ran, or ``precompile``: the compile-only pass left the CUDA context unusable, before
    any check call; the parent runs the checks again without it).

    The parent believes ``done`` only if the progress pipe also said ``done``.
    """

    phase: Literal["done", "import", "lookup", "fatal", "inputs", "precompile"]
    exception: ExceptionReport | None = None
    missing: Name | None = None
    step: int | None = None
    notes: list[Message] = Field(default_factory=list)


# ---- recordings of Triton launches (child -> parent -> trusted replay process) -----------
# A recording is written in the submission's process, so everything in it is hostile. These
# models are the allow-list every field passes before anything is compiled, loaded or
# launched: the replay process never builds code from a recording (no launcher is generated
# from a signature; parameters are packed by grader/harness/cuda_driver.py from the types
# allowed here), and it loads only cubins whose sha256 the parent checked.
import re as _re  # noqa: E402

from pydantic import field_validator, model_validator  # noqa: E402

#: Element types a kernel pointer may point to, and scalar parameter types (Triton 3.6 names).
ELEMENT_TYPES = frozenset({"fp8e4nv", "fp8e5", "fp8e4b15", "fp16", "bf16", "fp32", "fp64",
                           "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"})
SCALAR_TYPES = frozenset({"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
                          "fp16", "bf16", "fp32", "f32", "fp64"})
#: Most launches one recorded call may make, and most distinct kernels one recording may hold.
MAX_LAUNCHES_PER_CALL = 64
MAX_KERNELS = 64
#: Largest cubin accepted (bytes) and largest buffer a recorded call may use (bytes).
MAX_CUBIN_BYTES = 32 << 20
MAX_BUFFER_BYTES = 16 << 30
#: Dynamic shared memory a Hopper SM can give one block (227 KiB), bytes.
MAX_SHARED_BYTES = 232448
_NAME = _re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
_HEX64 = _re.compile(r"^[0-9a-f]{64}$")
_BUFFER = _re.compile(r"^(arg[0-9]{1,2}|kwarg_[A-Za-z_][A-Za-z0-9_]{0,63}|out[0-9]?|scratch[0-9]{1,3})$")
#: Most outputs one call may return (a tuple of tensors).
MAX_OUTPUTS = 8


def is_allowed_signature_type(text: str) -> bool:
    """A Triton signature entry the replay can pack: ``constexpr``, a scalar type, or a pointer
    ``*T`` to an allowed element type. Tensor descriptors, TMA descriptors and tuples are not."""
    if text == "constexpr" or text in SCALAR_TYPES:
        return True
    return text.startswith("*") and text[1:] in ELEMENT_TYPES


class KernelRecord(_Model):
    """One compiled kernel the submission launched: its binary and launch metadata.

    Attributes:
        id: sha256 (hex) of the cubin; names the file ``kernel_<id>.cubin`` beside the recording.
        name: the kernel's symbol in the cubin.
        signature: Triton's type of every kernel argument in order (``*fp32``, ``i32``,
            ``constexpr``, ...); non-constexpr entries become kernel parameters, followed by
            the global and profile scratch pointers Triton 3.6 appends.
        num_warps / num_ctas / shared: block size (32 x num_warps threads), CTAs per cluster,
            dynamic shared memory (bytes).
        global_scratch_size / global_scratch_align: scratch bytes per program (allocated by the
            launcher: grid x num_ctas x size), and its alignment.
        launch_cooperative_grid / launch_pdl: launch attributes Triton may set.
        arch: the compute capability the cubin was built for (90 for sm_90).
    """

    id: str
    name: str
    signature: list[str] = Field(max_length=256)
    num_warps: int
    num_ctas: int = 1
    shared: int = Field(0, ge=0, le=MAX_SHARED_BYTES)
    global_scratch_size: int = Field(0, ge=0, le=1 << 20)
    global_scratch_align: int = Field(1, ge=1, le=4096)
    profile_scratch_size: int = Field(0, ge=0, le=0)  # instrumented kernels are not replayed
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    arch: int = Field(0, ge=0, le=1000)

    @field_validator("id")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _HEX64.match(value):
            raise ValueError("kernel id must be 64 lowercase hex digits")
        return value

    @field_validator("name")
    @classmethod
    def _symbol(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("kernel name must be an identifier")
        return value

    @field_validator("signature")
    @classmethod
    def _types(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not is_allowed_signature_type(entry):
                raise ValueError(f"signature type {entry[:40]!r} cannot be replayed")
        return value

    @field_validator("num_warps")
    @classmethod
    def _warps(cls, value: int) -> int:
        if value not in (1, 2, 4, 8, 16, 32):
            raise ValueError("num_warps must be a power of two from 1 to 32")
        return value

    @field_validator("num_ctas")
    @classmethod
    def _ctas(cls, value: int) -> int:
        if value not in (1, 2, 4, 8, 16):
            raise ValueError("num_ctas must be 1, 2, 4, 8 or 16")
        return value

    @field_validator("global_scratch_align")
    @classmethod
    def _align(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("alignment must be a power of two")
        return value


class PointerArg(_Model):
    """A pointer argument: ``offset_bytes`` into one of the call's buffers."""

    kind: Literal["pointer"] = "pointer"
    buffer: str
    offset_bytes: int = Field(ge=0, le=MAX_BUFFER_BYTES)

    @field_validator("buffer")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _BUFFER.match(value):
            raise ValueError("unknown buffer name")
        return value


class ValueArg(_Model):
    """A scalar or constexpr argument as passed (constexprs are baked into the cubin; the
    interpreter replay passes them again)."""

    kind: Literal["value"] = "value"
    value: int | float | bool | None = None

    @field_validator("value")
    @classmethod
    def _bounded(cls, value):
        if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 64):
            raise ValueError("integer out of 64-bit range")
        return value


LaunchArg = Annotated[PointerArg | ValueArg, Field(discriminator="kind")]


class LaunchRecord(_Model):
    """One kernel launch: which kernel, the grid (programs along x, y, z) and every argument."""

    kernel: str
    grid: tuple[int, int, int]
    args: list[LaunchArg] = Field(max_length=256)

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: tuple[int, int, int]) -> tuple[int, int, int]:
        x, y, z = value
        if not (1 <= x < 2**31 and 1 <= y <= 65535 and 1 <= z <= 65535):
            raise ValueError("grid outside CUDA's limits (x < 2^31, y and z <= 65535, all >= 1)")
        return value


class BufferRecord(_Model):
    """A device buffer a recorded call's launches touch.

    ``arg<i>``/``kwarg_<name>``: the storage of the call's tensor argument (the replay gives it
    fresh values of the same layout); ``out``: the storage of the returned tensor (``out<k>``:
    of output k >= 1 of a call that returns several); ``scratch<j>``:
    memory the wrapper allocated for its kernels. ``out`` and scratch are fresh in the replay:
    filled with ``fill`` (as ``fill_dtype``) where the wrapper filled them with one value before
    launching (zeros for an accumulator, say), otherwise with NaN bytes, so that anything the
    launches do not write shows.
    """

    name: str
    nbytes: int = Field(ge=0, le=MAX_BUFFER_BYTES)
    fill: float | None = None
    fill_dtype: Literal["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                        "uint8", "bool"] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _BUFFER.match(value):
            raise ValueError("unknown buffer name")
        return value


class OutputLayout(_Model):
    """Where the returned tensor sits (element offset and strides) in ``buffer`` (``out``, or
    the input buffer the submission wrote its result into) and its dtype."""

    buffer: str = "out"
    size: list[int] = Field(max_length=8)
    stride: list[int] = Field(max_length=8)
    offset: int = Field(0, ge=0)
    dtype: Literal["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


class TensorView(_Model):
    """A strided view of a buffer's elements: element offset, size and stride (torch.as_strided)."""

    offset: int = Field(0, ge=0, le=MAX_BUFFER_BYTES)
    size: list[Annotated[int, Field(ge=0, le=MAX_BUFFER_BYTES)]] = Field(max_length=8)
    stride: list[Annotated[int, Field(ge=0, le=MAX_BUFFER_BYTES)]] = Field(max_length=8)

    @model_validator(mode="after")
    def _ranks_agree(self) -> TensorView:
        if len(self.size) != len(self.stride):
            raise ValueError("a view's size and stride differ in length")
        return self

    def end(self) -> int:
        """One past the last element the view reaches (its offset for an empty view)."""
        if any(n == 0 for n in self.size):
            return self.offset
        return self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride)) + 1


#: Element sizes of the dtypes a layout copy may move, bytes.
_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4,
                  "int64": 8, "uint8": 1, "bool": 1}


class LayoutCopy(_Model):
    """A layout copy of an input the wrapper made before its first launch (``contiguous()``,
    ``clone()``, ``to(memory_format=...)``, ``copy_`` into new memory; ``op`` names it): the
    replay redoes it on its own inputs, moving ``source_view`` of ``source`` (an input buffer,
    or the target of an earlier copy) into ``target_view`` of ``target`` (a scratch buffer),
    elements of ``dtype`` on both sides. Data movement only: no dtype change, no arithmetic."""

    op: Literal["clone", "_to_copy", "copy_"]
    source: str
    target: str
    dtype: Literal["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]
    source_view: TensorView
    target_view: TensorView

    @model_validator(mode="after")
    def _shapes(self) -> LayoutCopy:
        if not _BUFFER.match(self.source) or not self.target.startswith("scratch") or not _BUFFER.match(self.target):
            raise ValueError("a layout copy goes from an input or copy buffer into a scratch buffer")
        if len(self.source_view.size) > len(self.target_view.size) or any(
                s not in (1, t) for s, t in zip(reversed(self.source_view.size), reversed(self.target_view.size))):
            raise ValueError("a layout copy's source does not broadcast to its target")
        return self


class CallRecording(_Model):
    """The Triton launches of one call, and what else the call did on the device.

    Attributes:
        call_id: the planned call (or benchmark row) the recording belongs to.
        buffers: every buffer a launch points into.
        output: the returned tensor's place in ``out`` (None: no tensor returned); of a call
            that returns a tuple, its first tensor.
        more_outputs: the places of the tuple's further tensors (``out1``, ``out2``, ...).
        launches: in launch order.
        torch_ops: PyTorch operators (other than allocation, views and fills of scratch) the
            call ran on its device outside Triton launches: work the replay does not redo.
        side_streams: launches issued on a stream other than the caller's current stream.
        not_replayable: why the call cannot be replayed (a pointer to memory the grader cannot
            account for, a tensor-descriptor argument, ...), or None.
        layout_copies: the layout copies of inputs made before the first launch, in order,
            which the replay redoes before the launches (layout operations, not the call's
            arithmetic); any other copy is named in ``torch_ops``.
    """

    call_id: Name
    buffers: list[BufferRecord] = Field(default_factory=list, max_length=512)
    output: OutputLayout | None = None
    more_outputs: list[OutputLayout] = Field(default_factory=list, max_length=MAX_OUTPUTS - 1)
    launches: list[LaunchRecord] = Field(default_factory=list, max_length=MAX_LAUNCHES_PER_CALL)
    torch_ops: list[Name] = Field(default_factory=list, max_length=64)
    side_streams: int = Field(0, ge=0)
    not_replayable: Message | None = None
    layout_copies: list[LayoutCopy] = Field(default_factory=list, max_length=16)

    @model_validator(mode="after")
    def _pointers_name_buffers(self) -> CallRecording:
        names = {b.name for b in self.buffers}
        for k, layout in enumerate(self.output_layouts()):
            if layout.buffer not in names | {"out" if k == 0 else f"out{k}"}:
                raise ValueError("an output lies in no recorded buffer")
        if self.more_outputs and self.output is None:
            raise ValueError("further outputs without a first one")
        sizes = {b.name: b.nbytes for b in self.buffers}
        copied: set[str] = set()
        for copy in self.layout_copies:
            if copy.source not in names or copy.target not in names:
                raise ValueError("a layout copy names a buffer that is not recorded")
            if not (copy.source.startswith(("arg", "kwarg_")) or copy.source in copied):
                raise ValueError("a layout copy's source is neither an input nor an earlier copy")
            element = _ELEMENT_BYTES[copy.dtype]
            for buffer, view in ((copy.source, copy.source_view), (copy.target, copy.target_view)):
                if view.end() * element > sizes[buffer]:
                    raise ValueError("a layout copy's view reaches outside its buffer")
            copied.add(copy.target)
        for launch in self.launches:
            for arg in launch.args:
                if isinstance(arg, PointerArg) and (arg.buffer not in names or arg.offset_bytes > sizes[arg.buffer]):
                    raise ValueError("a pointer argument points outside the recorded buffers")
        return self

    def output_layouts(self) -> list[OutputLayout]:
        """Every returned tensor's place, in return order (empty: none returned)."""
        return [] if self.output is None else [self.output, *self.more_outputs]


class Recording(_Model):
    """``recording.json``: the kernels and the recorded calls of one child run."""

    kernels: list[KernelRecord] = Field(default_factory=list, max_length=MAX_KERNELS)
    calls: list[CallRecording] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _launches_name_kernels(self) -> Recording:
        known = {k.id: k for k in self.kernels}
        for call in self.calls:
            for launch in call.launches:
                kernel = known.get(launch.kernel)
                if kernel is None:
                    raise ValueError("a launch names a kernel that is not in the recording")
                if len(launch.args) != len(kernel.signature):
                    raise ValueError("a launch's argument count differs from its kernel's signature")
                for arg, kind in zip(launch.args, kernel.signature):
                    pointer = kind.startswith("*")
                    if pointer != isinstance(arg, PointerArg) and not (pointer and isinstance(arg, ValueArg)
                                                                        and arg.value is None):
                        raise ValueError("a launch's argument kind differs from its kernel's signature")
        return self


# ---- the timing side: parent <-> trusted replay timer, parent <-> peers child --------------
# Written by trusted code on both sides (the parent, replay_child.py, bench_child.py); typed so
# that one definition is read and written by both, and the tolerance travels as the checks'
# own ``Tolerance``. The replay timer's inputs come from the validated recording only.
class TimingOptions(_Model):
    """Sampling settings of the timing children (grader.benchmark.BenchmarkOptions's child part).

    Units: seconds, bytes. ``timing.Timer`` reads them as a dict (``model_dump()``).
    """

    sets: int = Field(4, ge=1, le=64)
    budget_s: float = Field(0.4, gt=0)
    event_budget_s: float = Field(0.15, gt=0)
    min_samples: int = Field(25, ge=1)
    max_samples: int = Field(3000, ge=1)
    target_rel_sem: float = Field(0.002, gt=0)
    warmup_s: float = Field(0.05, ge=0)
    flush_bytes: int = Field(0, ge=0)
    sample_rows: int = Field(8, ge=1)
    save_full: bool = True
    compile_peer: bool = True
    copy_bytes: int = Field(1 << 30, ge=1 << 20)
    copy_bandwidth: bool = True
    streaming_probe: bool = True
    tensor_core_peak: bool = False


#: An axis of a tensor in a timed verification: the name of a drawn dimension (its elements
#: are restricted to the indices drawn for that dimension) or None (the whole axis).
Axis = str | None


class TimedOutput(_Model):
    """One output of a timed call: which of its elements are verified, and under which bound.

    Attributes:
        name: the assignment's output name (``dx``, ``out``, ``dw``).
        axes: per axis of the output, the drawn dimension that selects it, or None (every index).
        tolerance: the checks' own tolerance of this output in the row's dtype.
    """

    name: Name
    axes: list[Axis]
    tolerance: Tolerance


class TimedVerification(_Model):
    """How every timed call of one row is verified (replay_child.py ``check_timed_outputs``).

    After each timed call the timer draws ``draws[dim]`` random indices of every drawn
    dimension; each output is compared on the elements its ``axes`` select, against the
    assignment's ``benchmark_oracle(pristine inputs, drawn indices)``; each tensor input,
    selected by ``input_axes``, must be bitwise unchanged there.

    Attributes:
        draws: dimension name -> how many indices are drawn per timed call (>= 1).
        outputs: the outputs in the order the call returns them.
        input_axes: per positional argument, its axes (None for a scalar or an input not
            compared, e.g. a 0-d upstream gradient).
    """

    draws: dict[Name, int]
    outputs: list[TimedOutput] = Field(min_length=1)
    input_axes: list[list[Axis] | None]

    @model_validator(mode="after")
    def _draws_are_named(self) -> TimedVerification:
        named = {axis for out in self.outputs for axis in out.axes} | {
            axis for axes in self.input_axes if axes for axis in axes}
        unknown = (named - {None}) - set(self.draws)
        if unknown:
            raise ValueError(f"axes name dimensions that are not drawn: {sorted(str(axis) for axis in unknown)}")
        if any(count < 1 for count in self.draws.values()):
            raise ValueError("every drawn dimension needs at least one index")
        return self


class TimedRow(_Model):
    """One benchmark row the replay timer times: bench.py ``make_inputs(shape, dtype, seed)``
    inputs, the recorded call, and how its timed outputs are verified."""

    id: Name
    shape: list[int]
    dtype: Literal["float32", "float16", "bfloat16"]
    seed: int
    recording: CallRecording
    verification: TimedVerification


class BenchmarkPlan(_Model):
    """``benchmark_plan.json``: phase 2 of the replay timer (written by the parent)."""

    rows: list[TimedRow]
    options: TimingOptions


class ReplayPlan(_Model):
    """``replay_plan.json``: phase 1 of the replay timer (written by the parent from a
    validated recording): the kernels, the recorded check calls and the file of their inputs
    (keys ``<call id>|<buffer>``)."""

    kernels: list[KernelRecord]
    check_calls: list[CallRecording] = Field(default_factory=list)
    check_inputs: str = "replay_inputs.safetensors"


class ReplayCallStatus(_Model):
    """What became of one replayed check call in the trusted replay process.

    Attributes:
        status: ``ok`` (its launches ran), ``error`` (they raised; ``message`` says why) or
            ``skipped`` (an earlier call poisoned the GPU context).
        message: why, for ``error`` and ``skipped``.
        inputs_modified: the input buffers (``arg<i>``/``kwarg_<name>``: the whole base the
            argument views, guards included) whose bytes differ after the launches from the
            bytes the parent sent; empty when the launches left every input as it was. The
            trusted side's own observation of "inputs untouched" on a GPU (``output_contract``).
    """

    status: Literal["ok", "error", "skipped"]
    message: Message = ""
    inputs_modified: list[Name] = Field(default_factory=list, max_length=64)


class TimedVerdict(_Model):
    """The verification of every timed call of one timing method of a row.

    Attributes:
        calls_verified: timed calls whose outputs were verified.
        elements_outside_tolerance: compared elements over their bound (NaN counts).
        worst_error_over_tolerance: the largest |err| / allowed, None when not finite.
        worst_by_output: output name -> its largest |err| / allowed (None: not finite).
        input_elements_changed: selected input elements that differ from the regenerated ones.
        passed: calls verified, nothing outside tolerance, no input changed, a finite worst.
    """

    calls_verified: int = 0
    elements_outside_tolerance: int = 0
    worst_error_over_tolerance: float | None = None
    worst_by_output: dict[Name, float | None] = Field(default_factory=dict)
    input_elements_changed: int = 0
    passed: bool = False


class TimedRowResult(_Model):
    """One row as the replay timer reports it: raw samples (the parent computes the
    statistics), the verifications, or the error that stopped the row.

    ``event``/``graph``/``wall``: timing.py's raw dicts (``samples_s``...; or ``error``).
    ``stage_s``: wall seconds of each stage (setup, warmup, event, wall, graph).
    """

    model_config = ConfigDict(extra="allow")

    id: Name
    shape: list[int] = Field(default_factory=list)
    dtype: Name = ""
    error: Message | None = None
    traceback: Message | None = None
    fatal: bool = False
    launches: int = 0
    kernels: list[Name] = Field(default_factory=list)
    stage_s: dict[Name, float] = Field(default_factory=dict)
    event: dict[str, Any] | None = None
    graph: dict[str, Any] | None = None
    wall: dict[str, Any] | None = None
    event_verified: TimedVerdict | None = None
    graph_verified: TimedVerdict | None = None
    persisting_l2_limit_after: int | None = None


class ReplayResult(_Model):
    """``replay_result.json``: what the replay timer produced, rewritten after each phase and
    row (``phase``: the last phase that finished)."""

    phase: Literal["started", "checks", "benchmark"] = "started"
    started_unix: float | None = None
    finished_unix: float | None = None
    error: Message | None = None
    benchmark_error: Message | None = None
    benchmark_stopped: bool = False
    gpu: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    persisting_l2_control: Message | None = None
    flush_bytes: int | None = None
    check_calls: dict[Name, ReplayCallStatus] = Field(default_factory=dict)
    rows: list[TimedRowResult] = Field(default_factory=list)


class PeerRowPlan(_Model):
    """One row of the peers child's plan."""

    id: Name
    shape: list[int]
    dtype: Literal["float32", "float16", "bfloat16"]
    seed: int


class PeersPlan(_Model):
    """``bench_plan.json``: what the peers child times (written by the parent). ``selection``:
    which elements of each output it keeps for the parent's re-verification (the same axes as
    the replay timer's; its tolerances are those of the first row's dtype, unused there)."""

    mode: Literal["peers"] = "peers"
    rows: list[PeerRowPlan]
    options: TimingOptions
    function: Name
    module_file: Name
    selection: TimedVerification
    reference_file: Name | None = None


class PeerRowResult(_Model):
    """One row of the peers child's result: per implementation its raw timings and what the
    parent's re-verification found (``verified``, added by grader/benchmark/verify.py)."""

    model_config = ConfigDict(extra="allow")

    id: Name
    shape: list[int] = Field(default_factory=list)
    dtype: Name = ""
    impls: dict[Name, dict[str, Any]] = Field(default_factory=dict)
    streaming_probe: dict[str, Any] | None = None
    outputs_file: Name | None = None
    error: Message | None = None
    traceback: Message | None = None
    #: bench_child.process_state after the row: open_fds, threads, max_rss_bytes,
    #: workdir_free_bytes.
    process: dict[Name, int] = Field(default_factory=dict)


class PeersEnding(_Model):
    """How a peers child that ended before timing every row ended (``run_peers`` then starts a
    second one for the rows it did not reach)."""

    returncode: int | None
    log_tail: Message = ""
    rows_done: int


class PeersResult(_Model):
    """``bench_result.json`` (or ``bench_progress.json`` while running): the peers child's
    environment, measured peaks and rows.

    Attributes:
        copy_bandwidth: timing.measure_copy_bandwidth's result (``bytes_per_s``...).
        tensor_core_throughput: dtype name -> {"flops_per_s", "shape", ...}: the measured
            matrix-multiply peak (compute and roofline floors), when measured.
    """

    model_config = ConfigDict(extra="allow")

    mode: Literal["peers"] = "peers"
    rows: list[PeerRowResult] = Field(default_factory=list)
    started_unix: float | None = None
    finished_unix: float | None = None
    error: Message | None = None
    gpu: dict[str, Any] | None = None
    gpu_after: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    copy_bandwidth: dict[str, Any] | None = None
    tensor_core_throughput: dict[Name, dict[str, Any]] = Field(default_factory=dict)
    flush_bytes: int | None = None
    persisting_l2_control: Message | None = None
    persisting_l2_limit_at_start: int | None = None
    complete: bool = False
    returncode: int | None = None
    log_tail: Message = ""
    duration_s: float | None = None
    cached_from: Message | None = None
    earlier_endings: list[PeersEnding] = Field(default_factory=list)
