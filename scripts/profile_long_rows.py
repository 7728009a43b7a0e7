"""Launch the reference's 1024x32768 kernels (and torch.add of the same shape) for Nsight Compute.

    ncu --kernel-name regex:'twopass|add' --metrics dram__bytes_read.sum,... \
        python3 scripts/profile_long_rows.py [--dtypes float16,float32]

Each kernel runs 3 times, with an L2 flush (a sum over 256 MiB) before each; Nsight Compute
also flushes caches before every profiled kernel by default. The DRAM bytes it reports show
whether the second pass of the two-pass kernel is served from L2 (ideal: y and g read once
= 2 x M x N x element size, dx written once) or partly from DRAM. GPU only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from grader.assignments import softmax_backward_reference as ref  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float16,float32")
    parser.add_argument("--shape", default="1024x32768")
    args = parser.parse_args()
    m, n = (int(v) for v in args.shape.split("x"))
    flush = torch.ones(64 << 20, device="cuda")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        y = torch.softmax(torch.randn(m, n, device="cuda"), dim=-1).to(dtype)
        g = torch.randn(m, n, device="cuda").to(dtype)
        print(name, "plan", ref._plan(m, n, y.element_size(), y.device), flush=True)
        for _ in range(3):
            flush.sum()
            ref.softmax_backward(y, g)
            flush.sum()
            torch.add(y, g)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
