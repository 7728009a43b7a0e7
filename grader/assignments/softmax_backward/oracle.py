"""fp64 oracles of ``softmax_backward``: the formula, autograd at the logits, central difference.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``.
"""

from __future__ import annotations

import torch


def vjp_fp64(y: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax VJP and its error scale, in float64.

    Args:
        y: probabilities, (M, N), any float dtype (upcast here, so a rounded y gives the
            oracle of the rounded input, as the half-precision check requires).
        g: upstream gradient dL/dy, (M, N).

    Returns:
        (dx, scale): dx = y * (g - sum(y*g, -1)) and scale = |y| (|g| + |dot| + sum|y*g|),
        both float64 (M, N), on the inputs' device.
    """
    y64 = y.detach().to(torch.float64)
    g64 = g.detach().to(torch.float64)
    dot = (y64 * g64).sum(dim=-1, keepdim=True)
    dx = y64 * (g64 - dot)
    scale = y64.abs() * (g64.abs() + dot.abs() + (y64 * g64).abs().sum(dim=-1, keepdim=True))
    return dx, scale


def product_rounding_slack(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The error that rounding each product y*g to the input dtype can add to dx, exactly.

    The assignment allows the products to be formed in the input dtype before an fp32 sum
    (PyTorch's own CUDA softmax backward does: p = y*g rounded to float16/bfloat16, then
    dx = p - y * sum(p) in fp32, docs/checks.md). With dp = round(y*g) - y*g (round to nearest
    even, computed here from the inputs as given), that arithmetic differs from the exact VJP by
    dp[j] - y[j] * sum_k dp[k] at most, so the bound is

        slack[r, j] = |dp[r, j]| + |y[r, j]| * |sum_k dp[r, k]|

    Args:
        y, g: (M, N) of one dtype (float32, float16 or bfloat16); the rounding is to that dtype.

    Returns:
        float64 (M, N), >= 0, on the inputs' device; ~1e-8 of |y*g| for float32 inputs.
    """
    dtype = y.dtype if y.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32
    y64 = y.detach().to(torch.float64)
    exact = y64 * g.detach().to(torch.float64)
    rounding = exact.to(dtype).to(torch.float64) - exact
    return rounding.abs() + y64.abs() * rounding.sum(dim=-1, keepdim=True).abs()


def autograd_vjp_fp64(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dL/dx of L = sum(softmax(x, -1) * g) by PyTorch autograd in float64; x, g (M, N)."""
    x64 = x.detach().to(torch.float64).requires_grad_(True)
    loss = (torch.softmax(x64, dim=-1) * g.detach().to(torch.float64)).sum()
    (grad,) = torch.autograd.grad(loss, x64)
    return grad


def central_difference_fp64(x: torch.Tensor, g: torch.Tensor, row: int, col: int, h: float) -> float:
    """(L(x + h e) - L(x - h e)) / 2h for L = sum(softmax(x[row]) * g[row]), e the unit vector
    at (row, col); evaluated in float64 (the assignment's h is spec.CENTRAL_DIFFERENCE_H = 1e-5)."""
    x_row = x[row].detach().to(torch.float64)
    g_row = g[row].detach().to(torch.float64)
    plus = x_row.clone()
    plus[col] += h
    minus = x_row.clone()
    minus[col] -= h
    loss_plus = float((torch.softmax(plus, -1) * g_row).sum())
    loss_minus = float((torch.softmax(minus, -1) * g_row).sum())
    return (loss_plus - loss_minus) / (2 * h)


def benchmark_oracle(inputs: tuple, index: dict[str, torch.Tensor] | None
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """fp64 oracle, error scale and slack (``product_rounding_slack``) of the timed output's
    rows ``index["M"]`` (a LongTensor of row indices; ``index`` None: every row) for benchmark
    inputs (y, g) as bench.py makes them; on the inputs' device, with no host synchronisation.
    The timed verification applies the checks' own ``Tolerance.allowed`` to them, slack
    included (products rounded to the input dtype are arithmetic the assignment allows)."""
    y, g = inputs
    if index is not None:
        y, g = y.index_select(0, index["M"]), g.index_select(0, index["M"])
    expected, scale = vjp_fp64(y, g)
    return {"dx": (expected, scale, product_rounding_slack(y, g))}
