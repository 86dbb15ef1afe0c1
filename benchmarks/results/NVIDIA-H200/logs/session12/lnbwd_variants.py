"""Forms of the Outer Product Mean backward's LayerNorm + projection gradients at opm-af2-main bf16, timed alone
beside the committed `ln_linear_backward` (one pass, per-program weight sums held in registers): python3 lnbwd_variants.py
- rows: a row kernel (dx, and the normalized rows xn and masked dy written in bf16, per-program LayerNorm and bias
  sums), then cuBLAS's dW = dy^T xn; no large accumulator, several programs a multiprocessor;
- mtrick: one pass accumulating M = dy^T xhat (not dy^T xn) and the bias sums as 2-D tiles, the LayerNorm's
  gradients derived afterwards (dlnw = sum_k W M, dlnb = W^T db; dW = M lnw + db lnb): no column reduction a step."""
import torch
import triton
import triton.language as tl
import triton.testing

import evofuse.ops.layer_norm_linear as lnl
from evofuse.ops._common import add_product, cached_launch, multiprocessors
from evofuse.ops.layer_norm_linear import _row_moments
from evofuse.suite import SUITE, make_inputs, make_module


@triton.jit
def _rows_kernel(x_ptr, lnw_ptr, lnb_ptr, w_ptr, m_ptr, dy0_ptr, dy1_ptr, dx_ptr, xn_ptr, dy_ptr, part_ptr, stride_part,
                 ROWS, D, C, eps, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
                 ACC_ROWS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = w_ptr.dtype.element_ty
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d).to(tl.float32)
    w0_ptrs = w_ptr + offs_c[:, None] * D + offs_d[None, :]
    dlnw = tl.zeros((ACC_ROWS, BLOCK_D), dtype=tl.float32)  # ACC_ROWS 1: summed over the tile's rows each step
    dlnb = tl.zeros((ACC_ROWS, BLOCK_D), dtype=tl.float32)
    db0 = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    db1 = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    for t in range(pid, tl.cdiv(ROWS, BLOCK_ROWS), programs):
        rows = (t * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
        x = tl.load(x_ptr + rows[:, None] * D + offs_d[None, :]).to(tl.float32)
        _, rstd, xc = _row_moments(x, offs_d, D, eps)
        xhat = xc * rstd[:, None]
        tl.store(xn_ptr + rows[:, None] * D + offs_d[None, :], (xhat * lnw[None, :] + lnb[None, :]).to(dtype))
        m = tl.load(m_ptr + rows)
        dy0 = (tl.load(dy0_ptr + rows[:, None] * C + offs_c[None, :]).to(tl.float32) * m[:, None]).to(dtype)
        dy1 = (tl.load(dy1_ptr + rows[:, None] * C + offs_c[None, :]).to(tl.float32) * m[:, None]).to(dtype)
        tl.store(dy_ptr + rows[:, None] * (2 * C) + offs_c[None, :], dy0)
        tl.store(dy_ptr + rows[:, None] * (2 * C) + C + offs_c[None, :], dy1)
        dxn = tl.dot(dy0, tl.load(w0_ptrs))
        dxn = tl.dot(dy1, tl.load(w0_ptrs + C * D), dxn)
        db0 += dy0.to(tl.float32)
        db1 += dy1.to(tl.float32)
        if ACC_ROWS == 1:
            dlnw += tl.sum(dxn * xhat, axis=0)[None, :]
            dlnb += tl.sum(dxn, axis=0)[None, :]
        else:
            dlnw += dxn * xhat
            dlnb += dxn
        g = dxn * lnw[None, :]
        c1 = tl.sum(g * xhat, axis=1) / D
        c2 = tl.sum(g, axis=1) / D
        dx = (g - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * D + offs_d[None, :], dx.to(dtype))
    part = part_ptr + pid.to(tl.int64) * stride_part
    tl.store(part + offs_c, tl.sum(db0, axis=0))
    tl.store(part + C + offs_c, tl.sum(db1, axis=0))
    tl.store(part + 2 * C + offs_d, tl.sum(dlnw, axis=0))
    tl.store(part + 2 * C + D + offs_d, tl.sum(dlnb, axis=0))


@triton.jit
def _mtrick_kernel(x_ptr, lnw_ptr, w_ptr, m_ptr, dy0_ptr, dy1_ptr, dx_ptr, part_ptr, stride_part,
                   ROWS, D, C, eps, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = w_ptr.dtype.element_ty
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    w0_ptrs = w_ptr + offs_c[:, None] * D + offs_d[None, :]
    m0 = tl.zeros((BLOCK_C, BLOCK_D), dtype=tl.float32)
    m1 = tl.zeros((BLOCK_C, BLOCK_D), dtype=tl.float32)
    db0 = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    db1 = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    for t in range(pid, tl.cdiv(ROWS, BLOCK_ROWS), programs):
        rows = (t * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
        x = tl.load(x_ptr + rows[:, None] * D + offs_d[None, :]).to(tl.float32)
        _, rstd, xc = _row_moments(x, offs_d, D, eps)
        xhat = xc * rstd[:, None]
        m = tl.load(m_ptr + rows)
        dy0 = (tl.load(dy0_ptr + rows[:, None] * C + offs_c[None, :]).to(tl.float32) * m[:, None]).to(dtype)
        dy1 = (tl.load(dy1_ptr + rows[:, None] * C + offs_c[None, :]).to(tl.float32) * m[:, None]).to(dtype)
        dxn = tl.dot(dy0, tl.load(w0_ptrs))
        dxn = tl.dot(dy1, tl.load(w0_ptrs + C * D), dxn)
        xh = xhat.to(dtype)
        m0 = tl.dot(tl.trans(dy0), xh, m0)
        m1 = tl.dot(tl.trans(dy1), xh, m1)
        db0 += dy0.to(tl.float32)
        db1 += dy1.to(tl.float32)
        g = dxn * lnw[None, :]
        c1 = tl.sum(g * xhat, axis=1) / D
        c2 = tl.sum(g, axis=1) / D
        dx = (g - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * D + offs_d[None, :], dx.to(dtype))
    part = part_ptr + pid.to(tl.int64) * stride_part
    offs = offs_c[:, None] * D + offs_d[None, :]
    tl.store(part + offs, m0)
    tl.store(part + C * D + offs, m1)
    tl.store(part + 2 * C * D + offs_c, tl.sum(db0, axis=0))
    tl.store(part + 2 * C * D + C + offs_c, tl.sum(db1, axis=0))


@triton.jit
def _rows_t_kernel(x_ptr, lnw_ptr, lnb_ptr, w_ptr, m_ptr, dy0_ptr, dy1_ptr, dx_ptr, xn_ptr, dy_ptr, part_ptr,
                   stride_part, ROWS, D, C, eps, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
                   HOIST: tl.constexpr):
    """The rows form transposed: tiles [D, rows], so that dxn^T = W^T dy^T has D (256) as the product's M (Hopper's
    warpgroup products take the weight from shared memory instead of registers)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dtype = w_ptr.dtype.element_ty
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d).to(tl.float32)
    wt_ptrs = w_ptr + offs_d[:, None] + offs_c[None, :] * D  # [BLOCK_D, BLOCK_C]: w_0^T
    if HOIST:
        w0t = tl.load(wt_ptrs)
        w1t = tl.load(wt_ptrs + C * D)
    dlnw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    dlnb = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db0 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    db1 = tl.zeros((BLOCK_C, BLOCK_ROWS), dtype=tl.float32)
    for t in range(pid, tl.cdiv(ROWS, BLOCK_ROWS), programs):
        rows = (t * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
        x = tl.load(x_ptr + rows[None, :] * D + offs_d[:, None]).to(tl.float32)  # [BLOCK_D, BLOCK_ROWS]
        mean = tl.sum(x, axis=0) / D
        xc = x - mean[None, :]
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / D + eps)
        xhat = xc * rstd[None, :]
        tl.store(xn_ptr + rows[None, :] * D + offs_d[:, None], (xhat * lnw[:, None] + lnb[:, None]).to(dtype))
        m = tl.load(m_ptr + rows)
        dy0 = (tl.load(dy0_ptr + rows[None, :] * C + offs_c[:, None]).to(tl.float32) * m[None, :]).to(dtype)
        dy1 = (tl.load(dy1_ptr + rows[None, :] * C + offs_c[:, None]).to(tl.float32) * m[None, :]).to(dtype)
        tl.store(dy_ptr + rows[None, :] * (2 * C) + offs_c[:, None], dy0)  # [BLOCK_C, BLOCK_ROWS]
        tl.store(dy_ptr + rows[None, :] * (2 * C) + C + offs_c[:, None], dy1)
        if HOIST:
            dxn = tl.dot(w0t, dy0)
            dxn = tl.dot(w1t, dy1, dxn)  # [BLOCK_D, BLOCK_ROWS]
        else:
            dxn = tl.dot(tl.load(wt_ptrs), dy0)
            dxn = tl.dot(tl.load(wt_ptrs + C * D), dy1, dxn)
        db0 += dy0.to(tl.float32)
        db1 += dy1.to(tl.float32)
        dlnw += tl.sum(dxn * xhat, axis=1)
        dlnb += tl.sum(dxn, axis=1)
        g = dxn * lnw[:, None]
        c1 = tl.sum(g * xhat, axis=0) / D
        c2 = tl.sum(g, axis=0) / D
        dx = (g - c2[None, :] - xhat * c1[None, :]) * rstd[None, :]
        tl.store(dx_ptr + rows[None, :] * D + offs_d[:, None], dx.to(dtype))
    part = part_ptr + pid.to(tl.int64) * stride_part
    tl.store(part + offs_c, tl.sum(db0, axis=1))
    tl.store(part + C + offs_c, tl.sum(db1, axis=1))
    tl.store(part + 2 * C + offs_d, dlnw)
    tl.store(part + 2 * C + D + offs_d, dlnb)


case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
x, mask = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
params = [p.detach() for p in mod.parameters()][:6]
B, S, N, D = x.shape
c = params[2].shape[0]
rows = B * S * N
mask_f = mask.float().contiguous()
da = torch.randn(B, S, N, c, device="cuda", dtype=torch.bfloat16)
db = torch.randn(B, S, N * c, device="cuda")
w = torch.cat([params[2], params[4]]).contiguous()
lnw, lnb = params[0].contiguous(), params[1].contiguous()
SMS = multiprocessors(x.device)


def committed():
    return lnl.ln_linear_backward(x, lnw, lnb, w, mask_f, da, db, 1e-5)


def rows_form(block_rows=16, warps=4, per_sm=4, stages=2, acc_rows=1):
    programs = SMS * per_sm
    dx, xn = torch.empty_like(x), torch.empty(rows, D, device="cuda", dtype=torch.bfloat16)
    dy = torch.empty(rows, 2 * c, device="cuda", dtype=torch.bfloat16)
    part = torch.empty(programs, 2 * c + 2 * D, device="cuda")
    cached_launch(_rows_kernel)((programs,), x, lnw, lnb, w, mask_f, da, db, dx, xn, dy, part, part.stride(0), rows, D, c,
                                1e-5, BLOCK_ROWS=block_rows, BLOCK_C=32, BLOCK_D=256, ACC_ROWS=acc_rows, num_warps=warps,
                                num_stages=stages)
    dw = torch.zeros(2 * c, D, device="cuda")
    add_product(dw, dy.t(), xn)
    s = part.sum(0)
    return dx, s[2 * c:2 * c + D], s[2 * c + D:], dw, s[:2 * c]


def rows_t_form(block_rows=32, warps=4, per_sm=2, stages=2, hoist=False):
    programs = SMS * per_sm
    dx, xn = torch.empty_like(x), torch.empty(rows, D, device="cuda", dtype=torch.bfloat16)
    dy = torch.empty(rows, 2 * c, device="cuda", dtype=torch.bfloat16)
    part = torch.empty(programs, 2 * c + 2 * D, device="cuda")
    cached_launch(_rows_t_kernel)((programs,), x, lnw, lnb, w, mask_f, da, db, dx, xn, dy, part, part.stride(0), rows, D,
                                  c, 1e-5, BLOCK_ROWS=block_rows, BLOCK_C=32, BLOCK_D=256, HOIST=hoist, num_warps=warps,
                                  num_stages=stages)
    dw = torch.zeros(2 * c, D, device="cuda")
    add_product(dw, dy.t(), xn)
    s = part.sum(0)
    return dx, s[2 * c:2 * c + D], s[2 * c + D:], dw, s[:2 * c]


def mtrick_form(block_rows=16, warps=8, stages=3):
    programs = SMS
    dx = torch.empty_like(x)
    part = torch.empty(programs, 2 * c * D + 2 * c, device="cuda")
    cached_launch(_mtrick_kernel)((programs,), x, lnw, w, mask_f, da, db, dx, part, part.stride(0), rows, D, c, 1e-5,
                                  BLOCK_ROWS=block_rows, BLOCK_C=32, BLOCK_D=256, num_warps=warps, num_stages=stages)
    s = part.sum(0)
    M, dbias = s[:2 * c * D].view(2 * c, D), s[2 * c * D:]
    wf = w.float()
    return dx, (wf * M).sum(0), dbias @ wf, M * lnw.float() + dbias[:, None] * lnb.float(), dbias


ref = committed()
names = ("dx", "dlnw", "dlnb", "dW", "dbias")
for name, fn in (("rows 16x4 per_sm=4", rows_form), ("rows 32x8 per_sm=2", lambda: rows_form(32, 8, 2)),
                 ("rows 16x8 per_sm=2", lambda: rows_form(16, 8, 2)), ("rows 32x4 per_sm=2", lambda: rows_form(32, 4, 2)),
                 ("rows 16x4 per_sm=2 2-D sums", lambda: rows_form(16, 4, 2, acc_rows=16)),
                 ("rows 16x4 per_sm=8", lambda: rows_form(16, 4, 8)),
                 ("transposed 32x4 per_sm=2", rows_t_form), ("transposed 16x4 per_sm=4", lambda: rows_t_form(16, 4, 4)),
                 ("transposed 64x8 per_sm=1", lambda: rows_t_form(64, 8, 1)),
                 ("transposed 32x4 per_sm=2 hoisted", lambda: rows_t_form(hoist=True, stages=1)),
                 ("transposed 32x8 per_sm=2", lambda: rows_t_form(32, 8, 2)),
                 ("transposed 32x4 per_sm=3 stages=3", lambda: rows_t_form(32, 4, 3, 3)),
                 ("mtrick 16x8", mtrick_form), ("mtrick 32x8", lambda: mtrick_form(32, 8, 2)),
                 ("committed", committed)):
    try:
        got = fn()
        errs = " ".join(f"{n} {((g.float() - r.float()).norm() / r.float().norm()).item():.1e}"
                        for n, g, r in zip(names, got, ref))
        ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
        print(f"{name}: {ms:.4f} ms ({errs})", flush=True)
    except Exception as err:
        print(f"{name}: {type(err).__name__}: {str(err)[:200]}", flush=True)
