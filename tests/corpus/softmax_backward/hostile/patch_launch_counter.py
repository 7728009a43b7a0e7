"""Plain PyTorch (no Triton kernel), but finds the harness's launch counter in memory with
gc.get_objects() and bumps it on every call, so each call seems to have launched a kernel.

Expected: verdict failed, triton_kernel failing: the count is not the proof; the grader
replays the recorded Triton launches (there are none) and the output stays unwritten. Its
PyTorch expression also keeps a transposed y's layout, so output_contract fails as well.
"""
import gc

import torch

_counters = []


def _bump():
    if not _counters:
        _counters.extend(o for o in gc.get_objects() if type(o).__name__ in ("LaunchCounter", "LaunchRecorder"))
    for counter in _counters:
        counter.count += 1


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    _bump()
    y32, g32 = y.float(), g.float()
    return (y32 * (g32 - (y32 * g32).sum(-1, keepdim=True))).to(y.dtype)
