"""CPU tests of ``softmax_cross_entropy_backward``'s benchmark spec and bench.py: rows, floor
bytes, reproducible inputs, the oracle of sampled rows, the peers' values, and the generic
re-verification of timed outputs on this assignment's inputs.

The timing itself needs a GPU (grader/harness/timing.py); it is recorded on the H200.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from grader.assignments import get_assignment
from grader.assignments.softmax_cross_entropy_backward.oracle import xent_grad_fp64
from grader.assignments.softmax_cross_entropy_backward.spec import BENCHMARK_IGNORED_FRACTION
from grader.benchmark import BenchmarkOptions
from grader.benchmark.options import benchmark_rows
from grader.benchmark.verify import load_bench_module, verify_rows
from grader.harness import timing

ASSIGNMENT = get_assignment("softmax_cross_entropy_backward")
SPEC = ASSIGNMENT.benchmark
BENCH = load_bench_module(SPEC.bench_file)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def test_rows_cover_lm_heads_and_classifiers_in_every_dtype():
    rows = benchmark_rows(SPEC, BenchmarkOptions())
    ids = {r["id"] for r in rows}
    for m, c in [(4096, 32768), (16384, 1024), (65536, 128), (1024, 131072)]:
        for dtype in ("float32", "float16", "bfloat16"):
            assert f"{m}x{c}/{dtype}" in ids
    assert len(rows) == 12 and len({r["seed"] for r in rows}) == 12


def test_baseline_and_peers_are_named_and_scoped():
    assert SPEC.baseline == "torch_fp32_expression"
    assert set(SPEC.peers) == {"torch_fp32_expression", "aten_cross_entropy_backward", "reference",
                               "torch_compile_fp32_expression"}
    assert set(BENCH.PEERS) | {"reference", BENCH.COMPILED_PEER[0]} == set(SPEC.peers)
    assert BENCH.COMPILED_PEER[1] is BENCH.torch_fp32_expression
    for name in (*SPEC.peers, "student"):
        assert len(SPEC.scopes[name]) > 40, name
    assert BENCH.ARGUMENTS == ASSIGNMENT.manifest.arguments[:3] == ("x", "t", "grad")


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("float16", 2), ("bfloat16", 2)])
def test_floor_bytes_read_x_once_and_write_dlogits_once(dtype, size):
    m, c = 4096, 32768
    floor = SPEC.floor.bytes((m, c), dtype)
    assert floor["min"] == 2 * m * c * size + 8 * m  # x read + dx written + int64 targets
    assert floor["two_pass"] == 3 * m * c * size + 8 * m  # x read twice


def test_inputs_are_reproducible_from_the_seed():
    x1, t1, g1 = BENCH.make_inputs((64, 33), torch.bfloat16, 123, device="cpu")
    x2, t2, g2 = BENCH.make_inputs((64, 33), torch.bfloat16, 123, device="cpu")
    x3, t3, _ = BENCH.make_inputs((64, 33), torch.bfloat16, 124, device="cpu")
    assert torch.equal(x1, x2) and torch.equal(t1, t2) and torch.equal(g1, g2)
    assert not torch.equal(x1, x3) and not torch.equal(t1, t3)
    assert x1.dtype == torch.bfloat16 and x1.shape == (64, 33) and x1.is_contiguous()
    assert t1.dtype == torch.int64 and t1.shape == (64,)
    assert g1.dtype == torch.float32 and g1.shape == () and 0.5 <= float(g1) < 1.5
    assert BENCH.expected_output((x1, t1, g1)) == ((64, 33), torch.bfloat16)


def test_inputs_ignore_about_one_row_in_sixteen():
    _, t, _ = BENCH.make_inputs((8192, 10), torch.float32, 1, device="cpu")
    ignored = float((t == BENCH.IGNORE_INDEX).double().mean())
    assert BENCH.IGNORED_FRACTION == BENCHMARK_IGNORED_FRACTION
    assert 0.04 < ignored < 0.085, ignored
    assert bool(((t >= 0) & (t < 10) | (t == BENCH.IGNORE_INDEX)).all())


def test_refill_draws_new_values_in_place_from_the_same_distribution():
    inputs = list(BENCH.make_inputs((4096, 12), torch.bfloat16, 3, device="cpu"))
    before = [t.clone() for t in inputs]
    pointers = [t.data_ptr() for t in inputs]
    BENCH.refill_inputs(inputs, torch.Generator().manual_seed(8))
    x, t, grad = inputs
    assert [a.data_ptr() for a in inputs] == pointers  # in place: the recorded buffers
    assert all(not torch.equal(a, b) for a, b in zip(inputs, before))
    assert x.dtype == torch.bfloat16 and 1.8 < float(x.float().std()) < 2.2
    assert t.dtype == torch.int64 and bool(((t >= 0) & (t < 12) | (t == BENCH.IGNORE_INDEX)).all())
    assert 0.04 < float((t == BENCH.IGNORE_INDEX).double().mean()) < 0.085
    assert grad.shape == () and 0.5 <= float(grad) < 1.5


def test_refill_draws_every_value_from_its_generator():
    """The replay timer regenerates a set's inputs from the seed it refilled them with, to
    verify a timed output: the same seed must give the same bits, whatever the buffers held."""
    like = BENCH.make_inputs((256, 40), torch.float16, 5, device="cpu")
    first, second = ([torch.empty_like(t) for t in like] for _ in range(2))
    second[0].fill_(7.0)
    BENCH.refill_inputs(first, torch.Generator().manual_seed(123))
    BENCH.refill_inputs(second, torch.Generator().manual_seed(123))
    assert all(torch.equal(a.view(torch.uint8) if a.dim() else a, b.view(torch.uint8) if b.dim() else b)
               for a, b in zip(first, second))


def test_oracle_of_sampled_rows_counts_n_valid_over_the_whole_batch():
    inputs = BENCH.make_inputs((40, 17), torch.float16, 9, device="cpu")
    full, full_scale, _ = SPEC.oracle(inputs, None)["dx"]
    rows = tuple(timing.sample_row_indices(40, 4))
    part, part_scale, _ = SPEC.oracle(inputs, {"M": torch.tensor(rows)})["dx"]
    assert torch.equal(part, full[list(rows)]) and torch.equal(part_scale, full_scale[list(rows)])
    assert torch.equal(full, xent_grad_fp64(*inputs)[0])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_baseline_is_within_the_assignment_tolerance(dtype):
    inputs = BENCH.make_inputs((128, 1000), DTYPES[dtype], 4, device="cpu")
    expected, scale, _ = SPEC.oracle(inputs, None)["dx"]
    out = BENCH.torch_fp32_expression(*inputs)
    allowed = ASSIGNMENT.tolerance(DTYPES[dtype]).allowed(expected, scale)
    assert out.dtype == DTYPES[dtype] and bool(((out.double() - expected).abs() <= allowed).all())


def test_aten_peer_is_autograds_backward_and_keeps_log_p_in_the_input_dtype():
    """aten's path is exactly what autograd of F.cross_entropy returns; in fp32 it is within the
    tolerance, in fp16/bf16 it is not: autograd saves log_softmax's output in the input dtype,
    so p = exp(log p) carries a rounding of log p (docs/checks.md: its 2-byte rows are flagged)."""
    for dtype, within in (("float32", True), ("float16", False), ("bfloat16", False)):
        x, t, grad = BENCH.make_inputs((128, 1000), DTYPES[dtype], 4, device="cpu")
        leaf = x.clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(leaf, t, ignore_index=BENCH.IGNORE_INDEX)
        (autograd_dx,) = torch.autograd.grad(loss, leaf, grad_outputs=grad.to(loss.dtype))
        out = BENCH.aten_cross_entropy_backward(x, t, grad)
        assert torch.equal(out, autograd_dx), dtype
        expected, scale, _ = SPEC.oracle((x, t, grad), None)["dx"]
        allowed = ASSIGNMENT.tolerance(DTYPES[dtype]).allowed(expected, scale)
        assert bool(((out.double() - expected).abs() <= allowed).all()) is within, dtype


def test_streaming_probe_reads_x_and_writes_its_shape():
    inputs = BENCH.make_inputs((8, 16), torch.float16, 0, device="cpu")
    what, probe = BENCH.STREAMING_PROBE
    out = probe(*inputs)
    assert "1 read + 1 write" in what and torch.equal(out, inputs[0]) and out.data_ptr() != inputs[0].data_ptr()


def _fake_outputs(row, sets, corrupt_set=None):
    shape, dtype = tuple(row["shape"]), DTYPES[row["dtype"]]
    kept = timing.sample_row_indices(shape[0], 4)
    tensors, saved = {}, {}
    for method, stage in (("event", 1), ("graph", 2)):
        for k in range(sets):
            inputs = BENCH.make_inputs(shape, dtype, timing.stage_seed(row["seed"], stage, k), device="cpu")
            out = BENCH.torch_fp32_expression(*inputs)
            if corrupt_set == k and method == "graph":
                # a kernel that forgets the mean's 1/n_valid on one sampled valid row
                valid = inputs[1] != BENCH.IGNORE_INDEX
                out[next(r for r in kept if bool(valid[r]))] *= int(valid.sum())
            tensors[f"student|{method}|set{k}|0"] = out[kept].contiguous()
            if k == 0:
                tensors[f"student|{method}|full|0"] = out.contiguous()
        saved[method] = {"index": {"M": kept}, "full_set": 0}
    return tensors, saved


def _verify(tmp_path, corrupt_set=None):
    row = {"id": "24x40/float16", "shape": [24, 40], "dtype": "float16", "seed": 5}
    tensors, saved = _fake_outputs(row, sets=2, corrupt_set=corrupt_set)
    save_file(tensors, str(tmp_path / "bench_out_0.safetensors"))
    stats = {"median_s": 1e-5}
    document = {"rows": [{"id": row["id"], "outputs_file": "bench_out_0.safetensors",
                          "impls": {"student": {"event": stats, "graph": stats, "saved": saved}}}]}
    verify_rows(ASSIGNMENT, document, tmp_path, [row], sets=2, device="cpu")
    return document["rows"][0]["impls"]["student"]["verified"]


def test_reverification_accepts_right_outputs_and_rejects_a_wrong_row(tmp_path):
    verified = _verify(tmp_path)
    assert verified["event"]["passed"] and verified["graph"]["passed"], verified
    verified = _verify(tmp_path, corrupt_set=1)
    assert verified["event"]["passed"] and not verified["graph"]["passed"]
    assert "set 1" in verified["graph"]["problems"][0]
