"""layernorm_backward's maths on the CPU, without Triton: the closed form against fp64 autograd of
F.layer_norm, the invariants, statistics consistent across dtypes, and the tolerance."""

from __future__ import annotations

import torch

from grader.assignments.layernorm_backward import placed_oracle, spec
from grader.assignments.layernorm_backward.inputs import make_case
from grader.assignments.layernorm_backward.oracle import autograd_fp64, layernorm_backward_fp64, statistics_fp64
from grader.checks.tolerance import compare


def test_closed_form_is_autograd_of_layer_norm_in_fp64():
    case = make_case(torch.Generator().manual_seed(0), {"M": 6, "N": 37})
    v = case.values
    closed = layernorm_backward_fp64(v["dy"], v["x"], v["w"], v["mean"], v["rstd"])
    graded = autograd_fp64(v["x"], v["w"], case.hidden["b"], v["dy"])
    for name in ("dx", "dw", "db"):
        assert torch.allclose(closed[name][0], graded[name], rtol=1e-10, atol=1e-10), name


def test_the_statistics_are_those_of_x_in_every_dtype():
    v = make_case(torch.Generator().manual_seed(1), {"M": 8, "N": 300}).values
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert torch.equal(v["x"].to(dtype).double(), v["x"])
        mean, rstd = statistics_fp64(v["x"].to(dtype))
        assert torch.equal(mean, v["mean"]) and torch.equal(rstd, v["rstd"])


def test_invariants_of_the_oracle():
    v = make_case(torch.Generator().manual_seed(2), {"M": 8, "N": 1025}).values
    dx, scale = layernorm_backward_fp64(v["dy"], v["x"], v["w"], v["mean"], v["rstd"])["dx"]
    xhat = (v["x"] - v["mean"][:, None]) * v["rstd"][:, None]
    assert bool((dx.sum(-1).abs() <= 1e-9 * scale.sum(-1)).all())
    # sum_j dx xhat = N c1 eps rstd^3 with eps 1e-5: small against the scale, not zero
    assert bool(((dx * xhat).sum(-1).abs() <= 1e-4 * (scale * xhat.abs()).sum(-1)).all())


def test_fp32_arithmetic_passes_and_a_dropped_term_fails():
    v = make_case(torch.Generator().manual_seed(3), {"M": 64, "N": 300}).values
    for name, dtype in (("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        placed = {k: t.to(dtype if k in ("dy", "x", "w") else torch.float32) for k, t in v.items()}
        oracle = placed_oracle(placed)
        dy, x, w = (placed[k].float() for k in ("dy", "x", "w"))
        xhat = (x - placed["mean"][:, None]) * placed["rstd"][:, None]
        wdy = w * dy
        c1, c2 = (xhat * wdy).mean(-1, keepdim=True), wdy.mean(-1, keepdim=True)
        outs = {"dx": ((wdy - (xhat * c1 + c2)) * placed["rstd"][:, None]).to(dtype),
                "dw": (dy * xhat).sum(0).to(dtype), "db": dy.sum(0).to(dtype)}
        for key, out in outs.items():
            result = compare(out, oracle[key].expected, oracle[key].scale, spec.TOLERANCES[name])
            assert result.passed, (name, key, result.describe())
        no_xhat_term = ((wdy - c2) * placed["rstd"][:, None]).to(dtype)
        assert not compare(no_xhat_term, oracle["dx"].expected, oracle["dx"].scale, spec.TOLERANCES[name]).passed
