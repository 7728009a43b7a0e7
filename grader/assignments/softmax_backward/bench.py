"""``softmax_backward``'s benchmark inputs and peers, for the timing children.

This file is bound into the benchmark children (as /harness/assignment_bench.py) and imported
there, so it imports only torch; the parent imports it too (``make_inputs``), so that it
regenerates bit-identical inputs on the same GPU to re-verify timed outputs.

Names the generic timing harness (grader/harness/bench_child.py) reads:
    ARGUMENTS: the positional arguments of every timed function, in order.
    make_inputs(shape, dtype, seed, device) -> tuple of ARGUMENTS.
    PEERS: name -> function of ARGUMENTS (trusted implementations timed beside the student).
    COMPILED_PEER: (name, function) compiled with torch.compile per row, or None.
    STREAMING_PROBE: (description, function) making the same memory accesses with no
        arithmetic to speak of: what streaming these bytes costs at this size (reported only).
    expected_output(inputs) -> (shape, dtype) of a correct output.
    refill_inputs(inputs, generator): new values in place, from the same distribution as
        make_inputs (the replay timer gives every timed call new inputs).
"""

from __future__ import annotations

import torch

ARGUMENTS = ("y", "g")


def make_inputs(shape: tuple[int, int], dtype: torch.dtype, seed: int, device: str = "cuda"
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, g), each ``shape`` = (M, N) contiguous ``dtype`` on ``device``, from one seeded generator.

    y = U(0, 1) * 2/N (rows sum to about 1, like probabilities); g = N(0, 1) + 0.5 (a non-zero
    mean, so the row dot product is not small). Elementwise only, so the parent regenerates
    bit-identical values on the same device with the same torch.
    """
    m, n = shape
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    y = (torch.rand((m, n), generator=gen, device=device, dtype=torch.float32) * (2.0 / n)).to(dtype)
    g = (torch.randn((m, n), generator=gen, device=device, dtype=torch.float32) + 0.5).to(dtype)
    return y, g


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New (y, g) values in place: y ~ U(0, 2/N), g ~ N(0.5, 1), as ``make_inputs`` draws them."""
    y, g = inputs
    y.uniform_(0.0, 2.0 / y.shape[-1], generator=generator)
    g.normal_(0.5, 1.0, generator=generator)


def expected_output(inputs: tuple[torch.Tensor, torch.Tensor]) -> tuple[tuple[int, ...], torch.dtype]:
    """dx has y's shape and dtype."""
    y, _ = inputs
    return tuple(y.shape), y.dtype


def torch_fp32_expression(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The assignment's named baseline: the explicit fp32 VJP (casts, elementwise, one reduction)."""
    y32 = y.float()
    g32 = g.float()
    dot = (y32 * g32).sum(dim=-1, keepdim=True)
    return (y32 * (g32 - dot)).to(y.dtype)


def aten_softmax_backward_data(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """PyTorch's own fused softmax backward (what softmax's autograd node calls)."""
    return torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype)


def _streaming_probe(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return torch.add(y, g)


PEERS = {
    "torch_fp32_expression": torch_fp32_expression,
    "aten_softmax_backward_data": aten_softmax_backward_data,
}
COMPILED_PEER = ("torch_compile_fp32_expression", torch_fp32_expression)
STREAMING_PROBE = ("torch.add(y, g) on the row's buffer sets: 2 reads + 1 write per element, no reduction",
                   _streaming_probe)
