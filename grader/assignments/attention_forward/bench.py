"""``attention_forward``'s benchmark inputs and peers, for the timing children.

Bound into the benchmark children (as /harness/assignment_bench.py) and imported there, so it
imports only torch; the parent imports it too (``make_inputs``) to regenerate bit-identical
inputs on the same GPU. The names the generic timing harness reads are those of
grader/assignments/softmax_backward/bench.py (ARGUMENTS, make_inputs, refill_inputs,
expected_output, PEERS, COMPILED_PEER, STREAMING_PROBE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ARGUMENTS = ("q", "k", "v")


def make_inputs(shape: tuple[int, int, int, int], dtype: torch.dtype, seed: int, device: str = "cuda"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) for a row ``shape`` = (B, H, S, D): contiguous, ~ N(0, 1), drawn in fp32 from
    one seeded generator on ``device`` and rounded to ``dtype`` (elementwise draws only, so the
    parent regenerates bit-identical values)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype) for _ in range(3))


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New (q, k, v) values in place, from make_inputs' distribution (device-side only)."""
    for tensor in inputs:
        tensor.normal_(0.0, 1.0, generator=generator)


def expected_output(inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[tuple[int, ...], torch.dtype]:
    """out is (B, H, S, D) of q's dtype."""
    return tuple(inputs[0].shape), inputs[0].dtype


def torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The assignment's baseline: F.scaled_dot_product_attention(q, k, v, is_causal=True) with
    PyTorch's own choice of backend (on an H200 in fp16/bf16 with these head dims, its flash
    backend; on the CPU, its fused CPU kernel)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """SDPA restricted to its FlashAttention-2 backend (torch.nn.attention.sdpa_kernel); raises
    where that backend does not run (no GPU, an unsupported head dim), and the benchmark
    records the error in that peer's cell."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def flex_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """FlexAttention with a causal block mask (torch.nn.attention.flex_attention): compiled by
    the harness as COMPILED_PEER (torch.compile, fullgraph), where its Triton template runs."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_index, kv_index):
        return q_index >= kv_index

    length = q.shape[-2]
    mask = create_block_mask(causal, None, None, length, length, device=q.device)
    return flex_attention(q, k, v, block_mask=mask)


def _streaming_probe(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([q.reshape(-1), k.reshape(-1), v.reshape(-1)])


PEERS = {"torch_sdpa": torch_sdpa, "sdpa_flash": sdpa_flash}
COMPILED_PEER = ("flex_attention_compiled", flex_causal)
STREAMING_PROBE = ("torch.cat of q, k and v: reads and writes their bytes once, no arithmetic (the memory side of the "
                   "roofline)", _streaming_probe)


def flops(shape: tuple[int, int, int, int]) -> int:
    """Floating-point operations of one causal call: q k^T and P v over the S (S + 1) / 2 query
    and key pairs a causal mask keeps, 2 D each: 4 D B H S (S + 1) / 2 (the softmax's ~5 per
    pair are left out, as FlashAttention's figures do)."""
    b, h, s, d = shape
    return 4 * d * b * h * (s * (s + 1) // 2)


def min_bytes(shape: tuple[int, int, int, int], dtype: torch.dtype) -> int:
    """Bytes through device memory at least: q, k and v read once, out written once."""
    b, h, s, d = shape
    return 4 * b * h * s * d * torch.empty((), dtype=dtype).element_size()
