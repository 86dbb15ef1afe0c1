"""`ln_linear_backward`'s kernel with its loads (x, both gradients, the mask) issued one row tile ahead by hand
(Triton's pipeliner prefetches only loads that feed a product directly; here only the weights' did), timed alone
at opm-af2-main bf16 beside the package's kernel over tile rows, warps and programs a multiprocessor, with its
outputs compared to the package's. python3 lnbwd_prefetch.py"""
import torch
import triton
import triton.language as tl
import triton.testing

import evofuse.ops.layer_norm_linear as lnl
from evofuse.ops._common import cached_launch, multiprocessors


@triton.jit
def _tile_loads(x_ptr, stride_xr, m_ptr, dy0_ptr, dy1_ptr, t, offs_d, offs_c, ROWS, C, BLOCK_ROWS: tl.constexpr):
    rows = (t * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
    r_ok = rows < ROWS
    x = tl.load(x_ptr + offs_d[:, None] + (rows * stride_xr)[None, :], mask=r_ok[None, :], other=0.0)  # [D, rows]
    m = tl.load(m_ptr + rows, mask=r_ok, other=0.0)
    dy0 = tl.load(dy0_ptr + rows[None, :] * C + offs_c[:, None], mask=r_ok[None, :], other=0.0)  # [C, rows]
    dy1 = tl.load(dy1_ptr + rows[None, :] * C + offs_c[:, None], mask=r_ok[None, :], other=0.0)
    return x, m, dy0, dy1


@triton.jit
def _prefetch_kernel(x_ptr, stride_xr, lnw_ptr, lnb_ptr, w_ptr, m_ptr, dy0_ptr, dy1_ptr, dx_ptr, xn_ptr, dy_ptr,
                     part_ptr, stride_part, ROWS, D, C, eps, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr,
                     BLOCK_D: tl.constexpr, HOIST_W: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = w_ptr.dtype.element_ty
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d).to(tl.float32)
    w0t_ptrs = w_ptr + offs_d[:, None] + offs_c[None, :] * D
    w1t_ptrs = w0t_ptrs + C * D
    if HOIST_W:
        w0t, w1t = tl.load(w0t_ptrs), tl.load(w1t_ptrs)
    db0 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    db1 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    dlnw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_D,), dtype=tl.float32)
    n_tiles = tl.cdiv(ROWS, BLOCK_ROWS)
    x_n, m_n, dy0_n, dy1_n = _tile_loads(x_ptr, stride_xr, m_ptr, dy0_ptr, dy1_ptr, pid, offs_d, offs_c, ROWS, C,
                                         BLOCK_ROWS)
    for t in range(pid, n_tiles, programs):
        rows = (t * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
        r_ok = rows < ROWS
        x = x_n.to(tl.float32)
        m = m_n
        dy0 = dy0_n.to(tl.float32)
        dy1 = dy1_n.to(tl.float32)
        x_n, m_n, dy0_n, dy1_n = _tile_loads(x_ptr, stride_xr, m_ptr, dy0_ptr, dy1_ptr, t + programs, offs_d, offs_c,
                                             ROWS, C, BLOCK_ROWS)
        mean = tl.sum(x, axis=0) / D
        xc = x - mean[None, :]
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / D + eps)
        xhat = xc * rstd[None, :]
        tl.store(xn_ptr + rows[None, :] * D + offs_d[:, None], (xhat * lnw[:, None] + lnb[:, None]).to(dtype),
                 mask=r_ok[None, :])
        dy0 = (dy0 * m[None, :]).to(dtype)
        dy1 = (dy1 * m[None, :]).to(dtype)
        tl.store(dy_ptr + rows[None, :] * (2 * C) + offs_c[:, None], dy0, mask=r_ok[None, :])
        tl.store(dy_ptr + rows[None, :] * (2 * C) + C + offs_c[:, None], dy1, mask=r_ok[None, :])
        if HOIST_W:
            dxn = tl.dot(w0t, dy0)
            dxn = tl.dot(w1t, dy1, dxn)
        else:
            dxn = tl.dot(tl.load(w0t_ptrs), dy0)
            dxn = tl.dot(tl.load(w1t_ptrs), dy1, dxn)
        db0 += dy0.to(tl.float32)
        db1 += dy1.to(tl.float32)
        dlnw += tl.sum(dxn * xhat, axis=1)
        dlnb += tl.sum(dxn, axis=1)
        g = dxn * lnw[:, None]
        c1 = tl.sum(g * xhat, axis=0) / D
        c2 = tl.sum(g, axis=0) / D
        dx = (g - c2[None, :] - xhat * c1[None, :]) * rstd[None, :]
        tl.store(dx_ptr + rows[None, :] * D + offs_d[:, None], dx.to(dtype), mask=r_ok[None, :])
    part = part_ptr + pid.to(tl.int64) * stride_part
    tl.store(part + offs_c, tl.sum(db0, axis=1))
    tl.store(part + C + offs_c, tl.sum(db1, axis=1))
    tl.store(part + 2 * C + offs_d, dlnw)
    tl.store(part + 2 * C + D + offs_d, dlnb)


def main():
    torch.manual_seed(0)
    B, S, N, D, c = 1, 512, 384, 256, 32
    dev = "cuda"
    xm = torch.randn(B, S, N, D, device=dev, dtype=torch.bfloat16)
    mask = (torch.rand(B, S, N, device=dev) > 0.1).float()
    lnw, lnb = torch.randn(D, device=dev, dtype=torch.bfloat16), torch.randn(D, device=dev, dtype=torch.bfloat16)
    wab = (torch.randn(2 * c, D, device=dev) / 16).to(torch.bfloat16)
    da = torch.randn(B, S, N, c, device=dev, dtype=torch.bfloat16)
    db = torch.randn(B, S, N * c, device=dev)
    rows = B * S * N
    nbytes = rows * (3 * D * 2 + c * 2 + c * 4 + 2 * c * 2 + 4)
    sms = multiprocessors(xm.device)
    xr, mr = xm.view(-1, D), mask.view(-1)
    outs = {}
    for name, kernel, per_sm, warps, br, hoist in (
            ("package", lnl._ln_linear_bwd_kernel, 2, 4, 32, None), ("prefetch", _prefetch_kernel, 2, 4, 32, False),
            ("prefetch", _prefetch_kernel, 1, 4, 32, False), ("prefetch", _prefetch_kernel, 4, 4, 16, False),
            ("prefetch", _prefetch_kernel, 2, 4, 16, False), ("prefetch", _prefetch_kernel, 1, 8, 64, False),
            ("prefetch", _prefetch_kernel, 2, 8, 32, False), ("prefetch", _prefetch_kernel, 2, 4, 32, True),
            ("prefetch", _prefetch_kernel, 3, 4, 16, False)):
        programs = per_sm * sms
        part = torch.empty(programs, 2 * c + 2 * D, dtype=torch.float32, device=dev)
        xn = torch.empty(rows, D, dtype=xm.dtype, device=dev)
        dy = torch.empty(rows, 2 * c, dtype=xm.dtype, device=dev)
        dxm = torch.empty_like(xm)
        if kernel is lnl._ln_linear_bwd_kernel:
            def run():
                cached_launch(kernel)((programs,), xr, *xr.stride(), lnw, lnb, wab, mr, 1, da.view(rows, c), c,
                                      db.view(rows, c), c, dxm, xn, dy, part, part.stride(0), rows, D, c, 1e-5, 1,
                                      HAS_MASK=True, EVEN_D=True, EVEN_C=True, BLOCK_ROWS=br, BLOCK_C=32, BLOCK_D=256,
                                      num_warps=warps, num_stages=2)
        else:
            def run():
                cached_launch(kernel)((programs,), xr, xr.stride(0), lnw, lnb, wab, mr, da.view(rows, c), db.view(rows, c),
                                      dxm, xn, dy, part, part.stride(0), rows, D, c, 1e-5, BLOCK_ROWS=br, BLOCK_C=32,
                                      BLOCK_D=256, HOIST_W=hoist, num_warps=warps, num_stages=2)
        try:
            run()
            t = triton.testing.do_bench(run, warmup=25, rep=150, return_mode="median")
            got = (dxm.clone(), xn.clone(), dy.clone(), part.sum(0))
            ref = outs.setdefault("ref", got)
            diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, ref))
            print(f"{name} per_sm {per_sm} warps {warps} rows {br} hoist {hoist}: {t:.4f} ms, {nbytes / t / 1e6:.0f} GB/s, "
                  f"max diff to the package {diff:.3g}")
        except Exception as e:
            print(f"{name} per_sm {per_sm} warps {warps} rows {br}: {type(e).__name__} {str(e)[:200]}")


if __name__ == "__main__":
    main()
