"""``layernorm_backward``'s benchmark inputs and peers, for the timing children.

Bound into the benchmark children (as /harness/assignment_bench.py) and imported there, so it
imports only torch; the parent imports it too (``make_inputs``) to regenerate bit-identical
inputs on the same GPU. The names the generic timing harness reads are those of
grader/assignments/softmax_backward/bench.py, with ``expected_outputs`` (one (shape, dtype) per
output) for the tuple this call returns.
"""

from __future__ import annotations

import torch

ARGUMENTS = ("dy", "x", "w", "mean", "rstd")
OUTPUTS = ("dx", "dw", "db")
EPS = 1e-5  # oracle.LN_EPS


def _statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) of x's rows in fp32, as the forward saves them."""
    var, mean = torch.var_mean(x.float(), dim=-1, correction=0)
    return mean, torch.rsqrt(var + EPS)


def make_inputs(shape: tuple[int, int], dtype: torch.dtype, seed: int, device: str = "cuda") -> tuple:
    """(dy, x, w, mean, rstd) for a row (M, N): x = -2.3 + 0.5 N(0, 1) (tutorial 05's inputs),
    dy = 0.1 N(0, 1), w ~ U(0, 1) (M, N), (M, N), (N,) contiguous ``dtype``, and mean, rstd the
    fp32 statistics of the rounded x. One seeded generator on ``device``; the statistics are a
    deterministic reduction, so the parent regenerates bit-identical values on the same GPU."""
    m, n = shape
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    x = (-2.3 + 0.5 * torch.randn((m, n), generator=gen, device=device, dtype=torch.float32)).to(dtype)
    dy = (0.1 * torch.randn((m, n), generator=gen, device=device, dtype=torch.float32)).to(dtype)
    w = torch.rand((n,), generator=gen, device=device, dtype=torch.float32).to(dtype)
    mean, rstd = _statistics(x)
    return dy, x, w, mean, rstd


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New values in place, from make_inputs' distributions, with mean and rstd recomputed from
    the new x (device-side only)."""
    dy, x, w, mean, rstd = inputs
    x.normal_(-2.3, 0.5, generator=generator)
    dy.normal_(0.0, 0.1, generator=generator)
    w.uniform_(0.0, 1.0, generator=generator)
    new_mean, new_rstd = _statistics(x)
    mean.copy_(new_mean)
    rstd.copy_(new_rstd)


def expected_outputs(inputs: tuple) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """[(shape, dtype)] of dx, dw, db: x's shape, then w's twice, all of x's dtype."""
    _, x, w, _, _ = inputs
    return [(tuple(x.shape), x.dtype), (tuple(w.shape), x.dtype), (tuple(w.shape), x.dtype)]


def aten_native_layer_norm_backward(dy, x, w, mean, rstd):
    """What LayerNorm's autograd node runs,
    aten.native_layer_norm_backward, given the saved (M, 1) statistics; bias=None with
    output_mask [True, True, True] still returns db (it is dy summed over rows)."""
    n = x.shape[-1]
    # CUDA saves fp32 statistics for every input dtype (at::toAccumulateType); the CPU kernel
    # wants them in x's dtype (only tests run it there).
    stats = torch.float32 if x.is_cuda else x.dtype
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, [n], mean.unsqueeze(-1).to(stats),
                                                           rstd.unsqueeze(-1).to(stats), w, w, [True, True, True])
    return dx, dw, db


def torch_fp32_expression(dy, x, w, mean, rstd):
    """The assignment's baseline: the closed form in fp32 PyTorch operators (no autograd), cast
    back to x's dtype. (aten's fused backward is a peer: on the CPU its kernel wants the
    statistics in x's dtype, so it cannot be the baseline that tests check on the CPU.)"""
    x32, dy32, w32 = x.float(), dy.float(), w.float()
    xhat = (x32 - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
    wdy = w32 * dy32
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd.unsqueeze(-1)
    return dx.to(x.dtype), (dy32 * xhat).sum(dim=0).to(x.dtype), dy32.sum(dim=0).to(x.dtype)


def _streaming_probe(dy, x, w, mean, rstd):
    return torch.add(dy, x)


PEERS = {
    "aten_native_layer_norm_backward": aten_native_layer_norm_backward,
    "torch_fp32_expression": torch_fp32_expression,
}
COMPILED_PEER = ("torch_compile_fp32_expression", torch_fp32_expression)
STREAMING_PROBE = ("torch.add(dy, x): 2 reads + 1 write per element of x, no reduction", _streaming_probe)
