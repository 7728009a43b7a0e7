"""Returns wrong values (y*g, no dot term) for float32 inputs, then spins forever on the first
float16 call (half_precision, the third check).

Expected (with a short child timeout): verdict failed, not error: example_two_element and
autograd_fp32 have already failed when the time runs out, and the document reports the
timeout beside those failures (error.kind timeout); the later checks are listed as not run.
"""
import torch


def softmax_backward(y, g):
    if y.dtype == torch.float16:
        n = 0
        while True:
            n += 1
    return (y * g).contiguous()
