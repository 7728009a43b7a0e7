"""Triton 3.6's CPU interpreter made to run what the GPU compiler runs in public kernels.

Two gaps made correct kernels fail on the CPU only (issue #37):

- **libdevice math.** ``triton.language.extra.libdevice.tanh`` (how FlagGems, Liger and Unsloth
  take tanh, erf, pow, ...) is a stub with no body: the GPU compiler swaps it for the CUDA
  backend's ``extra.cuda.libdevice`` function, the interpreter calls the stub and gets None
  (``TypeError: ... 'int' and 'NoneType'``); ``extra.cuda.libdevice.tanh`` itself raises "Did
  you forget to add @triton.jit?" (it needs the compiler's semantic), and even with one the
  interpreter's builder refuses ``extern_elementwise``. ``install()`` makes both modules' functions
  run the compiler's own dispatch (the same accepted dtypes, the same type errors, the same
  result dtype) with ``interpreter_semantic``, and evaluates the libdevice symbol with NumPy (or
  torch for the special functions NumPy lacks) in the operand's dtype: fp32 functions in fp32,
  fp64 in fp64, the precision class of libdevice's (a few ulp). A function not evaluated here
  raises ``LibdeviceUnavailable`` naming it ("libdevice.X is not available on the CPU
  interpreter; this check runs on the GPU"); the parent reports the checks it stopped as not
  run, never as wrong arithmetic (grader/checks/interpreter_limits.py).
- **``and`` / ``or`` / ``not`` between tensors.** Compiled for a GPU, ``a and b`` of two block
  tensors is an element-wise logical and (with a warning that it is deprecated); the interpreter
  runs the kernel as Python, where ``and`` is Python's (the first block is "true", so the mask
  is ``b`` alone: an 8x8 block wrote all 8 rows where 3 were allowed). ``install()`` adds to the
  interpreter's own AST rewrite of a kernel (``FunctionRewriter``) one that turns ``and``/``or``
  into the compiler's evaluation (each operand in order, a non-tensor operand short-circuiting
  as a constexpr does) and ``not`` of a tensor into ``tensor.__not__``, and keeps the
  compiler's deprecation warning as a note for the report (``notes()``).

Imported by the check child (check_child.py) under TRITON_INTERPRET=1 before the submission;
imports only the standard library, NumPy, Triton and (lazily) torch. On a GPU nothing here runs.
"""

from __future__ import annotations

import ast
import math

import numpy as np

#: The compiler's warning for ``and``/``or`` between block tensors (code_generator.visit_BoolOp).
BOOL_OP_DEPRECATION = ("Logical operators 'and' and 'or' are deprecated for non-scalar tensors; please use '&' or '|'"
                       " instead")
#: At most this many distinct notes (one per kernel line) are kept.
MAX_NOTES = 5


class LibdeviceUnavailable(NotImplementedError):
    """A libdevice function the CPU interpreter does not evaluate; the message names it. The
    parent reads the name from the call's exception (``UNAVAILABLE_MARK``)."""


#: Words every LibdeviceUnavailable message holds, which the parent looks for.
UNAVAILABLE_MARK = "is not available on the CPU interpreter; this check runs on the GPU"


def notes() -> list[str]:
    """What the compiler would have warned about in the kernels run so far (for done.json): one
    note per file, naming its lines."""
    return [f"{name}:{', '.join(str(line) for line in sorted(lines))}: {BOOL_OP_DEPRECATION} (the GPU compiler warns"
            f" so and computes the element-wise {' and '.join(sorted(kinds))}; so does the CPU interpreter here)"
            for name, (lines, kinds) in list(_bool_ops.items())[:MAX_NOTES]]


#: file name -> (lines, {"and", "or"}) of and/or between block tensors seen so far.
_bool_ops: dict[str, tuple[set[int], set[str]]] = {}


def _note_bool_op(filename: str, line: int, kind: str) -> None:
    lines, kinds = _bool_ops.setdefault(filename.rsplit("/", 1)[-1], (set(), set()))
    if len(lines) < 20:
        lines.add(line)
    kinds.add(kind)


# ---- libdevice ------------------------------------------------------------------------------

def _torch_fn(name: str):
    """A torch elementwise function applied to a NumPy array (same dtype back)."""
    def apply(x):
        import torch

        parts = name.split(".")
        fn = getattr(torch, parts[0]) if len(parts) == 1 else getattr(getattr(torch, parts[0]), parts[1])
        return fn(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    return apply


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _norm(*xs):
    return np.sqrt(sum(x.astype(x.dtype) * x for x in xs))


#: libdevice function name (the ``extra.libdevice`` / ``extra.cuda.libdevice`` Python name) ->
#: NumPy function of the operands' arrays. Rounding-mode variants (_rz, _rd, _ru) are evaluated
#: round-to-nearest: the same result within one ulp, the precision class the tolerances allow.
_FUNCTIONS: dict = {
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
    "nearbyint": np.rint, "round": _round_half_away,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "rsqrt_rn": lambda x: 1 / np.sqrt(x),
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinpi": lambda x: np.sin(x * x.dtype.type(math.pi)),
    "cospi": lambda x: np.cos(x * x.dtype.type(math.pi)),
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "cbrt": np.cbrt, "rcbrt": lambda x: 1 / np.cbrt(x), "saturatef": lambda x: np.clip(x, 0, 1),
    "erf": _torch_fn("erf"), "erfc": _torch_fn("erfc"), "erfinv": _torch_fn("erfinv"),
    "erfcinv": lambda x: _torch_fn("erfinv")(1 - x), "erfcx": _torch_fn("special.erfcx"),
    "normcdf": _torch_fn("special.ndtr"), "normcdfinv": _torch_fn("special.ndtri"),
    "lgamma": _torch_fn("lgamma"), "tgamma": lambda x: np.exp(_torch_fn("lgamma")(x)) * np.where(
        (x < 0) & (np.floor(x) % 2 == 1), -1, 1).astype(x.dtype),
    "j0": _torch_fn("special.bessel_j0"), "j1": _torch_fn("special.bessel_j1"),
    "y0": _torch_fn("special.bessel_y0"), "y1": _torch_fn("special.bessel_y1"),
    "cyl_bessel_i0": _torch_fn("special.i0"), "cyl_bessel_i1": _torch_fn("special.i1"),
    "isnan": lambda x: np.isnan(x).astype(np.int32), "isinf": lambda x: np.isinf(x).astype(np.int32),
    "finitef": lambda x: np.isfinite(x).astype(np.int32), "isfinited": lambda x: np.isfinite(x).astype(np.int32),
    "signbit": lambda x: np.signbit(x).astype(np.int32),
    "logb": lambda x: np.floor(np.log2(np.abs(x))), "ilogb": lambda x: np.floor(np.log2(np.abs(x))).astype(np.int32),
    "fast_sinf": np.sin, "fast_cosf": np.cos, "fast_tanf": np.tan, "fast_expf": np.exp, "fast_logf": np.log,
    "fast_log2f": np.log2, "fast_log10f": np.log10, "fast_exp10f": lambda x: np.power(np.float32(10), x),
    "fast_tanhf": np.tanh,
    "atan2": np.arctan2, "pow": np.power, "powi": lambda x, n: np.power(x, n.astype(x.dtype)),
    "fast_powf": np.power, "hypot": np.hypot, "rhypot": lambda x, y: 1 / np.hypot(x, y),
    "fmod": np.fmod, "remainder": lambda x, y: x - y * np.rint(x / y), "copysign": np.copysign,
    "nextafter": np.nextafter, "fdim": lambda x, y: np.maximum(x - y, 0).astype(x.dtype),
    "fast_dividef": np.divide, "ldexp": lambda x, n: np.ldexp(x, n).astype(x.dtype),
    "scalbn": lambda x, n: np.ldexp(x, n).astype(x.dtype),
    "fma": lambda a, b, c: a * b + c, "norm3d": _norm, "norm4d": _norm,
    "rnorm3d": lambda *xs: 1 / _norm(*xs), "rnorm4d": lambda *xs: 1 / _norm(*xs),
    "float_as_int": lambda x: x.view(np.int32), "int_as_float": lambda x: x.view(np.float32),
    "float_as_uint": lambda x: x.view(np.uint32), "uint_as_float": lambda x: x.view(np.float32),
    "double_as_longlong": lambda x: x.view(np.int64), "longlong_as_double": lambda x: x.view(np.float64),
}
for _stem, _fn in (("div", np.divide), ("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("rcp", lambda x: 1 / x), ("sqrt", np.sqrt), ("fma", lambda a, b, c: a * b + c)):
    for _mode in ("rn", "rz", "rd", "ru"):
        _FUNCTIONS[f"{_stem}_{_mode}"] = _fn
for _mode, _to_int in (("rn", np.rint), ("rz", np.trunc), ("rd", np.floor), ("ru", np.ceil)):
    for _src in ("float", "double"):
        for _dst in ("int", "uint", "ll", "ull"):
            _FUNCTIONS[f"{_src}2{_dst}_{_mode}"] = _to_int


#: The libdevice function being dispatched (set by the wrappers, read by the builder).
_current: list[str] = []


def _evaluate(name: str, arg_list, ret_type, handle_class, np_dtype_of):
    fn = _FUNCTIONS.get(name)
    if fn is None:
        raise LibdeviceUnavailable(f"libdevice.{name} {UNAVAILABLE_MARK}")
    arrays = [np.asarray(a.data) for a in arg_list]
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*arrays))
    ret_type = getattr(ret_type, "scalar", ret_type)  # a block's element type
    want = np_dtype_of(ret_type)
    if result.dtype != want:
        result = result.astype(want)
    if result.shape != arrays[0].shape:
        result = np.broadcast_to(result, arrays[0].shape).copy()
    return handle_class(result, ret_type)


def _install_libdevice(interpreter) -> None:
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as stub_libdevice

    builder_class = interpreter.InterpreterBuilder
    semantic = interpreter.interpreter_semantic
    handle_class = interpreter.TensorHandle
    np_dtype_of = interpreter._get_np_dtype

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):  # noqa: N803
        name = _current[-1] if _current else symbol.removeprefix("__nv_")
        return _evaluate(name, argList, retType, handle_class, np_dtype_of)

    builder_class.create_extern_elementwise = create_extern_elementwise

    def wrap(name, original):
        def run_on_interpreter(*args, _semantic=None, **kwargs):
            _current.append(name)
            try:
                return original(*args, _semantic=semantic, **kwargs)
            finally:
                _current.pop()

        run_on_interpreter.__name__ = name
        run_on_interpreter.__module__ = __name__
        run_on_interpreter.__triton_builtin__ = True  # jit's dependency finder skips builtins
        return run_on_interpreter

    for name in dir(cuda_libdevice):
        original = getattr(cuda_libdevice, name)
        if name.startswith("_") or not getattr(original, "__triton_builtin__", False):
            continue
        wrapped = wrap(name, original)
        setattr(cuda_libdevice, name, wrapped)
        # What the GPU compiler does for the backend-neutral stubs (its module_map).
        if hasattr(stub_libdevice, name):
            setattr(stub_libdevice, name, wrapped)
    for name in dir(stub_libdevice):  # a stub the CUDA module lacks (fast_tanhf): evaluated or named
        value = getattr(stub_libdevice, name)
        if callable(value) and getattr(value, "__module__", "") == stub_libdevice.__name__:
            setattr(stub_libdevice, name, _unavailable_stub(name, semantic))


def _unavailable_stub(name: str, semantic):
    def stub(*args, _semantic=None, **kwargs):
        import triton.language as tl

        if name not in _FUNCTIONS:
            raise LibdeviceUnavailable(f"libdevice.{name} {UNAVAILABLE_MARK}")
        tensors = [semantic.to_tensor(a) for a in args]
        data = _FUNCTIONS[name](*[np.asarray(t.handle.data) for t in tensors])
        return tl.tensor(type(tensors[0].handle)(np.asarray(data, dtype=tensors[0].handle.data.dtype),
                                                 tensors[0].dtype), tensors[0].type)

    stub.__name__ = name
    stub.__triton_builtin__ = True
    return stub


# ---- and / or / not ---------------------------------------------------------------------------

_BOOL_HELPER = "_grader_bool_op"
_NOT_HELPER = "_grader_not"


def _make_bool_helpers(interpreter):
    import triton.language as tl

    semantic = interpreter.interpreter_semantic

    def bool_op(kind: str, line: int, filename: str, *thunks):
        """``a and b and c`` (``kind`` "and") as code_generator.visit_BoolOp evaluates it: each
        operand in order; a non-tensor that decides the result is returned at once; the tensors
        are combined with logical_and / logical_or."""
        tensors = []
        value = None
        for thunk in thunks:
            value = thunk()
            if not isinstance(value, tl.tensor):
                truth = bool(value)
                if kind == "and" and not truth:
                    return value
                if kind == "or" and truth:
                    return value
                continue
            if value.type.is_block():
                _note_bool_op(filename, line, kind)
            tensors.append(value)
        if not tensors:
            return value
        while len(tensors) >= 2:
            rhs, lhs = tensors.pop(), tensors.pop()
            rhs = semantic.to_tensor(rhs)
            tensors.append(semantic.logical_and(lhs, rhs) if kind == "and" else semantic.logical_or(lhs, rhs))
        return tensors[0]

    def not_(value):
        if isinstance(value, tl.tensor):
            return semantic.not_(value)
        return not value

    return bool_op, not_


class _BoolOpRewriter(ast.NodeTransformer):
    """``a and b`` -> ``_grader_bool_op("and", line, file, lambda: a, lambda: b)``; ``not a`` ->
    ``_grader_not(a)``. Lambdas keep the evaluation lazy, as Python's and the compiler's is."""

    def __init__(self, base: ast.NodeTransformer, filename: str = "", line_offset: int = 0) -> None:
        self.base = base
        self.filename = filename
        self.line_offset = line_offset

    def visit(self, node):
        node = super().visit(node)
        return self.base.visit(node) if isinstance(node, ast.Module) else node

    def visit_BoolOp(self, node: ast.BoolOp):  # noqa: N802 - ast.NodeTransformer's naming
        self.generic_visit(node)
        kind = "and" if isinstance(node.op, ast.And) else "or"
        thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                             body=value) for value in node.values]
        call = ast.Call(func=ast.Name(id=_BOOL_HELPER, ctx=ast.Load()),
                        args=[ast.Constant(kind), ast.Constant(getattr(node, "lineno", 0) + self.line_offset),
                              ast.Constant(self.filename), *thunks], keywords=[])
        return ast.copy_location(call, node)

    def visit_UnaryOp(self, node: ast.UnaryOp):  # noqa: N802
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        call = ast.Call(func=ast.Name(id=_NOT_HELPER, ctx=ast.Load()), args=[node.operand], keywords=[])
        return ast.copy_location(call, node)


def _install_bool_ops(interpreter) -> None:
    bool_op, not_ = _make_bool_helpers(interpreter)
    # FunctionRewriter._compile_and_exec copies the interpreter module's globals into the
    # kernel's: the helpers are found there.
    setattr(interpreter, _BOOL_HELPER, bool_op)
    setattr(interpreter, _NOT_HELPER, not_)
    rewriter_class = interpreter.FunctionRewriter
    base = rewriter_class.ast_transformer
    original_transform = rewriter_class._transform_ast

    def _transform_ast(self, src):
        rewriter_class.ast_transformer = _BoolOpRewriter(base, getattr(self, "filename", "") or "",
                                                         max(0, getattr(self, "def_file_lineno", 1) - 1))
        try:
            return original_transform(self, src)
        finally:
            rewriter_class.ast_transformer = base

    rewriter_class._transform_ast = _transform_ast


def install() -> bool:
    """Both patches (see the module docstring); False (nothing changed) when the interpreter is
    not the one this was written for."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - no Triton
        return False
    needed = ("InterpreterBuilder", "TensorHandle", "FunctionRewriter", "interpreter_semantic", "_get_np_dtype")
    if not all(hasattr(interpreter, name) for name in needed):
        return False
    if getattr(interpreter.InterpreterBuilder, "_grader_compat", False):
        return True
    _install_libdevice(interpreter)
    _install_bool_ops(interpreter)
    interpreter.InterpreterBuilder._grader_compat = True
    return True
