"""fp64 oracles of ``attention_backward``: dq, dk, dv of causal attention, their error scales and
slacks.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``. spec.py
derives every constant used here ("The tolerance").
"""

from __future__ import annotations

import math

import torch

#: One ulp of each input dtype relative to the value: the allowed roundings of P, dS (and q times
#: the scale) to the input dtype before a tl.dot, and of the given out.
INTERMEDIATE_ROUNDING = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23}


def _causal(length: int, device) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def forward_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of causal attention, fp64: out (..., S, D) and the natural-log logsumexp of
    each query's scaled, masked scores (..., S)."""
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))  # differentiable: loss_fp64 goes through it
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(q64.shape[-1])
    scores = scores.masked_fill(~_causal(scores.shape[-1], scores.device), -math.inf)
    return torch.softmax(scores, dim=-1) @ v64, torch.logsumexp(scores, dim=-1)


def loss_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """L = sum(attention(q, k, v) * dout), fp64 (a 0-d tensor): its gradients are dq, dk, dv."""
    return (forward_fp64(q, k, v)[0] * dout.to(torch.float64)).sum()


def autograd_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor) -> dict[str, torch.Tensor]:
    """{"dq", "dk", "dv"}: fp64 autograd of the fp64 forward (an expected value independent of
    the closed form ``backward_fp64`` uses)."""
    leaves = [t.detach().to(torch.float64).requires_grad_(True) for t in (q, k, v)]
    grads = torch.autograd.grad(loss_fp64(*leaves, dout), leaves)
    return dict(zip(("dq", "dk", "dv"), (g.detach() for g in grads)))


def backward_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
                  lse: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """{"dq", "dk", "dv": (expected, scale, slack)}, fp64, the shapes of q, k, v.

    Expected: the closed form on q, k, v, dout (P = softmax of the scaled, masked scores,
    dV = P^T dO, dP = dO V^T, Delta = rowsum(dO * O) with the exact O, dS = P * (dP - Delta),
    dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D)). The given ``out`` (rounded to the input
    dtype) and ``lse`` (rounded to fp32) enter only the bounds: a kernel uses them as given.

    Scale, in fp32 ulps (rtol 2^-23), with M the row's largest score magnitude, c = (D + 8) M +
    |lse| + 4 the relative error of each p in ulps (the score's dot, the scale, exp, lse's
    fp32 rounding), Vm = |dO| |V|^T, Dm = rowsum(|dO| |O|):
        gu = P (c |dP - Delta| + (D + 2)(Vm + Dm))          (|error of dS| / ulp)
        dq: (S + 16) |dS| |K| / sqrt(D) + gu |K| / sqrt(D), dk likewise with Q, dv:
        (S + 16) P^T |dO| + P^T (c |dO|).
    Slack, with r one ulp of the input dtype: P, dS (and q times the scale) rounded to the
    input dtype before the dots, out given rounded:
        gr = P ((1 + M) |dP - Delta| + Dm) + |dS|
        dq: r gr |K| / sqrt(D), dk: r gr^T |Q| / sqrt(D), dv: r P^T ((1 + M) |dO|).
    """
    q64, k64, v64, do64 = (t.detach().to(torch.float64) for t in (q, k, v, dout))
    length, d = k64.shape[-2], q64.shape[-1]
    scale = 1.0 / math.sqrt(d)
    allowed = _causal(length, q64.device)
    scores = ((q64 @ k64.transpose(-1, -2)) * scale).masked_fill(~allowed, -math.inf)
    p = torch.softmax(scores, dim=-1)
    o = p @ v64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (do64 * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    grads = {"dq": ds @ k64 * scale, "dk": ds.transpose(-1, -2) @ q64 * scale, "dv": p.transpose(-1, -2) @ do64}
    magnitude = ((q64.abs() @ k64.abs().transpose(-1, -2)) * scale).masked_fill(~allowed, 0.0).amax(-1, keepdim=True)
    c = (d + 8) * magnitude + lse.detach().to(torch.float64).abs()[..., None] + 4
    vm = do64.abs() @ v64.abs().transpose(-1, -2)
    dm = (do64.abs() * torch.maximum(o.abs(), out.detach().to(torch.float64).abs())).sum(-1, keepdim=True)
    centred = (dp - delta).abs()
    gu = p * (c * centred + (d + 2) * (vm + dm))
    gr = p * ((1 + magnitude) * centred + dm) + ds.abs()
    r = INTERMEDIATE_ROUNDING.get(q.dtype, 0.0)
    sums = length + 16
    ka, qa = k64.abs(), q64.abs()
    scales = {"dq": scale * (sums * ds.abs() @ ka + gu @ ka),
              "dk": scale * (sums * ds.abs().transpose(-1, -2) @ qa + gu.transpose(-1, -2) @ qa),
              "dv": sums * p.transpose(-1, -2) @ do64.abs() + p.transpose(-1, -2) @ (c * do64.abs())}
    slacks = {"dq": r * scale * (gr @ ka), "dk": r * scale * (gr.transpose(-1, -2) @ qa),
              "dv": r * p.transpose(-1, -2) @ ((1 + magnitude) * do64.abs())}
    return {name: (grads[name], scales[name], slacks[name]) for name in ("dq", "dk", "dv")}


def benchmark_oracle(inputs: tuple, index: dict[str, torch.Tensor] | None
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """{"dq", "dk", "dv": (expected, scale, slack)} of the batch ``index["B"]`` and head
    ``index["H"]`` (every one when ``index`` is None) for benchmark inputs (q, k, v, out, dout,
    lse), on the inputs' device: every output row of a head needs every row of that head."""
    if index is not None:
        inputs = tuple(t.index_select(0, index["B"]).index_select(1, index["H"]) for t in inputs)
    return backward_fp64(*inputs)
