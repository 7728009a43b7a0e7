"""fp64 oracles of ``attention_forward``: causal softmax attention, its error scale and slack.

Imports only torch: the benchmark's replay process loads this file on its own (as
``assignment_oracle.py``) to verify every timed output with ``benchmark_oracle``. spec.py
derives every constant used here ("The tolerance").
"""

from __future__ import annotations

import math

import torch

#: One fp32 ulp relative (2^-23): the unit of ``scale``; spec.TOLERANCES' rtol.
FP32_ULP = 2.0**-23
#: One ulp of each input dtype relative to the value: the allowed rounding of P (and of q
#: times the softmax scale) to the input dtype before a tl.dot (spec.py says why).
INTERMEDIATE_ROUNDING = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23}


def attention_parts(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The probabilities P, the output and the largest score magnitude per query, fp64.

    Args:
        q: (..., Sq, D) queries at key positions ``positions`` (default 0..Sq-1); k, v:
            (..., S, D); any float dtype (upcast: rounded inputs give the oracle of the rounded
            values).

    Returns:
        (p (..., Sq, S), out (..., Sq, D), magnitude (..., Sq, 1)): p = softmax(q k^T / sqrt(D))
        with keys j > i masked (weight 0), out = p v, and magnitude = max over the allowed j of
        sum_d |q_id| |k_jd| / sqrt(D) (the size of a score's terms, the unit of its error).
    """
    q64, k64, v64 = (t.detach().to(torch.float64) for t in (q, k, v))
    d = q64.shape[-1]
    scale = 1.0 / math.sqrt(d)
    length = k64.shape[-2]
    if positions is None:
        positions = torch.arange(q64.shape[-2], device=q64.device)
    allowed = torch.arange(length, device=q64.device)[None, :] <= positions.to(q64.device)[:, None]
    scores = (q64 @ k64.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, -math.inf)
    p = torch.softmax(scores, dim=-1)
    magnitude = ((q64.abs() @ k64.abs().transpose(-1, -2)) * scale).masked_fill(~allowed, 0.0)
    return p, p @ v64, magnitude.amax(dim=-1, keepdim=True)


def attention_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, scale, slack) of causal attention on the inputs as given, float64, out's shape.

    With A = P |v| (the magnitudes the output sums) and W = A + |out| (a bound on
    sum_j p_ij |v_j - out_i|, what a perturbation of the scores or of P moves the output by):

        scale = (S + 16) A + (D + 8) M W + 4 W     (in fp32 ulps: rtol 2^-23)
        slack = r (1 + M) W                        (r: one ulp of the input dtype)

    M is the largest score magnitude of the row (``attention_parts``); S the key length.
    """
    p, out, magnitude = attention_parts(q, k, v, positions)
    length, d = k.shape[-2], q.shape[-1]
    weighted = p @ v.detach().to(torch.float64).abs()
    spread = weighted + out.abs()
    scale = (length + 16) * weighted + (d + 8) * magnitude * spread + 4 * spread
    rounding = INTERMEDIATE_ROUNDING[q.dtype] if q.dtype in INTERMEDIATE_ROUNDING else 0.0
    return out, scale, rounding * (1 + magnitude) * spread


def lse_fp64(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(..., S): the natural-log logsumexp of each query's scaled, masked scores (fp64)."""
    q64, k64 = q.detach().to(torch.float64), k.detach().to(torch.float64)
    length = k64.shape[-2]
    allowed = torch.ones(q64.shape[-2], length, dtype=torch.bool, device=q64.device).tril()
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(q64.shape[-1])
    return torch.logsumexp(scores.masked_fill(~allowed, -math.inf), dim=-1)


def benchmark_oracle(inputs: tuple, index: dict[str, torch.Tensor] | None
                     ) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """{"out": (expected, scale, slack)} of the outputs ``index`` selects (batches
    ``index["B"]``, heads ``index["H"]``, queries ``index["S"]``; every element when None)
    for benchmark inputs (q, k, v), on the inputs' device: a selected query needs every key
    and value of its batch and head, and its own position for the causal mask."""
    q, k, v = inputs
    if index is None:
        return {"out": attention_fp64(q, k, v)}
    q, k, v = (t.index_select(0, index["B"]).index_select(1, index["H"]) for t in (q, k, v))
    q = q.index_select(2, index["S"])
    out, scale, slack = attention_fp64(q, k, v, positions=index["S"])
    return {"out": (out, scale, slack)}
