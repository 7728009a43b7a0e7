"""The training step of ``softmax_cross_entropy_backward``'s check ``training_step``: the two-layer
ReLU classifier on the spiral data of the lesson behind the assignment (three interleaved
spirals of 100 points each in the plane, classes 0-2), trained by full-batch SGD with the
submission's dx = d(mean cross-entropy)/d(logits) as the loss layer's backward.

Everything here runs in the parent, in fp64 (grader.assignments.protocol.TrainingProblem).
"""

from __future__ import annotations

import math

import torch

from grader.assignments.protocol import Case, TrainingProblem
from grader.assignments.softmax_cross_entropy_backward.inputs import case_of

POINTS_PER_CLASS = 100
CLASSES = 3
HIDDEN = 32
#: SGD's step: large enough that 30 full-batch steps move the loss from ln 3 = 1.10 well down
#: (to ~0.75 at seed 0), small enough that the fp64 trajectory is smooth.
LEARNING_RATE = 1.0
STEPS = 30


def spiral(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(points (300, 2) fp64, classes (300,) int64): class j's points at radius r in [0, 1] and
    angle 4 (j + r) plus N(0, 0.2^2) noise, as the lesson draws them."""
    radius = torch.linspace(0.0, 1.0, POINTS_PER_CLASS, dtype=torch.float64)
    points, classes = [], []
    for j in range(CLASSES):
        angle = torch.linspace(4.0 * j, 4.0 * (j + 1), POINTS_PER_CLASS, dtype=torch.float64)
        angle = angle + 0.2 * torch.randn(POINTS_PER_CLASS, generator=generator, dtype=torch.float64)
        points.append(torch.stack([radius * torch.sin(angle), radius * torch.cos(angle)], dim=1))
        classes.append(torch.full((POINTS_PER_CLASS,), j, dtype=torch.int64))
    return torch.cat(points), torch.cat(classes)


def problem() -> TrainingProblem:
    """The spiral classifier: X (300, 2) -> ReLU(X W1 + b1) W2 + b2 = logits (300, 3); the
    submission's call is (logits, classes, grad 1.0) in float32."""
    data: dict[str, torch.Tensor] = {}

    def init(generator: torch.Generator) -> dict[str, torch.Tensor]:
        data["X"], data["y"] = spiral(generator)
        return {"W1": torch.randn(2, HIDDEN, generator=generator, dtype=torch.float64) * math.sqrt(2.0 / 2),
                "b1": torch.zeros(HIDDEN, dtype=torch.float64),
                "W2": torch.randn(HIDDEN, CLASSES, generator=generator, dtype=torch.float64) * 0.01,
                "b2": torch.zeros(CLASSES, dtype=torch.float64)}

    def logits(params) -> torch.Tensor:
        hidden = torch.relu(data["X"] @ params["W1"] + params["b1"])
        return hidden @ params["W2"] + params["b2"]

    def inputs(params) -> Case:
        return case_of(logits(params).detach(), data["y"], 1.0)

    def loss(params) -> float:
        return float(torch.nn.functional.cross_entropy(logits(params), data["y"]))

    def step(params, case: Case, outputs) -> dict[str, torch.Tensor]:
        leaves = {name: value.detach().clone().requires_grad_(True) for name, value in params.items()}
        logits(leaves).backward(outputs["dx"])  # the submission's dx as the loss layer's backward
        return {name: (leaf - LEARNING_RATE * leaf.grad).detach() for name, leaf in leaves.items()}

    return TrainingProblem(steps=STEPS, dtype="float32", label="the two-layer ReLU classifier on 300 spiral points",
                           init=init, inputs=inputs, loss=loss, step=step)
