"""Print the Triton kernel torch.compile generates for the fp32 baseline VJP expression on a
(1024, 32768) problem, with its launch configuration, for comparison with the course reference
(docs/benchmarks.md: torch.compile is 10-14% faster on that row). GPU only.

    TORCH_LOGS=output_code python3 scripts/dump_inductor_vjp.py 2> inductor_code.txt
"""

import torch


def baseline(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    y32, g32 = y.float(), g.float()
    return (y32 * (g32 - (y32 * g32).sum(dim=-1, keepdim=True))).to(y.dtype)


for dtype in (torch.float32, torch.float16):
    y = torch.softmax(torch.randn(1024, 32768, device="cuda"), -1).to(dtype)
    g = torch.randn(1024, 32768, device="cuda").to(dtype)
    compiled = torch.compile(baseline)
    out = compiled(y, g)
    torch.cuda.synchronize()
    print(dtype, float((out.float() - baseline(y, g).float()).abs().max()))
