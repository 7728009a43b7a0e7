"""bfloat16 arithmetic under Triton 3.6's CPU interpreter, done right: through fp32.

The interpreter (``triton/runtime/interpreter.py``) stores a bf16 value as its 16 bits in a
NumPy ``uint16`` array (NumPy has no bfloat16) and applies NumPy's operators to those arrays
as they are: ``a * b`` of two bf16 blocks multiplies the bit patterns as integers (0.75 x -1
gave 3.7e19 in a probe: 0x3F40 * 0xBF80 mod 2^16), ``tl.sum`` adds them as integers,
a bf16 ``tl.dot`` multiplies integers, a cast from fp32 to bf16 truncates where a GPU rounds
to nearest even, and a bf16 constant (``x_bf16 * 2.0``) raises AttributeError (no
``get_bf16`` in its builder). A correct kernel that
does any of its arithmetic in bf16 (products rounded to the input dtype, as PyTorch's CUDA
backward does) then fails on the CPU with garbage outputs.

``install()`` wraps those builder operations (and the interpreter's sum reduction) so that a
bf16 operand is widened to fp32 (exact), the operation runs in fp32, and a bf16 result is
rounded to nearest even, as the GPU's bf16 instructions round (fp32 keeps 24 bits, more than
2 x 8 + 2, so one fp32 operation then one rounding to bf16 equals the correctly rounded bf16
operation for +, -, *, / and sqrt). A bf16 sum reduces pairwise, rounding to bf16 after every
level of adds, as a GPU's bf16 reduction tree rounds after every add (the order differs; the
size of the error is the same class). Only bf16 operands take the new path: every other
dtype runs the interpreter's code unchanged.

Imported by the check child (check_child.py) under TRITON_INTERPRET=1 before the submission;
imports only the standard library, NumPy and Triton. On a GPU nothing here runs.
"""

from __future__ import annotations

import numpy as np

#: Builder operations whose float operands are widened (names in Triton 3.6's InterpreterBuilder).
_FLOAT_OPS = (
    "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
    "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf",
    "create_fcmpOLT", "create_fcmpOGT", "create_fcmpOLE", "create_fcmpOGE", "create_fcmpOEQ", "create_fcmpONE",
    "create_fcmpULT", "create_fcmpUGT", "create_fcmpULE", "create_fcmpUGE", "create_fcmpUEQ", "create_fcmpUNE",
    "create_fma", "create_clampf",
    "create_cos", "create_sin", "create_exp", "create_exp2", "create_log", "create_log2", "create_sqrt",
    "create_precise_sqrt", "create_rsqrt", "create_erf", "create_floor", "create_ceil",
)


def bf16_bits_to_fp32(bits: np.ndarray) -> np.ndarray:
    """bf16 values stored as uint16 bit patterns -> the same values as float32 (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def fp32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bit patterns (uint16), rounded to nearest, ties to even; NaN stays
    a quiet NaN of the same sign (what ``__float2bfloat16_rn`` gives on a GPU) with the top of its
    payload, so that the harness's poison (every bit set, harness/poison.py) stays recognisable
    through bf16 arithmetic, as it does through fp32 on a CPU."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    quiet_nan = (bits >> 16).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(np.isnan(values), quiet_nan, rounded).astype(np.uint16)


def install() -> bool:
    """Route the interpreter's bf16 arithmetic through fp32 (see the module docstring).
    Returns False (nothing changed) when the interpreter is not the one this was written for."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - no Triton
        return False
    builder_class = getattr(interpreter, "InterpreterBuilder", None)
    handle_class = getattr(interpreter, "TensorHandle", None)
    reduce_class = getattr(interpreter, "ReduceOps", None)
    if builder_class is None or handle_class is None or getattr(builder_class, "_bf16_through_fp32", False):
        return builder_class is not None
    bf16, fp32 = tl.bfloat16, tl.float32

    def is_bf16(value) -> bool:
        return isinstance(value, handle_class) and getattr(value.dtype, "scalar", value.dtype) == bf16

    def widen(value):
        return handle_class(bf16_bits_to_fp32(value.data), fp32) if is_bf16(value) else value

    def wrap(original):
        def through_fp32(self, *args):
            if not any(is_bf16(a) for a in args):
                return original(self, *args)
            result = original(self, *(widen(a) for a in args))
            if isinstance(result, handle_class) and result.data.dtype == np.float32:
                return handle_class(fp32_to_bf16_bits(result.data), bf16)
            if isinstance(result, handle_class):  # a comparison: booleans, typed as its operands were
                return handle_class(result.data, bf16)
            return result

        through_fp32.__name__ = getattr(original, "__name__", "through_fp32")
        return through_fp32

    for name in _FLOAT_OPS:
        original = getattr(builder_class, name, None)
        if original is not None:
            setattr(builder_class, name, wrap(original))

    original_cast = builder_class.cast_impl

    def cast_impl(self, src, dst_type):
        dst = dst_type.scalar
        if is_bf16(src) and dst != bf16:
            return original_cast(self, widen(src), dst_type)
        if dst == bf16 and not is_bf16(src):
            wide = original_cast(self, src, fp32) if src.dtype.scalar != fp32 else src
            return handle_class(fp32_to_bf16_bits(wide.data), bf16)
        return original_cast(self, src, dst_type)

    builder_class.cast_impl = cast_impl  # create_fp_trunc, create_fp_ext... call it through self

    original_dot = builder_class.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    builder_class.create_dot = create_dot
    if not hasattr(builder_class, "get_bf16"):  # a bf16 constant (``x_bf16 * 2.0`` keeps bf16)
        builder_class.get_bf16 = lambda self, value: handle_class(
            fp32_to_bf16_bits(np.array([value], dtype=np.float32)), bf16)

    _install_bf16_atomics(builder_class, handle_class, interpreter, bf16)

    if reduce_class is not None:
        original_sum = reduce_class.sum

        def bf16_sum(self, input):
            if input.dtype.scalar != bf16:
                return original_sum(self, input)
            values = bf16_bits_to_fp32(input.handle.data)
            axis = self.axis
            if axis is None:
                values, axis = values.reshape(-1), 0
            values = np.moveaxis(values, axis, 0)
            while values.shape[0] > 1:  # one level of a reduction tree, rounded to bf16
                if values.shape[0] % 2:
                    values = np.concatenate([values, np.zeros_like(values[:1])])
                values = bf16_bits_to_fp32(fp32_to_bf16_bits(values[0::2] + values[1::2]))
            total = values[0] if values.shape[0] else np.zeros(values.shape[1:], np.float32)
            if self.keep_dims:
                total = np.expand_dims(total, self.axis) if self.axis is not None else total.reshape(
                    [1] * input.handle.data.ndim)
            return self.to_tensor(fp32_to_bf16_bits(total), input.dtype)

        reduce_class.sum = bf16_sum
    builder_class._bf16_through_fp32 = True
    return True


def _install_bf16_atomics(builder_class, handle_class, interpreter, bf16) -> None:
    """bf16 ``tl.atomic_add`` and ``tl.atomic_xchg`` under the interpreter, which refuses them
    (its C++ ``atomic_rmw`` raises "Unsupported data type" for the uint16 storage of bf16);
    ``atomic_max``/``atomic_min`` on bf16 are refused by Triton itself, on a GPU too.

    Each element, in block order, reads the old value, applies the operation in fp32 and stores
    it rounded to nearest even, as one GPU atomic on a bf16 word does; the old values are
    returned. Elements of one block that hit the same address are applied one after another
    (in rounds of distinct addresses), as the GPU serialises them. Atomics on any other dtype
    run unchanged."""
    native = getattr(interpreter, "_interpreter", None)
    ir = getattr(interpreter, "_ir", None)
    original_rmw = getattr(builder_class, "create_atomic_rmw", None)
    if native is None or ir is None or original_rmw is None:
        return
    float_ops = {ir.ATOMIC_OP.FADD: np.add, ir.ATOMIC_OP.XCHG: lambda old, value: value}

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        if getattr(val.dtype, "scalar", val.dtype) != bf16 or rmw_op not in float_ops:
            return original_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        operation = float_ops[rmw_op]
        addresses = np.asarray(ptr.data).reshape(-1)
        values = bf16_bits_to_fp32(np.asarray(val.data).reshape(-1))
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptr.data)).reshape(-1)
        old_bits = np.zeros(addresses.shape, dtype=np.uint16)
        pending = np.flatnonzero(active)
        while pending.size:
            # The first remaining element of each address goes this round: distinct addresses.
            _, first = np.unique(addresses[pending], return_index=True)
            now = pending[np.sort(first)]
            everything = np.ones(now.shape, dtype=bool)
            old = native.load(addresses[now], everything, np.zeros(now.shape, dtype=np.uint16),
                              np.dtype(np.uint16))
            old_bits[now] = old
            new = fp32_to_bf16_bits(operation(bf16_bits_to_fp32(old), values[now]))
            native.store(addresses[now], new, everything)
            pending = np.setdiff1d(pending, now, assume_unique=True)
        return handle_class(old_bits.reshape(np.shape(ptr.data)), bf16)

    builder_class.create_atomic_rmw = create_atomic_rmw
