"""Loading recorded Triton kernels and launching them through the CUDA driver API (ctypes).

Used by the trusted replay process (grader/harness/replay_child.py), which never imports a
submission. It does what Triton's own launcher does for a compiled kernel, without Triton's
launcher: Triton 3.6 builds that launcher as C code generated from the kernel's signature,
which a recorded (hostile) signature must never reach. Here the signature only selects, from a
fixed table, how each argument value is packed into bytes.

What a launch needs (triton/backends/nvidia/driver.py and driver.c of Triton 3.6):

- load: ``cuModuleLoadData`` on the cubin, ``cuModuleGetFunction`` by the kernel's name, and
  above 48 KiB of dynamic shared memory the opt-in attribute
  (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` = opt-in limit minus static shared).
- parameters: every non-constexpr argument in signature order (pointers as 64-bit addresses;
  integers at their width; fp16/bf16/fp32/fp64 as their bit patterns, bf16 by truncating the
  fp32 bits as Triton does), then the global-scratch and profile-scratch pointers.
- launch: grid (x * num_ctas, y, z), block (32 x num_warps, 1, 1), the dynamic shared memory,
  the caller's stream; ``cuLaunchKernelEx`` with a cluster dimension when num_ctas > 1, and
  the cooperative or programmatic-serialisation attributes when the kernel asks for them.

Where the driver has ``cuFuncGetParamInfo`` (CUDA 12.4+), the parameter count and sizes the
cubin declares are checked against the packed ones before the first launch, so a recording
whose signature does not match its binary is refused instead of launched.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

CUDA_SUCCESS = 0
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 16
CU_FUNC_CACHE_PREFER_SHARED = 1
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1
STATIC_SHARED_LIMIT = 49152

#: How each scalar type is packed: (ctypes type, struct format of its bytes, integer range).
_INTEGERS = {
    "i1": (ctypes.c_int8, -(1 << 7), (1 << 7) - 1),
    "i8": (ctypes.c_int8, -(1 << 7), (1 << 7) - 1),
    "i16": (ctypes.c_int16, -(1 << 15), (1 << 15) - 1),
    "i32": (ctypes.c_int32, -(1 << 31), (1 << 31) - 1),
    "i64": (ctypes.c_int64, -(1 << 63), (1 << 63) - 1),
    "u1": (ctypes.c_uint8, 0, 1),
    "u8": (ctypes.c_uint8, 0, (1 << 8) - 1),
    "u16": (ctypes.c_uint16, 0, (1 << 16) - 1),
    "u32": (ctypes.c_uint32, 0, (1 << 32) - 1),
    "u64": (ctypes.c_uint64, 0, (1 << 64) - 1),
}


class CudaError(RuntimeError):
    """A CUDA driver call failed (the message names the call and the CUresult)."""


class RecordingMismatch(ValueError):
    """A recorded launch cannot be packed as its signature says (a wrong type or count)."""


def _bits_fp16(value: float) -> int:
    return struct.unpack("<H", struct.pack("<e", value))[0]


def _bits_fp32(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _bits_bf16(value: float) -> int:
    return _bits_fp32(value) >> 16  # truncation, as Triton's pack_bf16


def _bits_fp64(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def pack_value(kind: str, value) -> ctypes._SimpleCData:
    """One kernel parameter of Triton type ``kind`` holding ``value``.

    Raises:
        RecordingMismatch: the value's Python type or range does not fit ``kind``.
    """
    if kind.startswith("*"):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << 64):
            raise RecordingMismatch(f"pointer parameter with value {value!r}")
        return ctypes.c_uint64(value)
    if kind in _INTEGERS:
        ctype, low, high = _INTEGERS[kind]
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int) or not low <= value <= high:
            raise RecordingMismatch(f"{kind} parameter with value {value!r}")
        return ctype(value)
    if kind in ("fp16", "bf16", "fp32", "f32", "fp64"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordingMismatch(f"{kind} parameter with value {value!r}")
        value = float(value)
        if kind == "fp16":
            return ctypes.c_uint16(_bits_fp16(value))
        if kind == "bf16":
            return ctypes.c_uint16(_bits_bf16(value))
        if kind in ("fp32", "f32"):
            return ctypes.c_uint32(_bits_fp32(value))
        return ctypes.c_uint64(_bits_fp64(value))
    raise RecordingMismatch(f"parameter type {kind!r} cannot be packed")


def pack_parameters(signature: list[str], values: list, global_scratch: int, profile_scratch: int = 0
                    ) -> list[ctypes._SimpleCData]:
    """The kernel's parameters in order: every non-constexpr argument, then the two scratch
    pointers (global, profile) Triton 3.6 appends.

    Args:
        signature: the kernel's Triton types, one per argument (``constexpr`` entries skipped).
        values: per argument: a device address (int) for pointers, the scalar value otherwise.
        global_scratch / profile_scratch: device addresses, 0 when the kernel needs none.

    Raises:
        RecordingMismatch: a count or value that does not fit the signature.
    """
    if len(signature) != len(values):
        raise RecordingMismatch(f"{len(values)} arguments for a signature of {len(signature)}")
    packed = [pack_value(kind, value) for kind, value in zip(signature, values) if kind != "constexpr"]
    packed.append(ctypes.c_uint64(global_scratch))
    packed.append(ctypes.c_uint64(profile_scratch))
    return packed


class _LaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("value", ctypes.c_int), ("cluster", ctypes.c_uint * 3)]


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchAttributeValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@dataclass
class LoadedKernel:
    """A kernel function loaded from a cubin, with what its launches need."""

    name: str
    module: int
    function: int
    shared: int
    num_warps: int
    num_ctas: int
    cooperative: bool
    pdl: bool
    registers: int
    param_sizes: list[int] | None


class CudaDriver:
    """The few driver entry points the replay needs, on the current (PyTorch's primary) context.

    Raises:
        CudaError: libcuda cannot be loaded, or a call fails.
    """

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise CudaError(f"cannot load libcuda.so.1: {exc}") from exc
        lib = self.lib
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        lib.cuModuleUnload.argtypes = [ctypes.c_void_p]
        lib.cuFuncGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_void_p]
        lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.cuFuncSetCacheConfig.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.cuCtxGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                       ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        self._param_info = getattr(lib, "cuFuncGetParamInfo", None)
        if self._param_info is not None:
            self._param_info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_size_t)]

    def check(self, result: int, what: str) -> None:
        """Raise CudaError unless ``result`` is CUDA_SUCCESS."""
        if result != CUDA_SUCCESS:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise CudaError(f"{what} failed: {(name.value or b'?').decode()} ({result})")

    def load(self, cubin: bytes, *, name: str, shared: int, num_warps: int, num_ctas: int, cooperative: bool,
             pdl: bool) -> LoadedKernel:
        """Load one kernel from its cubin (see the module docstring).

        Raises:
            CudaError: the driver refuses the binary, the name, or the shared-memory size.
        """
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        function = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), "cuModuleGetFunction")
        registers = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(registers), CU_FUNC_ATTRIBUTE_NUM_REGS, function),
                   "cuFuncGetAttribute(NUM_REGS)")
        max_threads = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(max_threads), CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                               function), "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)")
        if 32 * num_warps > max_threads.value:
            raise CudaError(f"kernel {name} allows {max_threads.value} threads per block, the recording asks "
                            f"for {32 * num_warps}")
        if shared > STATIC_SHARED_LIMIT:
            device = ctypes.c_int()
            self.check(self.lib.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
            optin = ctypes.c_int()
            self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(optin), CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                     device.value), "cuDeviceGetAttribute(SHARED_OPTIN)")
            if shared > optin.value:
                raise CudaError(f"kernel {name} needs {shared} bytes of shared memory; the device allows {optin.value}")
            self.check(self.lib.cuFuncSetCacheConfig(function, CU_FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig")
            static = ctypes.c_int()
            self.check(self.lib.cuFuncGetAttribute(ctypes.byref(static), CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                       "cuFuncGetAttribute(SHARED_SIZE_BYTES)")
            self.check(self.lib.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   optin.value - static.value), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED)")
        if num_ctas == 16:
            self.check(self.lib.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                       "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")
        return LoadedKernel(name=name, module=module.value, function=function.value, shared=shared,
                            num_warps=num_warps, num_ctas=num_ctas, cooperative=cooperative, pdl=pdl,
                            registers=registers.value, param_sizes=self.parameter_sizes(function.value))

    def parameter_sizes(self, function: int) -> list[int] | None:
        """Byte size of every parameter the kernel declares (None where the driver cannot say)."""
        if self._param_info is None:
            return None
        sizes = []
        for index in range(1024):
            offset, size = ctypes.c_size_t(), ctypes.c_size_t()
            if self._param_info(function, index, ctypes.byref(offset), ctypes.byref(size)) != CUDA_SUCCESS:
                break
            sizes.append(size.value)
        return sizes

    def launch(self, kernel: LoadedKernel, grid: tuple[int, int, int], parameters: list, stream: int) -> None:
        """Launch ``kernel`` with packed ``parameters`` on ``stream`` (a CUstream handle).

        Raises:
            RecordingMismatch: the packed parameters differ from what the cubin declares.
            CudaError: the launch is refused.
        """
        if kernel.param_sizes is not None:
            packed = [ctypes.sizeof(p) for p in parameters]
            if packed != kernel.param_sizes:
                raise RecordingMismatch(f"kernel {kernel.name} declares parameters of {kernel.param_sizes} bytes, "
                                        f"the recording packs {packed}")
        pointers = (ctypes.c_void_p * len(parameters))(*[ctypes.addressof(p) for p in parameters])
        grid_x, grid_y, grid_z = grid
        block_x = 32 * kernel.num_warps
        if kernel.num_ctas == 1 and not kernel.cooperative and not kernel.pdl:
            self.check(self.lib.cuLaunchKernel(kernel.function, grid_x, grid_y, grid_z, block_x, 1, 1, kernel.shared,
                                               stream, pointers, None), f"cuLaunchKernel({kernel.name})")
            return
        attrs = (_LaunchAttribute * 4)()
        count = 0
        if kernel.pdl:
            attrs[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attrs[count].value.value = 1
            count += 1
        if kernel.cooperative:
            attrs[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attrs[count].value.value = 1
            count += 1
        if kernel.num_ctas != 1:
            attrs[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attrs[count].value.cluster[0] = kernel.num_ctas
            attrs[count].value.cluster[1] = 1
            attrs[count].value.cluster[2] = 1
            count += 1
            attrs[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            attrs[count].value.value = CU_CLUSTER_SCHEDULING_POLICY_SPREAD
            count += 1
        config = _LaunchConfig(grid_x * kernel.num_ctas, grid_y, grid_z, block_x, 1, 1, kernel.shared, stream,
                               ctypes.cast(attrs, ctypes.POINTER(_LaunchAttribute)), count)
        self.check(self.lib.cuLaunchKernelEx(ctypes.byref(config), kernel.function, pointers, None),
                   f"cuLaunchKernelEx({kernel.name})")
