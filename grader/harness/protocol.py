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
    ``compile_memory_bytes``: the pass starts a compilation only while the child's resident
    memory is below this (one always may run; 0: no gate).
    """

    function: str
    module_file: str
    device: str
    other_device: str
    steps: list[StepSpec]
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
    """How one round of one call went, as the child reports it."""

    id: Name
    status: Literal["ok", "raised", "not_tensor"] = "raised"
    exception: ExceptionReport | None = None
    returned_type: Name | None = None
    out: OutputMeta | None = None
    launches: int = Field(0, ge=0)
    duration_s: float = Field(0.0, ge=0.0)
    fatal: bool = False
    replay: ReplayReport | None = None


class StepReport(_Model):
    """``step_<i>.json``: the reports of one step's calls."""

    check: Name = ""
    calls: list[Any] = Field(default_factory=list)  # each validated on its own (CallReport)


class CompileMark(_Model):
    """The JSON of a ``compiling <n> {...}`` or ``compiled <n> {...}`` progress line: which
    kernel a Triton compilation is of (its name, constexpr arguments such as block sizes,
    ``num_warps``, ``num_stages``), and after it the child's resident and peak resident memory.
    Hostile like every child report: a diagnostic for the report, never evidence."""

    kernel: Name = "?"
    constants: dict[Name, int | float | bool | Name] = Field(default_factory=dict, max_length=32)
    num_warps: int | None = None
    num_stages: int | None = None
    rss_bytes: int = Field(0, ge=0)
    peak_rss_bytes: int = Field(0, ge=0)


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
_BUFFER = _re.compile(r"^(arg[0-9]{1,2}|kwarg_[A-Za-z_][A-Za-z0-9_]{0,63}|out|scratch[0-9]{1,3})$")


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
    fresh values of the same layout); ``out``: the storage of the returned tensor; ``scratch<j>``:
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
        output: the returned tensor's place in ``out`` (None: no tensor returned).
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
    launches: list[LaunchRecord] = Field(default_factory=list, max_length=MAX_LAUNCHES_PER_CALL)
    torch_ops: list[Name] = Field(default_factory=list, max_length=64)
    side_streams: int = Field(0, ge=0)
    not_replayable: Message | None = None
    layout_copies: list[LayoutCopy] = Field(default_factory=list, max_length=16)

    @model_validator(mode="after")
    def _pointers_name_buffers(self) -> CallRecording:
        names = {b.name for b in self.buffers}
        if self.output is not None and self.output.buffer not in names | {"out"}:
            raise ValueError("the output lies in no recorded buffer")
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
