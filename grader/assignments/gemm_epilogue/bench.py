"""``gemm_epilogue``'s benchmark inputs and peers, for the timing children.

Bound into the benchmark children (as /harness/assignment_bench.py) and imported there, so it
imports only torch; the parent imports it too (``make_inputs``) to regenerate bit-identical
inputs on the same GPU. The names the generic timing harness reads are those of
grader/assignments/softmax_backward/bench.py (ARGUMENTS, make_inputs, refill_inputs,
expected_output, PEERS, COMPILED_PEER, STREAMING_PROBE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ARGUMENTS = ("a", "b", "bias")
BIAS_RANGE = (-3.5, 1.5)  # inputs.BIAS_RANGE: z spans GELU's tail and its linear side


def make_inputs(shape: tuple[int, int, int], dtype: torch.dtype, seed: int, device: str = "cuda"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, bias) for a row ``shape`` = (M, N, K): contiguous a (M, K) ~ N(0, 1), b (K, N) ~
    N(0, 1) * 1.5/sqrt(K) (a @ b has standard deviation 1.5 at every K), bias (N,) ~
    U(BIAS_RANGE), drawn in fp32 from one seeded generator on ``device`` and rounded to ``dtype``.
    Elementwise draws only, so the parent regenerates bit-identical values."""
    m, n, k = shape
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = (torch.randn((k, n), generator=gen, device=device, dtype=torch.float32) * (1.5 / k**0.5)).to(dtype)
    low, high = BIAS_RANGE
    bias = (torch.rand((n,), generator=gen, device=device, dtype=torch.float32) * (high - low) + low).to(dtype)
    return a, b, bias


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New (a, b, bias) values in place, from make_inputs' distributions (device-side only)."""
    a, b, bias = inputs
    a.normal_(0.0, 1.0, generator=generator)
    b.normal_(0.0, 1.5 / b.shape[0] ** 0.5, generator=generator)
    bias.uniform_(*BIAS_RANGE, generator=generator)


def expected_output(inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[tuple[int, ...], torch.dtype]:
    """out is (M, N) of a's dtype."""
    a, b, _ = inputs
    return (a.shape[0], b.shape[1]), a.dtype


def torch_unfused_expression(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The assignment's baseline: F.gelu(a @ b + bias, approximate="tanh"): a cuBLAS GEMM whose
    fp32 accumulator is rounded to the input dtype, then the bias add and the GELU as two
    elementwise kernels (each reads and writes out once more)."""
    return F.gelu(a @ b + bias, approximate="tanh")


def cublaslt_fused_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """cuBLASLt's fused bias + GELU epilogue (CUBLASLT_EPILOGUE_GELU_BIAS), through
    torch._addmm_activation(bias, a, b, use_gelu=True): one kernel, the tanh GELU on the fp32
    accumulator (spec.py says why that is the same function)."""
    return torch._addmm_activation(bias, a, b, use_gelu=True)


def _streaming_probe(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.cat([a.reshape(-1), b.reshape(-1)])


PEERS = {
    "torch_unfused_expression": torch_unfused_expression,
    "cublaslt_fused_epilogue": cublaslt_fused_epilogue,
}
COMPILED_PEER = ("torch_compile_unfused_expression", torch_unfused_expression)
STREAMING_PROBE = ("torch.cat of a and b: reads and writes their bytes once, no arithmetic (the memory side of the "
                   "roofline without out)", _streaming_probe)


def flops(shape: tuple[int, int, int]) -> int:
    """Floating-point operations of one call: 2 M N K for the products and sums (the epilogue's
    ~20 M N are under 1% at K >= 2048 and are left out, as GEMM roofline figures do)."""
    m, n, k = shape
    return 2 * m * n * k


def min_bytes(shape: tuple[int, int, int], dtype: torch.dtype) -> int:
    """Bytes through device memory at least: a, b and bias read once, out written once."""
    m, n, k = shape
    element = torch.empty((), dtype=dtype).element_size()
    return (m * k + k * n + n + m * n) * element
