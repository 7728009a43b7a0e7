"""``softmax_cross_entropy_backward``'s benchmark inputs and peers, for the timing children.

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

Every timed call uses the default ignore_index (-100), which make_inputs puts on about one
row in 16 (padding tokens).
"""

from __future__ import annotations

import torch

ARGUMENTS = ("x", "t", "grad")
IGNORE_INDEX = -100
IGNORED_FRACTION = 1.0 / 16  # grader/assignments/softmax_cross_entropy_backward/spec.py says the same
MEAN = 1  # at::Reduction::Mean, the reduction argument of aten's nll_loss ops


def make_inputs(shape: tuple[int, int], dtype: torch.dtype, seed: int, device: str = "cuda"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, t, grad) for an (M, C) row, on ``device``, from one seeded generator.

    x: contiguous (M, C) ``dtype`` logits, N(0, 2^2) drawn in fp32 then rounded; t: (M,) int64
    uniform classes, about IGNORED_FRACTION of them IGNORE_INDEX; grad: 0-d float32 in
    [0.5, 1.5). Elementwise draws only, so the parent regenerates bit-identical values on the
    same device with the same torch.
    """
    m, c = shape
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    x = (torch.randn((m, c), generator=gen, device=device, dtype=torch.float32) * 2.0).to(dtype)
    t = torch.randint(0, c, (m,), generator=gen, device=device, dtype=torch.int64)
    ignored = torch.rand((m,), generator=gen, device=device, dtype=torch.float32) < IGNORED_FRACTION
    t = torch.where(ignored, torch.full_like(t, IGNORE_INDEX), t)
    grad = torch.rand((), generator=gen, device=device, dtype=torch.float32) + 0.5
    return x, t, grad


def refill_inputs(inputs: list, generator: torch.Generator) -> None:
    """New (x, t, grad) values in place, drawn as ``make_inputs`` draws them: x ~ N(0, 2^2),
    classes uniform in [0, C) with about IGNORED_FRACTION of them IGNORE_INDEX, grad in
    [0.5, 1.5). Device-side only (no host synchronisation)."""
    x, t, grad = inputs
    x.normal_(0.0, 2.0, generator=generator)
    t.random_(0, x.shape[-1], generator=generator)
    ignored = torch.rand(t.shape, generator=generator, device=t.device, dtype=torch.float32) < IGNORED_FRACTION
    t.masked_fill_(ignored, IGNORE_INDEX)
    grad.uniform_(0.5, 1.5, generator=generator)


def expected_output(inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[tuple[int, ...], torch.dtype]:
    """dlogits has x's shape and dtype."""
    x = inputs[0]
    return tuple(x.shape), x.dtype


def torch_fp32_expression(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The assignment's named baseline: the explicit fp32 expression (softmax, one-hot by scatter,
    p - y, the mean's 1/n_valid as a device tensor, so no host synchronisation), no autograd."""
    p = torch.softmax(x.float(), dim=-1)
    valid = t != IGNORE_INDEX
    n_valid = valid.sum()
    onehot = torch.zeros_like(p).scatter_(1, torch.where(valid, t, 0).unsqueeze(1), 1.0)
    row_scale = torch.where(valid, grad / n_valid.clamp(min=1), 0.0)
    return ((p - onehot) * row_scale.unsqueeze(1)).to(x.dtype)


def aten_cross_entropy_backward(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """What PyTorch's autograd runs for F.cross_entropy's backward, from x.

    F.cross_entropy(x, t) is log_softmax then nll_loss; autograd saves log_softmax's output and
    nll_loss's total_weight (the valid-target count, in x's dtype) and its backward runs
    NllLossBackward0 (aten.nll_loss_backward: a dense (M, C) gradient of the log-probabilities)
    then LogSoftmaxBackward0 (aten._log_softmax_backward_data). Given only x, the saved
    tensors are recomputed first with the forward's own ops (aten._log_softmax,
    aten.nll_loss_forward), as autograd would have computed them.
    """
    logp = torch.ops.aten._log_softmax(x, 1, False)
    _, total_weight = torch.ops.aten.nll_loss_forward(logp, t, None, MEAN, IGNORE_INDEX)
    grad_logp = torch.ops.aten.nll_loss_backward(grad.to(logp.dtype), logp, t, None, MEAN, IGNORE_INDEX, total_weight)
    return torch.ops.aten._log_softmax_backward_data(grad_logp, logp, 1, x.dtype)


def _streaming_probe(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, 1.0)


PEERS = {
    "torch_fp32_expression": torch_fp32_expression,
    "aten_cross_entropy_backward": aten_cross_entropy_backward,
}
COMPILED_PEER = ("torch_compile_fp32_expression", torch_fp32_expression)
STREAMING_PROBE = ("torch.mul(x, 1.0) on the row's buffer sets: 1 read + 1 write per element of x, no reduction",
                   _streaming_probe)
