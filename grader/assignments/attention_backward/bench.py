"""``attention_backward``'s benchmark inputs and peers, for the timing children.

Bound into the benchmark children (as /harness/assignment_bench.py) and imported there, so it
imports only torch. The names the generic timing harness reads are those of
grader/assignments/softmax_backward/bench.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ARGUMENTS = ("q", "k", "v", "out", "dout", "lse")


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out in q's dtype, lse fp32) of causal attention, computed in fp32 one head block at a
    time (setup only, never timed)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    length = q.shape[-2]
    mask = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    outs, lses = [], []
    for b in range(q.shape[0]):
        scores = (q[b].float() @ k[b].float().transpose(-1, -2)) * scale
        scores = scores.masked_fill(~mask, -math.inf)
        lse = torch.logsumexp(scores, dim=-1)
        outs.append((torch.exp(scores - lse[..., None]) @ v[b].float()).to(q.dtype))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def make_inputs(shape: tuple[int, int, int, int], dtype: torch.dtype, seed: int, device: str = "cuda") -> tuple:
    """(q, k, v, out, dout, lse) for a row ``shape`` = (B, H, S, D): q, k, v, dout ~ N(0, 1)
    drawn in fp32 from one seeded generator and rounded to ``dtype``; out and lse their causal
    forward (fp32, out rounded to ``dtype``)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    q, k, v, dout = (torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
                     for _ in range(4))
    out, lse = _forward(q, k, v)
    return q, k, v, out, dout, lse


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New values in place: q, k, v, dout redrawn, out and lse recomputed from them."""
    q, k, v, out, dout, lse = inputs
    for tensor in (q, k, v, dout):
        tensor.normal_(0.0, 1.0, generator=generator)
    new_out, new_lse = _forward(q, k, v)
    out.copy_(new_out)
    lse.copy_(new_lse)


def expected_outputs(inputs: tuple) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """dq, dk, dv are (B, H, S, D) of q's dtype."""
    return [(tuple(inputs[0].shape), inputs[0].dtype)] * 3


def sdpa_autograd(q, k, v, out, dout, lse):
    """The assignment's baseline: autograd of F.scaled_dot_product_attention(is_causal=True) on
    leaf copies of q, k, v (PyTorch's backend choice: FlashAttention-2's on an H200); its scope
    includes the forward it recomputes and the three copies."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    result = F.scaled_dot_product_attention(*leaves, is_causal=True)
    return torch.autograd.grad(result, leaves, dout)


#: torch.compile of flex_attention, made on the first call (in the peers child's warm-up).
_COMPILED_FLEX = None
#: The causal block mask per (sequence length, device): it depends on no value, so building it
#: is set-up, as it is in a training loop, not part of the timed backward.
_CAUSAL_MASKS: dict = {}


def flex_autograd(q, k, v, out, dout, lse):
    """Autograd of FlexAttention compiled, as FlexAttention is used in training:
    ``torch.compile(flex_attention)`` (Inductor's Triton forward and backward templates) with a
    causal block mask, the autograd around it eager; forward recomputed as for the baseline.
    (A whole-function compile, as the forward assignment's COMPILED_PEER, cannot make the leaves:
    Dynamo refuses ``requires_grad_()``, seen on the H200 on 2026-12-05.)"""
    global _COMPILED_FLEX
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_index, kv_index):
        return q_index >= kv_index

    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    length = q.shape[-2]
    key = (length, str(q.device))
    if key not in _CAUSAL_MASKS:
        _CAUSAL_MASKS[key] = create_block_mask(causal, None, None, length, length, device=q.device)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    result = _COMPILED_FLEX(*leaves, block_mask=_CAUSAL_MASKS[key])
    return torch.autograd.grad(result, leaves, dout)


def _streaming_probe(q, k, v, out, dout, lse):
    return torch.cat([t.reshape(-1) for t in (q, k, v, out, dout)])


PEERS = {"sdpa_autograd": sdpa_autograd, "flex_attention_autograd_compiled": flex_autograd}
COMPILED_PEER = None  # flex_autograd compiles its flex_attention itself
STREAMING_PROBE = ("torch.cat of q, k, v, out and dout: their bytes once, no arithmetic", _streaming_probe)


def flops(shape: tuple[int, int, int, int]) -> int:
    """Causal backward FLOPs: five products over the S (S + 1) / 2 kept pairs (q k^T again, dout
    v^T, P^T dout, dS k, dS^T q), 2 D each."""
    b, h, s, d = shape
    return 10 * d * b * h * (s * (s + 1) // 2)


def min_bytes(shape: tuple[int, int, int, int], dtype: torch.dtype) -> int:
    """q, k, v, out, dout read and dq, dk, dv written once; lse read (fp32)."""
    b, h, s, d = shape
    return 8 * b * h * s * d * torch.empty((), dtype=dtype).element_size() + 4 * b * h * s
