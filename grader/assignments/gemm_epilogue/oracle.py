"""fp64 oracles of ``gemm_epilogue``: out = gelu_tanh(a @ b + bias), its error scale and slack.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``.
spec.py derives every constant used here.
"""

from __future__ import annotations

import math

import torch

#: sqrt(2/pi) and the cubic coefficient of the tanh approximation of GELU (Hendrycks and
#: Gimpel 2016; PyTorch's F.gelu(approximate="tanh"), cuBLASLt's GELU epilogue).
GELU_K0 = math.sqrt(2.0 / math.pi)
GELU_K1 = 0.044715
#: max |gelu''| over the reals for the tanh form: sqrt(2/pi) = 0.798, at z = 0 (measured on a
#: 1e-4 grid over [-30, 30] in fp64; tests/grader/test_gemm_epilogue.py checks it), rounded up.
GELU_SECOND_DERIVATIVE_MAX = 0.8
#: Error of evaluating GELU in fp32 (inner polynomial, tanh, 0.5 z (1 + t)), in units of
#: 2^-23 |z|: spec.py, "the epilogue".
GELU_EVALUATION_ULPS = 16.0
#: One fp32 ulp relative (2^-23): the unit of ``scale``; spec.TOLERANCES' rtol.
FP32_ULP = 2.0**-23


def gelu_tanh(z: torch.Tensor) -> torch.Tensor:
    """0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), elementwise, in z's dtype (fp64 here)."""
    return 0.5 * z * (1.0 + torch.tanh(GELU_K0 * (z + GELU_K1 * z * z * z)))


def gelu_tanh_derivative(z: torch.Tensor) -> torch.Tensor:
    """d/dz of ``gelu_tanh``: 0.5 (1 + t) + 0.5 z (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2)."""
    t = torch.tanh(GELU_K0 * (z + GELU_K1 * z * z * z))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_K0 * (1.0 + 3.0 * GELU_K1 * z * z)


def gemm_gelu_fp64(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, rounding: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact result of the rounded inputs, its error scale and its slack, in float64.

    Args:
        a: (M, K), b: (K, N), bias: (N,), any float dtype (upcast here: rounded inputs give the
            oracle of the rounded values).
        rounding: one ulp of the output dtype relative to the value (spec.INTERMEDIATE_ROUNDING:
            2^-10 for float16, 2^-7 for bfloat16): the allowed rounding of the accumulator and
            of a @ b + bias to that dtype before GELU.

    Returns:
        (out, scale, slack), float64 (M, N) on a's device:
        out = gelu_tanh(z), z = a @ b + bias;
        scale = D * ((K + 1) * (s + |bias|)) + 16 |z|, in fp32 ulps (rtol 2^-23), with
            s = |a| @ |b| (the products' magnitudes) and D a bound on |gelu'| over the
            interval z lies in (|gelu'(z)| + 0.8 e, e the allowed error of z);
        slack = D * rounding * (|a @ b| + |z|): the intermediate roundings to the output dtype.
    """
    a64 = a.detach().to(torch.float64)
    b64 = b.detach().to(torch.float64)
    bias64 = bias.detach().to(torch.float64)
    k = a64.shape[1]
    acc = a64 @ b64
    z = acc + bias64
    magnitudes = a64.abs() @ b64.abs() + bias64.abs()
    z_fp32 = (k + 1) * FP32_ULP * magnitudes
    z_intermediate = rounding * (acc.abs() + z.abs())
    derivative = gelu_tanh_derivative(z).abs() + GELU_SECOND_DERIVATIVE_MAX * (z_fp32 + z_intermediate)
    scale = derivative * (k + 1) * magnitudes + GELU_EVALUATION_ULPS * z.abs()
    return gelu_tanh(z), scale, derivative * z_intermediate


#: One ulp of each output dtype relative to the value: spec.INTERMEDIATE_ROUNDING (repeated here
#: because this file imports only torch).
INTERMEDIATE_ROUNDING = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def benchmark_oracle(inputs: tuple, index: dict[str, torch.Tensor] | None
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """{"out": (expected, scale, slack)} of output rows ``index["M"]`` (a LongTensor; every row
    when ``index`` is None) for benchmark inputs (a, b, bias) as bench.py makes them, on the
    inputs' device. Only a's rows are selected: every output row needs all of b and bias."""
    a, b, bias = inputs
    if index is not None:
        a = a.index_select(0, index["M"])
    return {"out": gemm_gelu_fp64(a, b, bias, INTERMEDIATE_ROUNDING[a.dtype])}
