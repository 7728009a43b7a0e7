"""layernorm_backward with atomics (tests/corpus/layernorm_backward/correct/atomics.py) that
returns (dx, db, dw): dw and db in each other's place.

Expected failed checks: autograd_fp32, half_precision, central_difference_dw, strided_inputs,
    edge_shapes, fresh_results

Expected hint: swapped
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, acc_dw_ptr, acc_db_ptr, N,
                sdym, sdyn, sxm, sxn, sw, smean, srstd, sdxm, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mean = tl.load(mean_ptr + row * smean)
    rstd = tl.load(rstd_ptr + row * srstd)
    s1 = tl.zeros([BLOCK], dtype=tl.float32)
    s2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * sdym + cols * sdyn, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=m, other=0.0).to(tl.float32)
        xhat = tl.where(m, (x - mean) * rstd, 0.0)
        s1 += xhat * w * dy
        s2 += w * dy
    c1 = tl.sum(s1, axis=0) / N
    c2 = tl.sum(s2, axis=0) / N
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * sdym + cols * sdyn, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=m, other=0.0).to(tl.float32)
        xhat = tl.where(m, (x - mean) * rstd, 0.0)
        tl.store(dx_ptr + row * sdxm + cols, ((w * dy - (xhat * c1 + c2)) * rstd).to(dx_ptr.dtype.element_ty), mask=m)
        tl.atomic_add(acc_dw_ptr + cols, dy * xhat, mask=m)
        tl.atomic_add(acc_db_ptr + cols, dy, mask=m)


@triton.jit
def _cast_kernel(src_dw, src_db, dw_ptr, db_ptr, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    tl.store(dw_ptr + cols, tl.load(src_dw + cols, mask=m).to(dw_ptr.dtype.element_ty), mask=m)
    tl.store(db_ptr + cols, tl.load(src_db + cols, mask=m).to(db_ptr.dtype.element_ty), mask=m)


def layernorm_backward(dy, x, w, mean, rstd):
    M, N = x.shape if x.dim() == 2 else (None, None)
    if M is None or dy.shape != x.shape or w.shape != (N,) or mean.shape != (M,) or rstd.shape != (M,):
        raise ValueError("expected dy, x (M, N), w (N,), mean, rstd (M,)")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or dy.dtype != x.dtype or w.dtype != x.dtype:
        raise TypeError("dy, x, w must share a float dtype")
    if mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        raise TypeError("mean and rstd must be float32")
    if len({t.device for t in (dy, x, w, mean, rstd)}) != 1:
        raise ValueError("one device")
    if any(t.requires_grad for t in (dy, x, w, mean, rstd)):
        raise ValueError("no requires_grad")
    dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    acc_dw = torch.zeros((N,), dtype=torch.float32, device=x.device)
    acc_db = torch.zeros((N,), dtype=torch.float32, device=x.device)
    BLOCK = min(triton.next_power_of_2(N), 2048)
    _row_kernel[(M,)](dy, x, w, mean, rstd, dx, acc_dw, acc_db, N, dy.stride(0), dy.stride(1), x.stride(0),
                      x.stride(1), w.stride(0), mean.stride(0), rstd.stride(0), dx.stride(0), BLOCK=BLOCK)
    dw = torch.empty((N,), dtype=x.dtype, device=x.device)
    db = torch.empty((N,), dtype=x.dtype, device=x.device)
    _cast_kernel[(triton.cdiv(N, 1024),)](acc_dw, acc_db, dw, db, N, BLOCK=1024)
    return dx, db, dw
