"""The training step of ``attention_backward``'s check ``training_step``: one causal attention
layer (q, k, v and output projections of a 16-wide model, one head of 16) fitted by full-batch
SGD to a fixed target sequence, with the submission's (dq, dk, dv) as the attention's backward.

Everything here runs in the parent, in fp64 (grader.assignments.protocol.TrainingProblem). The
call's q, k, v and dout are rounded to float16 first and out and lse computed in fp64 from those
(as inputs.make_case keeps them consistent), so the oracle of the call is that of its inputs.
"""

from __future__ import annotations

import math

import torch

from grader.assignments.protocol import Case, TrainingProblem

LENGTH = 48  # S: a key block of 32 or 64 and a ragged tail
WIDTH = 16  # the model's width, and the head dim D
LEARNING_RATE = 0.5
STEPS = 20


def problem() -> TrainingProblem:
    """x (1, S, 16) ~ N(0, 1) -> attention(x Wq, x Wk, x Wv) Wo, fitted to y = a causal running
    mean of x times a fixed random map (a target one layer of causal attention can approach)."""
    data: dict[str, torch.Tensor] = {}

    def init(generator: torch.Generator) -> dict[str, torch.Tensor]:
        x = torch.randn(1, LENGTH, WIDTH, generator=generator, dtype=torch.float64)
        mix = torch.randn(WIDTH, WIDTH, generator=generator, dtype=torch.float64) / math.sqrt(WIDTH)
        counts = torch.arange(1, LENGTH + 1, dtype=torch.float64)[None, :, None]
        data["x"], data["y"] = x, (x.cumsum(1) / counts) @ mix
        scale = 1.0 / math.sqrt(WIDTH)
        return {name: torch.randn(WIDTH, WIDTH, generator=generator, dtype=torch.float64) * scale
                for name in ("Wq", "Wk", "Wv", "Wo")}

    def projections(params) -> list[torch.Tensor]:
        return [(data["x"] @ params[name])[:, None] for name in ("Wq", "Wk", "Wv")]  # (1, 1, S, D)

    def attention(q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(WIDTH)
        mask = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, -math.inf)
        return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)

    def loss_of(params, out) -> torch.Tensor:
        return ((out[:, 0] @ params["Wo"] - data["y"]) ** 2).mean()

    def inputs(params) -> Case:
        q, k, v = (t.detach().to(torch.float16).double() for t in projections(params))
        out, lse = attention(q, k, v)
        leaf = out.detach().requires_grad_(True)
        dout = torch.autograd.grad(loss_of(params, leaf), leaf)[0].to(torch.float16).double()
        return Case(values={"q": q, "k": k, "v": v, "out": out.detach(), "dout": dout, "lse": lse.detach()},
                    label=f"(1, 1, {LENGTH}, {WIDTH}) float16")

    def loss(params) -> float:
        return float(loss_of(params, attention(*projections(params))[0]))

    def step(params, case: Case, outputs) -> dict[str, torch.Tensor]:
        leaves = {name: value.detach().clone().requires_grad_(True) for name, value in params.items()}
        q, k, v = projections(leaves)
        # the submission's dq, dk, dv as the attention's backward, through the projections
        torch.autograd.backward([q, k, v], [outputs["dq"], outputs["dk"], outputs["dv"]])
        # Wo's gradient at the output the call was given (the attention's output is not recomputed)
        out = case.values["out"]
        grad_wo = torch.autograd.grad(loss_of(leaves, out), leaves["Wo"])[0]
        updated = {name: (leaves[name] - LEARNING_RATE * leaves[name].grad).detach() for name in ("Wq", "Wk", "Wv")}
        updated["Wo"] = (leaves["Wo"] - LEARNING_RATE * grad_wo).detach()
        return updated

    return TrainingProblem(steps=STEPS, dtype="float16", init=init, inputs=inputs, loss=loss, step=step,
                           label=f"one causal attention layer fitted to a sequence of {LENGTH}")
