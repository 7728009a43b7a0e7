"""Recording the Triton launches of a call, in the submission's process (and replaying them
under the CPU interpreter).

Bound into the sandbox beside the other harness files; imports only the standard library,
torch and triton. ``LaunchRecorder.install`` runs before the submission is imported and wraps
the one place every Triton launch passes:

- compiled kernels (GPU): the launcher ``CompiledKernel.run`` returns, called as
  ``run(grid_x, grid_y, grid_z, stream, function, packed_metadata, launch_metadata,
  enter_hook, exit_hook, *bound_args)`` by ``JITFunction.run`` and ``CompiledKernel[grid]``;
  autotuned and heuristic kernels end there too;
- the CPU interpreter: ``InterpretedFunction.run(*args, grid, warmup, **kwargs)``, with the
  grid read from ``interpreter_builder.set_grid_dim``.

Every launch is counted. While a call is being recorded (``recording()``), each launch is kept
with its kernel, grid and arguments, and a ``TorchDispatchMode`` notes the PyTorch operators
the call runs on the device outside Triton launches, and the layout copies of its inputs
(``contiguous``, ``clone``, ``to(memory_format=...)``, ``copy_`` into fresh memory) made before
its first launch: those the replay redoes on its own inputs (``redo_layout_copies``). ``describe`` then turns the kept launches
into a ``protocol.CallRecording``: every pointer argument becomes an offset into a named
buffer (a tensor argument's storage ``arg<i>``/``kwarg_<name>``, the returned tensor's storage
``out``, or ``scratch<j>`` for memory the wrapper allocated), every other argument its value.

Nothing here is trusted: the submission runs in this process and may tamper with it. The
parent validates the recording (protocol.Recording) and a trusted process replays it
(grader/harness/replay_child.py); what the submission can forge here is at most a recording of
other GPU code, whose every output is still verified.
"""

from __future__ import annotations

import contextlib
import hashlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: PyTorch operators a wrapper may run without doing the kernel's work: allocation, views,
#: metadata, and filling fresh memory (zeros for scratch or an accumulating output).
ALLOWED_TORCH_OPS = frozenset({
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "zero_", "fill_", "full", "new_full", "full_like", "ones", "ones_like", "new_ones",
    "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "expand", "slice", "select",
    "unsqueeze", "squeeze", "alias", "detach", "_reshape_alias", "split", "split_with_sizes", "unbind",
    "narrow", "reshape", "view_as", "contiguous", "is_same_size", "_local_scalar_dense", "lift_fresh",
    "resolve_conj", "resolve_neg", "set_", "is_nonzero", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "size", "stride", "numel", "dim",
})


def _storage_of(value) -> tuple[int, int] | None:
    """(base address, bytes) of the storage behind a tensor-like argument, or None."""
    tensor = value if isinstance(value, torch.Tensor) else getattr(value, "base", None)
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        storage = tensor.untyped_storage()
        return int(storage.data_ptr()), int(storage.nbytes())
    except Exception:  # noqa: BLE001 - meta tensors and odd wrappers have no storage
        return None


#: Operators that copy a tensor into new memory of another layout, same dtype and device:
#: ``contiguous()``/``clone()``/``reshape`` of a view that cannot be viewed (``clone``),
#: ``to(memory_format=...)`` (``_to_copy``), ``empty_like(x).copy_(x)`` (``copy_``).
LAYOUT_COPY_OPS = frozenset({"clone", "_to_copy", "copy_"})
#: Most layout copies one recorded call may have redone by the replay.
MAX_LAYOUT_COPIES = 16


def _view_of(tensor) -> dict:
    """A tensor's place in its storage: element offset, size and stride (``protocol.TensorView``)."""
    return {"offset": int(tensor.storage_offset()), "size": list(tensor.shape), "stride": list(tensor.stride())}


def layout_copy(name: str, args: tuple, kwargs: dict, result) -> tuple | None:
    """(source, target) tensors of a pure layout copy (the same values, dtype and device, in
    another memory), or None when the operator is no such copy (a dtype or device change, say)."""
    if name == "copy_" and len(args) >= 2:
        target, source = args[0], args[1]
    elif name in ("clone", "_to_copy") and args:
        source, target = args[0], result
        if name == "_to_copy" and any(kwargs.get(key) not in (None, getattr(source, key, None))
                                      for key in ("dtype", "device")):
            return None
        if name == "_to_copy" and kwargs.get("layout") not in (None, torch.strided):
            return None
    else:
        return None
    if not (isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor)):
        return None
    if source.dtype != target.dtype or source.device != target.device or source.layout != torch.strided:
        return None
    if type(source) is not torch.Tensor or type(target) is not torch.Tensor:
        return None  # a subclass could compute in its own copy
    return source, target


#: Operators that fill memory with one value (the value: an argument, or fixed).
_FILLS = {"zero_": 0.0, "zeros": 0.0, "zeros_like": 0.0, "new_zeros": 0.0, "ones": 1.0, "ones_like": 1.0,
          "new_ones": 1.0, "fill_": None, "full": None, "full_like": None, "new_full": None}


class _TorchOps(TorchDispatchMode):
    """Notes the PyTorch operators a recorded call runs outside Triton launches, and the
    buffers it fills with one value (zeros for an accumulator, -inf for a running max...)."""

    def __init__(self, recorder: LaunchRecorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if self.recorder.in_launch:
            return result
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if name in LAYOUT_COPY_OPS:
            self._note_copy(name, args, kwargs or {}, result)
            return result
        if name not in ALLOWED_TORCH_OPS and name not in self.seen and len(self.seen) < 64:
            self.seen.append(name)
        if name in _FILLS and isinstance(result, torch.Tensor):
            value = _FILLS[name]
            if value is None:
                given = [a for a in list(args)[1:] + list((kwargs or {}).values()) if isinstance(a, (int, float))]
                value = float(given[0]) if given else None
                if name in ("full", "new_full") and len(args) >= 2 and isinstance(args[1], (int, float)):
                    value = float(args[1])
            found = _storage_of(result)
            if found is not None and value is not None:
                self.recorder.fills[found[0]] = (value, str(result.dtype).replace("torch.", ""))
        return result

    def _note_copy(self, name: str, args: tuple, kwargs: dict, result) -> None:
        """Keep a layout copy for ``describe``, which decides whether the replay redoes it (an
        input copied before the first launch) or names it as work outside Triton."""
        pair = layout_copy(name, args, kwargs, result)
        source = _storage_of(pair[0]) if pair else None
        target = _storage_of(pair[1]) if pair else None
        if pair is None or source is None or target is None:
            if name not in self.seen and len(self.seen) < 64:
                self.seen.append(name)
            return
        self.recorder.copies.append({
            "op": name, "source_base": source[0], "target_base": target[0], "target_nbytes": target[1],
            "dtype": str(pair[0].dtype).replace("torch.", ""), "source": _view_of(pair[0]),
            "target": _view_of(pair[1]), "after_launches": len(self.recorder._active or ()),
        })


class LaunchRecorder:
    """Counts every Triton launch and keeps the launches of calls being recorded.

    Attributes:
        count: launches seen since install (every call, recorded or not).
        interpret: True under the CPU interpreter.
        in_launch: depth of launches (and autotuner benchmarking) in progress: PyTorch work and
            launches inside them are Triton's own, not the call's.
    """

    def __init__(self, *, interpret: bool) -> None:
        self.count = 0
        self.interpret = interpret
        self.in_launch = 0
        self._active: list[dict] | None = None
        self._pending_grid: list | None = None
        self.fills: dict[int, tuple[float, str]] = {}
        #: programs launched since install (each launch's grid product), and launches of 0 programs.
        self.programs = 0
        self.empty_launches = 0
        self._last_grid: list | None = None
        #: layout copies seen in the call being recorded (``_TorchOps._note_copy``), in order.
        self.copies: list[dict] = []
        self.original_interpreted_run = None

    # ---- hooks -------------------------------------------------------------------------
    def install(self) -> None:
        """Wrap Triton's launch points (before any submission code runs)."""
        if self.interpret:
            self._install_interpreter()
        else:
            self._install_compiled()
        self._install_autotuner()

    def _install_autotuner(self) -> None:
        """Leave an autotuner's benchmarking launches out of recordings: they try every config
        (with resets between them) before the one launch that computes the output."""
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:  # pragma: no cover - a Triton without autotune
            return
        recorder = self
        original = Autotuner._bench

        def bench(tuner, *args, **kwargs):
            recorder.in_launch += 1
            try:
                return original(tuner, *args, **kwargs)
            finally:
                recorder.in_launch -= 1

        Autotuner._bench = bench

    def count_programs(self, grid: list) -> None:
        """Add one launch's programs (the product of its grid) to the counts."""
        programs = 1
        for size in grid:
            programs *= max(0, int(size))
        self.programs += programs
        self.empty_launches += programs == 0

    def _install_compiled(self) -> None:
        from triton.compiler.compiler import CompiledKernel

        recorder = self
        original = CompiledKernel.run

        def run(kernel):
            launcher = original.fget(kernel)

            def launch(grid_x, grid_y, grid_z, stream, function, packed_metadata, launch_metadata,
                       enter_hook, exit_hook, *args):
                recorder.count += 1
                if not recorder.in_launch:
                    recorder.count_programs([grid_x, grid_y, grid_z])
                if recorder._active is not None and not recorder.in_launch:
                    recorder._active.append({"compiled": kernel, "grid": (grid_x, grid_y, grid_z),
                                             "args": args, "stream": stream})
                recorder.in_launch += 1
                try:
                    return launcher(grid_x, grid_y, grid_z, stream, function, packed_metadata, launch_metadata,
                                    enter_hook, exit_hook, *args)
                finally:
                    recorder.in_launch -= 1

            return launch

        CompiledKernel.run = property(run)

    def _install_interpreter(self) -> None:
        from triton.runtime import interpreter

        recorder = self
        original_run = interpreter.InterpretedFunction.run
        self.original_interpreted_run = original_run
        builder = interpreter.interpreter_builder
        original_set_grid_dim = builder.set_grid_dim

        def set_grid_dim(*grid):
            recorder._last_grid = list(grid)
            if recorder._pending_grid is not None:
                recorder._pending_grid[:] = list(grid)
            return original_set_grid_dim(*grid)

        def run(function, *args, grid, warmup, **kwargs):
            if warmup:
                return original_run(function, *args, grid=grid, warmup=warmup, **kwargs)
            recorder.count += 1
            outer = not recorder.in_launch
            recorder._last_grid = None
            entry = None
            if recorder._active is not None and not recorder.in_launch:
                entry = {"interpreted": function, "grid": None, "args": args, "kwargs": dict(kwargs)}
                recorder._pending_grid = []
            recorder.in_launch += 1
            try:
                return original_run(function, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                recorder.in_launch -= 1
                if outer and recorder._last_grid is not None:
                    recorder.count_programs(recorder._last_grid)
                if entry is not None:
                    captured = recorder._pending_grid or [1]
                    entry["grid"] = tuple(int(g) for g in (list(captured) + [1, 1])[:3])
                    recorder._pending_grid = None
                    recorder._active.append(entry)

        builder.set_grid_dim = set_grid_dim
        interpreter.InterpretedFunction.run = run

    # ---- recording ---------------------------------------------------------------------
    @contextlib.contextmanager
    def recording(self):
        """Keep the launches made inside the block; yields (launches, torch ops seen)."""
        launches: list[dict] = []
        self._active = launches
        self.fills = {}
        self.copies = []
        ops = _TorchOps(self)
        try:
            with ops:
                yield launches, ops.seen
        finally:
            self._active = None

    def describe(self, call_id: str, launches: list[dict], torch_ops: list[str], *, args: list, kwargs: dict,
                 output, current_stream: int | None) -> tuple[dict, dict]:
        """The recording of one call (a ``protocol.CallRecording`` as a dict) and the kernels it
        launched (id -> (``protocol.KernelRecord`` dict, cubin bytes); empty under the
        interpreter, which has no binaries).

        Args:
            call_id: names the recording.
            launches / torch_ops: what ``recording()`` kept.
            args / kwargs: the call's arguments (tensors among them name the ``arg`` buffers).
            output: the returned value (a tensor names the ``out`` buffer; a tuple or list of
                tensors names ``out``, ``out1``, ``out2``, ... in order).
            current_stream: the caller's stream handle (launches elsewhere count as side streams).
        """
        buffers: dict[str, dict] = {}
        by_base: dict[int, str] = {}
        problems: list[str] = []

        def known(name: str, value) -> str | None:
            found = _storage_of(value)
            if found is None:
                return None
            base, nbytes = found
            if base in by_base:
                return by_base[base]  # the returned tensor may live in an input's memory
            by_base[base] = name
            buffers[name] = {"name": name, "nbytes": nbytes}
            return name

        for index, value in enumerate(args):
            known(f"arg{index}", value)
        for key, value in kwargs.items():
            known(f"kwarg_{key}", value)
        layouts = []
        for k, tensor in enumerate(returned_tensors(output)):
            if tensor.device.type == "meta":
                break
            name = "out" if k == 0 else f"out{k}"
            layouts.append({"buffer": known(name, tensor) or name, "size": list(tensor.shape),
                            "stride": list(tensor.stride()), "offset": int(tensor.storage_offset()),
                            "dtype": str(tensor.dtype).replace("torch.", "")})
        scratch = 0
        copies: list[dict] = []
        torch_ops = list(torch_ops)
        for copy in self.copies:
            source = by_base.get(copy["source_base"])
            target = by_base.get(copy["target_base"])
            copied = {c["target"] for c in copies}
            if copy["after_launches"]:
                why = "after a launch"
            elif source is None or not (source.startswith(("arg", "kwarg_")) or source in copied):
                why = "of memory that is not an input"
            elif target is not None and target not in copied:
                why = "into an input" if target.startswith(("arg", "kwarg_")) else "into the returned tensor"
            elif len(copies) >= MAX_LAYOUT_COPIES:
                why = f"more than {MAX_LAYOUT_COPIES} copies"
            else:
                why = None
            if why is not None:
                label = f"{copy['op']} ({why})"
                if label not in torch_ops and len(torch_ops) < 64:
                    torch_ops.append(label)
                continue
            if target is None:
                target = f"scratch{scratch}"
                scratch += 1
                by_base[copy["target_base"]] = target
                buffers[target] = {"name": target, "nbytes": copy["target_nbytes"]}
            copies.append({"op": copy["op"], "source": source, "target": target, "dtype": copy["dtype"],
                           "source_view": copy["source"], "target_view": copy["target"]})
        kernels: dict[str, tuple[dict, bytes]] = {}
        recorded = []
        side_streams = 0
        for launch in launches:
            values = [*launch["args"], *(launch.get("kwargs") or {}).values()]
            compiled = launch.get("compiled")
            signature = None
            entry = {"grid": list(launch["grid"]), "kernel": ""}
            if compiled is not None:
                kernel, cubin, problem = kernel_record(compiled)
                if problem:
                    problems.append(problem)
                else:
                    kernels[kernel["id"]] = (kernel, cubin)
                    entry["kernel"] = kernel["id"]
                    signature = kernel["signature"]
                if current_stream is not None and int(launch["stream"]) != int(current_stream):
                    side_streams += 1
            record_args = []
            for position, value in enumerate(values):
                constexpr = signature is not None and position < len(signature) and signature[position] == "constexpr"
                if value is None or isinstance(value, (bool, int, float)):
                    record_args.append({"kind": "value", "value": value})
                    continue
                if constexpr or not hasattr(value, "data_ptr"):
                    # A constexpr (a dtype, a string...) is baked into the binary; under the
                    # interpreter the replay passes the original object again.
                    record_args.append({"kind": "value", "value": None})
                    if not constexpr and signature is not None:
                        problems.append(f"an argument of type {type(value).__name__} cannot be replayed")
                    continue
                found = _storage_of(value)
                if found is None:
                    problems.append(f"a pointer argument ({type(value).__name__}) is not memory the grader can account for")
                    record_args.append({"kind": "value", "value": None})
                    continue
                base = found[0]
                name = by_base.get(base)
                if name is None:
                    name = f"scratch{scratch}"
                    scratch += 1
                    by_base[base] = name
                    buffers[name] = {"name": name, "nbytes": found[1]}
                if name.startswith(("out", "scratch")) and base in self.fills:
                    buffers[name]["fill"], buffers[name]["fill_dtype"] = self.fills[base]
                record_args.append({"kind": "pointer", "buffer": name, "offset_bytes": int(value.data_ptr()) - base})
            entry["args"] = record_args
            recorded.append(entry)
        recording = {
            "call_id": call_id,
            "buffers": list(buffers.values()),
            "output": layouts[0] if layouts else None,
            "more_outputs": layouts[1:],
            "launches": recorded,
            "layout_copies": copies,
            "torch_ops": torch_ops,
            "side_streams": side_streams,
            "not_replayable": "; ".join(dict.fromkeys(problems)) or None,
        }
        return recording, kernels

    # ---- CPU interpreter replay -----------------------------------------------------------
    def replay_interpreted(self, launches: list[dict], recording: dict, fresh: dict[str, torch.Tensor]):
        """Run the kept interpreter launches again on fresh buffers; returns the output tensors
        (``output_views``: in return order, empty when the call returned none).

        Args:
            launches: what ``recording()`` kept for the call (interpreter entries).
            recording: ``describe``'s recording of the same call (buffer names per pointer).
            fresh: buffer name -> a uint8 tensor holding the new storage (inputs with new values;
                ``out`` and scratch as the grader prepared them).

        Raises:
            whatever the launches raise.
        """
        run = self.original_interpreted_run
        redo_layout_copies(recording, fresh)
        for launch, described in zip(launches, recording["launches"]):
            values = [*launch["args"], *(launch.get("kwargs") or {}).values()]
            replaced = []
            for value, arg in zip(values, described["args"]):
                if arg["kind"] == "pointer":
                    tensor = value if isinstance(value, torch.Tensor) else value.base
                    storage = fresh[arg["buffer"]].untyped_storage()
                    element = tensor.element_size()
                    replaced.append(torch.empty(0, dtype=tensor.dtype).set_(
                        storage, arg["offset_bytes"] // element, tuple(tensor.shape), tuple(tensor.stride())))
                else:
                    replaced.append(value)
            positional = replaced[:len(launch["args"])]
            keyword = dict(zip((launch.get("kwargs") or {}).keys(), replaced[len(launch["args"]):]))
            grid = tuple(launch["grid"])
            self.in_launch += 1
            try:
                run(launch["interpreted"], *positional, grid=grid, warmup=False, **keyword)
            finally:
                self.in_launch -= 1
        return output_views(recording, fresh)


def returned_tensors(result) -> list[torch.Tensor]:
    """The tensors a call returned, in order: ``[result]`` for a tensor, the elements of a tuple
    or list of tensors (at most protocol.MAX_OUTPUTS), else []."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and 0 < len(result) <= 8 and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    return []


def output_views(recording: dict, fresh: dict[str, torch.Tensor]) -> list:
    """Every returned tensor's place in the replay's buffers, in return order (a missing buffer
    gives None in its place)."""
    layouts = [] if recording.get("output") is None else [recording["output"], *(recording.get("more_outputs") or [])]
    return [output_view(layout, fresh) for layout in layouts]


def buffer_view(raw: torch.Tensor, dtype: torch.dtype, view: dict) -> torch.Tensor:
    """A strided view (``protocol.TensorView``: element offset, size, stride) of ``dtype``
    elements of the uint8 buffer ``raw``.

    Raises:
        RuntimeError: the view does not fit in the buffer.
    """
    return torch.empty(0, dtype=dtype, device=raw.device).set_(
        raw.untyped_storage(), view["offset"], tuple(view["size"]), tuple(view["stride"]))


def layout_copy_views(recording: dict, fresh: dict[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (target, source) views of the layout copies of a recorded call's inputs made before
    its first launch (``protocol.LayoutCopy``: ``contiguous()``, ``clone()``,
    ``to(memory_format=...)``, ``copy_`` into new memory), in the replay's buffers ``fresh``.
    ``target.copy_(source)`` for each, in order, redoes them on the replay's inputs: data
    movement only (the same dtype on both sides), never the call's arithmetic.

    Raises:
        RuntimeError: a view does not fit in its buffer (the parent validated that it does).
    """
    pairs = []
    for copy in recording.get("layout_copies") or ():
        dtype = getattr(torch, copy["dtype"])
        pairs.append((buffer_view(fresh[copy["target"]], dtype, copy["target_view"]),
                      buffer_view(fresh[copy["source"]], dtype, copy["source_view"])))
    return pairs


def redo_layout_copies(recording: dict, fresh: dict[str, torch.Tensor]) -> None:
    """Redo a recorded call's layout copies (``layout_copy_views``) on the replay's buffers."""
    for target, source in layout_copy_views(recording, fresh):
        target.copy_(source)


def output_view(layout: dict | None, fresh: dict[str, torch.Tensor]):
    """The returned tensor's place (``protocol.OutputLayout``) in the replay's buffers, or None."""
    if layout is None or layout.get("buffer", "out") not in fresh:
        return None
    dtype = getattr(torch, layout["dtype"])
    storage = fresh[layout.get("buffer", "out")].untyped_storage()
    return torch.empty(0, dtype=dtype, device=fresh[layout.get("buffer", "out")].device).set_(
        storage, layout["offset"], tuple(layout["size"]), tuple(layout["stride"]))


def kernel_record(compiled) -> tuple[dict | None, bytes | None, str | None]:
    """(``protocol.KernelRecord`` dict, cubin bytes, None) for a CompiledKernel, or (None, None,
    why it cannot be replayed)."""
    try:
        cubin = compiled.asm["cubin"]
        metadata = compiled.metadata
        signature = [value if isinstance(value, str) else "tuple" for value in compiled.src.signature.values()]
    except Exception as exc:  # noqa: BLE001 - a kernel built some other way
        return None, None, f"kernel {getattr(compiled, 'name', '?')}: no cubin or signature ({type(exc).__name__})"
    if not isinstance(cubin, (bytes, bytearray)):
        return None, None, f"kernel {compiled.name}: its binary is not a cubin"
    if getattr(metadata, "tensordesc_meta", None):
        return None, None, f"kernel {compiled.name}: tensor-descriptor (TMA) arguments cannot be replayed"
    record = {
        "id": hashlib.sha256(bytes(cubin)).hexdigest(),
        "name": str(metadata.name),
        "signature": signature,
        "num_warps": int(metadata.num_warps),
        "num_ctas": int(getattr(metadata, "num_ctas", 1)),
        "shared": int(metadata.shared),
        "global_scratch_size": int(getattr(metadata, "global_scratch_size", 0) or 0),
        "global_scratch_align": int(getattr(metadata, "global_scratch_align", 1) or 1),
        "profile_scratch_size": int(getattr(metadata, "profile_scratch_size", 0) or 0),
        "launch_cooperative_grid": bool(getattr(metadata, "launch_cooperative_grid", False)),
        "launch_pdl": bool(getattr(metadata, "launch_pdl", False)),
        "arch": int(getattr(metadata.target, "arch", 0) or 0),
    }
    return record, bytes(cubin), None


def fresh_buffers(recording: dict, inputs: dict[str, torch.Tensor], device, *, copy_inputs: bool = True
                  ) -> dict[str, torch.Tensor]:
    """New storage for every buffer of a recorded call, as uint8 tensors on ``device``.

    Args:
        recording: a ``protocol.CallRecording`` (dict form).
        inputs: ``arg<i>``/``kwarg_<name>`` -> uint8 tensor with the new input values (the same
            number of bytes as the recorded buffer).
        device: where to allocate ``out`` and scratch.
        copy_inputs: use copies of ``inputs`` (default), or the given storage itself (the timer
            refreshes its inputs in place between timed calls).

    Returns:
        buffer name -> uint8 tensor; ``out`` and scratch hold NaN bytes (0xFF), or the value the
        wrapper filled them with before launching.

    Raises:
        ValueError: an input buffer is missing or has another size.
    """
    fresh: dict[str, torch.Tensor] = {}
    for buffer in recording["buffers"]:
        name, nbytes = buffer["name"], int(buffer["nbytes"])
        if name.startswith(("arg", "kwarg_")):
            given = inputs.get(name)
            if given is None or given.numel() != nbytes:
                raise ValueError(f"no new values of {nbytes} bytes for buffer {name}")
            fresh[name] = given.to(device).clone() if copy_inputs else given
            continue
        raw = torch.full((nbytes,), 255, dtype=torch.uint8, device=device)
        if buffer.get("fill") is not None and buffer.get("fill_dtype"):
            dtype = getattr(torch, buffer["fill_dtype"])
            element = torch.empty(0, dtype=dtype).element_size()
            raw[: nbytes - nbytes % element].view(dtype).fill_(buffer["fill"])
        fresh[name] = raw
    return fresh


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``tensor`` as a uint8 tensor (shares memory)."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
