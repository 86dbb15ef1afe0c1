"""The Outer Product Mean backward's memory-bound kernels at opm-af2-main bf16 (one block of 192 rows i, as the
step runs them twice), each launched alone: dX (the package's autotuned launch, each config, and a form that
keeps out_proj's column block on chip across many pair tiles), dW (each config at several split counts) and
ln_linear_backward's kernel (warps, stages, programs a multiprocessor). python3 bwd_probe.py [--check]"""
import sys

import torch
import triton
import triton.language as tl
import triton.testing

import evofuse.ops.outer_product_mean as opm
from evofuse.ops._common import cached_launch, cdiv, interpreting, multiprocessors


@triton.jit
def _dx_resident_kernel(
    g_ptr, stride_gb, stride_gi, stride_gj, stride_gr,
    w_ptr, stride_wr, stride_wk,
    dx_ptr, stride_db, stride_dr, stride_dc,
    B, NI, N, R,
    C: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """dX for tiles pid // n_k, + lanes, ...: each program keeps one column block of W (all R rows) on chip."""
    n_k: tl.constexpr = C * C // BLOCK_K
    pid = tl.program_id(0)
    blk_k = pid % n_k
    lanes = tl.num_programs(0) // n_k
    offs_k = blk_k * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < R
    w = tl.load(w_ptr + offs_r[:, None] * stride_wr + offs_k[None, :] * stride_wk, mask=r_ok[:, None], other=0.0)
    col = (offs_k // C) * stride_dr + (offs_k % C) * stride_dc  # [BLOCK_K]
    n_i = tl.cdiv(NI, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    pair = tl.arange(0, BLOCK_I * BLOCK_J)
    for t in range(pid // n_k, B * n_i * n_j, lanes):
        b = (t // (n_i * n_j)).to(tl.int64)
        blk_i = (t // n_j) % n_i
        blk_j = t % n_j
        i = blk_i * BLOCK_I + pair // BLOCK_J  # [BLOCK_I*BLOCK_J]
        j = blk_j * BLOCK_J + pair % BLOCK_J
        ok = (i < NI) & (j < N)
        g = tl.load(g_ptr + (b * stride_gb + i.to(tl.int64) * stride_gi + j.to(tl.int64) * stride_gj)[:, None]
                    + offs_r[None, :] * stride_gr, mask=ok[:, None] & r_ok[None, :], other=0.0)  # [BI*BJ, BLOCK_R]
        acc = tl.dot(g, w)  # [BI*BJ, BLOCK_K]
        d_off = (b * stride_db + i.to(tl.int64) * C * stride_dr + j.to(tl.int64) * C * stride_dc)[:, None] + col[None, :]
        tl.store(dx_ptr + d_off, acc.to(dx_ptr.dtype.element_ty), mask=ok[:, None])


def dx_resident(gs, w, c, bi, bj, bk, warps, stages, per_sm):
    B, n, N, R = gs.shape
    dx = torch.empty(B, n * c, N * c, dtype=gs.dtype, device=gs.device)
    n_k = c * c // bk
    tiles = B * cdiv(n, bi) * cdiv(N, bj)
    sms = 3 if interpreting() else multiprocessors(gs.device)
    lanes = max(1, min(tiles, sms * per_sm // n_k))
    cached_launch(_dx_resident_kernel)((lanes * n_k,), gs, *gs.stride(), w, *w.stride(), dx, *dx.stride(), B, n, N, R,
                                       C=c, BLOCK_I=bi, BLOCK_J=bj, BLOCK_K=bk, BLOCK_R=max(16, triton.next_power_of_2(R)),
                                       num_warps=warps, num_stages=stages)
    return dx


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")


def main(check):
    dev = "cpu" if check else "cuda"
    torch.manual_seed(0)
    B, n, N, R, c, S, D = (1, 5, 7, 24, 8, 3, 16) if check else (1, 192, 384, 128, 32, 512, 256)
    gs = torch.randn(B, n, N, R, device=dev, dtype=torch.float16 if check else torch.bfloat16)
    w = (torch.randn(R, c * c, device=dev) / 16).to(gs.dtype)
    ref = (gs.double().reshape(-1, R) @ w.double()).view(B, n, N, c, c).transpose(2, 3).reshape(B, n * c, N * c)
    if check:
        for cfg in ((2, 4, 64, 4, 2, 1), (4, 2, 32, 4, 1, 2)):
            got = dx_resident(gs, w, c, *cfg)
            print("resident", cfg, (got.double() - ref).abs().max().item())
        return
    gb = lambda ms, nbytes: nbytes / ms / 1e6  # noqa: E731
    xbytes = B * n * c * N * c * 2
    print(f"dX: (B, n*c, N*c) = ({B}, {n * c}, {N * c}), {xbytes / 1e6:.0f} MB")
    t = bench(lambda: opm.outer_product_grad(gs, w, c))
    print(f"  package (autotuned {opm._tuned_dx().best_config}): {t:.4f} ms, {gb(t, xbytes):.0f} GB/s")
    base = opm.outer_product_grad(gs, w, c)
    print(f"  package err {(base.double() - ref).abs().max().item():.3g}")
    sms = multiprocessors(gs.device)
    for cfg in opm._dx_prune(opm._dx_configs(), {}, C=c, BLOCK_R=R):
        def run(cfg=cfg):
            dx = torch.empty(B, n * c, N * c, dtype=gs.dtype, device=dev)
            k = cfg.kwargs
            n_k = c * c // k["BLOCK_K"]
            tiles = B * cdiv(n, k["BLOCK_I"]) * cdiv(N, k["BLOCK_J"])
            grid = (n_k * max(1, min(tiles, sms * k["PROGRAMS_PER_SM"] // n_k)),)
            cached_launch(opm._opm_dx_kernel)(grid, gs, *gs.stride(), w, *w.stride(), dx, *dx.stride(), B, n, N, R, C=c,
                                              BLOCK_R=R, **k, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            return dx
        err = (run().double() - ref).abs().max().item()
        t = bench(run)
        print(f"  config {cfg}: {t:.4f} ms, {gb(t, xbytes):.0f} GB/s, err {err:.3g}")
    if "--resident" in sys.argv:
        for cfg in ((4, 32, 128, 8, 3, 2), (8, 16, 128, 8, 3, 2), (4, 32, 128, 8, 2, 2), (4, 32, 128, 8, 3, 1),
                    (4, 32, 256, 8, 2, 1), (2, 32, 128, 4, 3, 3), (4, 16, 128, 4, 3, 3), (4, 32, 64, 4, 3, 4),
                    (8, 16, 256, 8, 2, 1), (4, 16, 256, 8, 3, 2)):
            try:
                got = dx_resident(gs, w, c, *cfg)
                err = (got.double() - ref).abs().max().item()
                t = bench(lambda cfg=cfg: dx_resident(gs, w, c, *cfg))
                print(f"  resident (BI, BJ, BK, warps, stages, per_sm) {cfg}: {t:.4f} ms, {gb(t, xbytes):.0f} GB/s, "
                      f"err {err:.3g}")
            except Exception as e:  # a config that does not compile is a finding
                print(f"  resident {cfg}: {type(e).__name__} {str(e)[:200]}")
    x = torch.randn(B, n * c, N * c, device=dev, dtype=torch.bfloat16)
    print(f"dW: reads X {xbytes / 1e6:.0f} MB and Gs {gs.numel() * 2 / 1e6:.0f} MB")
    t = bench(lambda: opm.outer_product_weight_grad(gs, x, c))
    print(f"  package (autotuned {opm._tuned_dw().best_config}, splits {opm._dw_splits(gs.device)}): {t:.4f} ms, "
          f"{gb(t, xbytes):.0f} GB/s of X")
    for cfg in opm._dw_configs():
        for splits in (16, 22, 33):
            def run(cfg=cfg, splits=splits):
                ws = torch.empty(splits, R, c * c, dtype=torch.float32, device=dev)
                k = cfg.kwargs
                grid = (cdiv(R, k["BLOCK_R"]) * (c * c // k["BLOCK_K"]), splits)
                cached_launch(opm._opm_dw_kernel)(grid, gs, *gs.stride(), x, *x.stride(), ws, ws.stride(0), ws.stride(1),
                                                  n, N, R, B * n * N, C=c, **k, num_warps=cfg.num_warps,
                                                  num_stages=cfg.num_stages)
                return ws
            try:
                t = bench(run)
                print(f"  config {cfg} splits {splits}: {t:.4f} ms, {gb(t, xbytes):.0f} GB/s of X")
            except Exception as e:
                print(f"  config {cfg} splits {splits}: {type(e).__name__} {str(e)[:200]}")


if __name__ == "__main__":
    main("--check" in sys.argv)
