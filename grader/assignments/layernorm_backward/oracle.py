"""fp64 oracles of ``layernorm_backward``: the closed-form backward of y = xhat * w + b with
xhat = (x - mean) * rstd, from the saved mean and rstd, with each output's error scale; PyTorch
autograd of ``F.layer_norm``; the loss for central differences.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: eps of the forward pass whose statistics the checks give (F.layer_norm's default).
LN_EPS = 1e-5


def layernorm_backward_fp64(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor,
                            rstd: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """dx, dw, db and their error scales, in float64, from the inputs as given.

    Args:
        dy: upstream gradient dL/dy (M, N); x: the forward's input (M, N); w: weight (N,);
        mean, rstd: the forward's saved row statistics (M,) (rstd = 1/sqrt(var + eps)). Any
        float dtypes (upcast here: rounded inputs give the oracle of the rounded values).

    Returns:
        {"dx": (dx, scale), "dw": (dw, scale), "db": (db, scale)}, float64 on dy's device, with
        xhat = (x - mean) rstd, wdy = w dy, c1 = mean_j(xhat wdy), c2 = mean_j(wdy):
            dx = rstd (wdy - xhat c1 - c2),
            scale_dx = rstd (|wdy| + h (|c1| + mean_j(h |wdy|)) + |c2| + mean_j|wdy|)
            dw = sum_i dy xhat, scale_dw = sum_i |dy| h;  db = sum_i dy, scale_db = sum_i |dy|
        where h = (|x| + |mean|) rstd, the magnitudes of xhat's two terms x rstd and mean rstd:
        the scales are the magnitudes of every term and reduction that makes an element, so a
        rounding of the saved mean or rstd (fp32) moves the result by a few ulps of the scale.
    """
    dy64, x64, w64 = (t.detach().to(torch.float64) for t in (dy, x, w))
    mean64 = mean.detach().to(torch.float64).unsqueeze(-1)
    rstd64 = rstd.detach().to(torch.float64).unsqueeze(-1)
    xhat = (x64 - mean64) * rstd64
    wdy = w64 * dy64
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    terms = (x64.abs() + mean64.abs()) * rstd64
    dx = rstd64 * (wdy - xhat * c1 - c2)
    scale_dx = rstd64 * (wdy.abs() + terms * (c1.abs() + (terms * wdy.abs()).mean(dim=-1, keepdim=True))
                         + c2.abs() + wdy.abs().mean(dim=-1, keepdim=True))
    return {
        "dx": (dx, scale_dx),
        "dw": ((dy64 * xhat).sum(dim=0), (dy64.abs() * terms).sum(dim=0)),
        "db": (dy64.sum(dim=0), dy64.abs().sum(dim=0)),
    }


def normalised(x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """xhat = (x - mean) * rstd in float64 (M, N): the weights of the invariant sum_j dx * xhat."""
    return (x.detach().double() - mean.detach().double().unsqueeze(-1)) * rstd.detach().double().unsqueeze(-1)


def statistics_fp64(x: torch.Tensor, eps: float = LN_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) of each row of x in float64, as the forward saves them (biased variance)."""
    x64 = x.detach().to(torch.float64)
    mean = x64.mean(dim=-1)
    var = ((x64 - mean.unsqueeze(-1)) ** 2).mean(dim=-1)
    return mean, torch.rsqrt(var + eps)


def loss_fp64(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor, eps: float = LN_EPS) -> torch.Tensor:
    """L = sum(dy * F.layer_norm(x, (N,), w, b, eps)) in float64 (a 0-d tensor): dL/dx, dL/dw
    and dL/db are the assignment's dx, dw and db."""
    n = x.shape[-1]
    return (dy.double() * F.layer_norm(x.double(), (n,), w.double(), b.double(), eps)).sum()


def autograd_fp64(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor, eps: float = LN_EPS
                  ) -> dict[str, torch.Tensor]:
    """dx, dw, db by PyTorch autograd of ``loss_fp64`` in float64 (the statistics recomputed from
    x, as autograd does)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = w.detach().double().requires_grad_(True)
    b64 = b.detach().double().requires_grad_(True)
    dx, dw, db = torch.autograd.grad(loss_fp64(x64, w64, b64, dy.detach(), eps), (x64, w64, b64))
    return {"dx": dx, "dw": dw, "db": db}


def benchmark_oracle(inputs: tuple, index: dict | None) -> dict[str, tuple[torch.Tensor, torch.Tensor, None]]:
    """(expected, scale, slack) per output for benchmark inputs (dy, x, w, mean, rstd) as bench.py
    makes them, on their device: dx on the rows ``index["M"]`` (a LongTensor; every row when
    ``index`` is None), dw and db whole (they reduce over every row, so every row is used)."""
    dy, x, w, mean, rstd = inputs
    full = layernorm_backward_fp64(dy, x, w, mean, rstd)
    rows = None if index is None else index.get("M")
    if rows is None:
        dx = full["dx"]
    else:
        dx = layernorm_backward_fp64(dy.index_select(0, rows), x.index_select(0, rows), w, mean.index_select(0, rows),
                                     rstd.index_select(0, rows))["dx"]
    return {"dx": (*dx, None), "dw": (*full["dw"], None), "db": (*full["db"], None)}
