"""fp64 oracles of ``softmax_cross_entropy_backward``: the p - y formula with its error scale,
PyTorch autograd of ``F.cross_entropy``, and a central difference on the loss.

The autograd oracle is the authority on the contract (what ``n_valid`` is, what an all-ignored
batch gives); tests/grader/test_xent_oracle.py shows the formula agrees with it.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``, on the GPU,
between timed calls; so the formula oracle makes no host synchronisation (n_valid stays a
device tensor, the one-hot is a scatter).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: PyTorch's default ``ignore_index`` of F.cross_entropy, and this assignment's (spec.py).
DEFAULT_IGNORE_INDEX = -100
#: Weight of |x| + |m| in the error scale; spec.py says where 1/64 comes from.
EXPONENT_TERM = 1.0 / 64


def count_valid(t: torch.Tensor, ignore_index: int = DEFAULT_IGNORE_INDEX) -> int:
    """n_valid: the number of targets of ``t`` (M,) that are not ``ignore_index``."""
    return int((t != ignore_index).sum())


def xent_grad_fp64(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor | float,
                   ignore_index: int = DEFAULT_IGNORE_INDEX, *, n_valid: torch.Tensor | int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """dlogits of the mean softmax cross-entropy and its error scale, in float64.

    Args:
        x: logits (M, C), any float dtype (upcast here, so rounded logits give the oracle of
            the rounded input, as the half-precision check requires).
        t: int64 targets (M,), each in [0, C) or equal to ``ignore_index``.
        grad: dL/dloss of the mean loss (a 0-d tensor or a number).
        ignore_index: rows whose target equals it contribute nothing.
        n_valid: the count to divide by (an int or a 0-d tensor); default: counted from ``t``.
            The benchmark passes the count of the whole batch when it checks a few rows.

    Returns:
        (dx, scale), both float64 (M, C) on x's device: dx = valid * (p - y) * grad / n_valid
        (all zeros when n_valid is 0, as PyTorch's autograd gives), and
        scale = valid * |grad / n_valid| * (p * (1 + (|x| + |m|) * EXPONENT_TERM) + y), the
        magnitudes of the terms that make each element (spec.py explains each one).
    """
    x64 = x.detach().to(torch.float64)
    device = x64.device
    t = t.detach().to(device=device, dtype=torch.int64)
    g64 = torch.as_tensor(grad, dtype=torch.float64).detach().to(device)
    valid = t != ignore_index
    count = valid.sum() if n_valid is None else torch.as_tensor(n_valid, device=device)
    p = torch.softmax(x64, dim=-1)
    y = torch.zeros_like(p).scatter_(1, torch.where(valid, t, 0).unsqueeze(1), 1.0) * valid.unsqueeze(1)
    factor = torch.where(count > 0, g64 / count.clamp(min=1), 0.0)
    row = torch.where(valid, factor, 0.0).unsqueeze(1)
    dx = (p - y) * row
    row_max = x64.amax(dim=-1, keepdim=True)
    scale = row.abs() * (p * (1.0 + (x64.abs() + row_max.abs()) * EXPONENT_TERM) + y)
    return dx, scale


def benchmark_oracle(inputs: tuple, index: dict[str, torch.Tensor] | None
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor, None]]:
    """fp64 oracle and error scale of the timed output's rows ``index["M"]`` (a LongTensor of
    row indices; ``index`` None: every row) for benchmark inputs (x, t, grad) as bench.py makes
    them (default ignore_index); n_valid is counted over the whole batch first. No slack: the
    assignment's tolerance covers its allowed arithmetic. On the inputs' device, with no host
    synchronisation."""
    x, t, grad = inputs
    n_valid = (t != DEFAULT_IGNORE_INDEX).sum()
    if index is not None:
        x, t = x.index_select(0, index["M"]), t.index_select(0, index["M"])
    expected, scale = xent_grad_fp64(x, t, grad, n_valid=n_valid)
    return {"dx": (expected, scale, None)}


def autograd_xent_grad_fp64(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor | float,
                            ignore_index: int = DEFAULT_IGNORE_INDEX) -> torch.Tensor:
    """d(grad * F.cross_entropy(x, t, ignore_index=ignore_index, reduction="mean"))/dx by PyTorch
    autograd in float64; x (M, C), t (M,) int64. Returns float64 (M, C)."""
    x64 = x.detach().to(torch.float64).requires_grad_(True)
    loss = F.cross_entropy(x64, t.detach().to(torch.int64), ignore_index=ignore_index, reduction="mean")
    g64 = torch.as_tensor(grad, dtype=torch.float64).detach()
    (dx,) = torch.autograd.grad(loss, x64, grad_outputs=g64)
    return dx


def loss_fp64(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor | float,
              ignore_index: int = DEFAULT_IGNORE_INDEX) -> float:
    """L = grad * F.cross_entropy(x, t, ignore_index, reduction="mean"), in float64."""
    g = float(torch.as_tensor(grad, dtype=torch.float64))
    loss = F.cross_entropy(x.detach().to(torch.float64), t.detach().to(torch.int64), ignore_index=ignore_index)
    return g * float(loss)


def central_difference_fp64(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor | float, row: int, col: int,
                            h: float, ignore_index: int = DEFAULT_IGNORE_INDEX) -> float:
    """(L(x + h e) - L(x - h e)) / 2h for the loss L of ``loss_fp64``, e the unit logit at
    (row, col); every row is in the loss (the mean couples them through n_valid), evaluated in
    float64 (the assignment's h is spec.CENTRAL_DIFFERENCE_H = 1e-5)."""
    x64 = x.detach().to(torch.float64)
    plus = x64.clone()
    plus[row, col] += h
    minus = x64.clone()
    minus[row, col] -= h
    return (loss_fp64(plus, t, grad, ignore_index) - loss_fp64(minus, t, grad, ignore_index)) / (2 * h)
