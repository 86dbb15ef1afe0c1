"""Candidate designs of the two passes behind triangle multiplication's forward and the transition's (issue 76's
rebuild), timed beside the library's kernels in one run, each checked against a PyTorch reference first:

- the LayerNorm + gated projection pass (`stages.layer_norm_glu`): x (M, D) -> h = act(a, b) * mask, a and b =
  LayerNorm(x) W^T, for triangle multiplication's gates (h as channel planes, `sigmoid`) and the transition's
  hidden rows (`swiglu`);
- triangle multiplication's output pass (`ops.triangle_multiplication.op.gated_output`): p_out(LN_out(t)) *
  sigmoid(g_out(LN_in(z))).

The designs: whole rows a program with the weight tiles and the stores through tensor descriptors (TMA on sm_90),
the rows loaded plainly or by a descriptor; and persistent programs (a few a multiprocessor) stepping over the row
tiles with the next tile's loads pipelined. Floors count the bytes each pass must move at the card's copy rate,
measured at the start of the run (a device-to-device copy of 1 GiB, bytes read and written).

    python benchmarks/glu_designs.py [--cases trimul-768,trans-768,trimul-2048] [--output]
    TRITON_INTERPRET=1 python benchmarks/glu_designs.py --tiny  # a CPU check of the kernels (no times)
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from evofuse._runtime import interpreting, multiprocessors
from evofuse.ops.triangle_multiplication.op import gated_output
from evofuse.stages.layer_norm_glu import layer_norm_glu

# name: (M rows, D, H, activation, planes)
CASES = {"trimul-768": (768 * 768, 128, 256, "sigmoid", True), "trimul-2048": (2048 * 2048, 128, 256, "sigmoid", True),
         "trans-384": (384 * 384, 128, 512, "swiglu", False), "trans-768": (768 * 768, 128, 512, "swiglu", False)}
# (BLOCK_M, BLOCK_N, num_warps, num_stages, programs a multiprocessor: 0 for one a row tile)
TILES = ((64, 64, 4, 2, 0), (64, 64, 4, 3, 0), (128, 64, 8, 2, 0), (128, 64, 8, 3, 0), (128, 128, 8, 2, 0),
         (64, 128, 4, 2, 0), (256, 64, 8, 2, 0), (64, 64, 4, 2, 2), (64, 64, 4, 2, 3), (128, 64, 8, 2, 1),
         (128, 64, 8, 2, 2), (64, 128, 4, 2, 2), (128, 128, 8, 2, 1))
TINY = ((16, 16, 1, 1, 0), (16, 16, 1, 2, 1))


@triton.jit
def _activation(a, b, ACT: tl.constexpr):
    if ACT == "swiglu":
        return a * tl.sigmoid(a) * b
    return a * tl.sigmoid(b)


@triton.jit
def _normalized(x, lnw, lnb, eps, D: tl.constexpr, dtype: tl.constexpr):
    """LayerNorm of rows x [BLOCK_M, D] float32, rounded to dtype."""
    mean = tl.sum(x, axis=1) / D
    xc = x - mean[:, None]
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / D + eps)
    return (xc * rstd[:, None] * lnw[None, :] + lnb[None, :]).to(dtype)


@triton.jit
def glu_kernel(x_ptr, x_desc, lnw_ptr, lnb_ptr, w_desc, h_desc, m_ptr, M, eps, D: tl.constexpr, H: tl.constexpr,
               ACT: tl.constexpr, HAS_MASK: tl.constexpr, PLANES: tl.constexpr, X_DESC: tl.constexpr,
               PERSISTENT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """h = act(a, b) * mask for BLOCK_M rows a tile: rows (M, D), weight (2H, D) a's rows then b's, h (M, H) or, with
    PLANES, (H, M). PERSISTENT: programs step over the tiles (the weight tiles' loads an inner static loop)."""
    offs_d = tl.arange(0, D)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    lnb = tl.load(lnb_ptr + offs_d).to(tl.float32)
    dtype = h_desc.dtype
    n_tiles = tl.cdiv(M, BLOCK_M)
    step = tl.num_programs(0) if PERSISTENT else n_tiles
    for tile in tl.range(tl.program_id(0), n_tiles, step, num_stages=STAGES if PERSISTENT else 1):
        m0 = tile * BLOCK_M
        offs_m = m0 + tl.arange(0, BLOCK_M)
        if X_DESC:
            x = x_desc.load([m0, 0]).to(tl.float32)
        else:
            x = tl.load(x_ptr + offs_m.to(tl.int64)[:, None] * D + offs_d[None, :], mask=(offs_m < M)[:, None],
                        other=0.0).to(tl.float32)
        xn = _normalized(x, lnw, lnb, eps, D, dtype)
        if HAS_MASK:
            rm = tl.load(m_ptr + offs_m, mask=offs_m < M, other=0).to(tl.float32)
        for n0 in tl.range(0, H, BLOCK_N, num_stages=1 if PERSISTENT else STAGES):
            wa = w_desc.load([n0, 0])  # [BLOCK_N, D]
            wb = w_desc.load([H + n0, 0])
            if PLANES:
                a = tl.dot(wa, tl.trans(xn)).to(dtype).to(tl.float32)  # [BLOCK_N, BLOCK_M]
                b = tl.dot(wb, tl.trans(xn)).to(dtype).to(tl.float32)
                h = _activation(a, b, ACT)
                if HAS_MASK:
                    h = h * rm[None, :]
                h_desc.store([n0, m0], h.to(dtype))
            else:
                a = tl.dot(xn, tl.trans(wa)).to(dtype).to(tl.float32)  # [BLOCK_M, BLOCK_N]
                b = tl.dot(xn, tl.trans(wb)).to(dtype).to(tl.float32)
                h = _activation(a, b, ACT)
                if HAS_MASK:
                    h = h * rm[:, None]
                h_desc.store([m0, n0], h.to(dtype))


@triton.jit
def output_kernel(t_desc, z_desc, lno_w, lno_b, lni_w, lni_b, wp_desc, wg_desc, o_desc, M, eps, C: tl.constexpr,
                  CZ: tl.constexpr, PERSISTENT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  STAGES: tl.constexpr):
    """out = p_out(LN_out(t)) * sigmoid(g_out(LN_in(z))) for BLOCK_M pairs a tile: t (C, M) channel planes, z (M,
    CZ) rows, out (M, CZ) rows, p_out's weight (CZ, C), g_out's (CZ, CZ)."""
    dtype = o_desc.dtype
    offs_c, offs_z = tl.arange(0, C), tl.arange(0, CZ)
    wo, bo = tl.load(lno_w + offs_c).to(tl.float32), tl.load(lno_b + offs_c).to(tl.float32)
    wi, bi = tl.load(lni_w + offs_z).to(tl.float32), tl.load(lni_b + offs_z).to(tl.float32)
    n_tiles = tl.cdiv(M, BLOCK_M)
    step = tl.num_programs(0) if PERSISTENT else n_tiles
    for tile in tl.range(tl.program_id(0), n_tiles, step, num_stages=STAGES):
        m0 = tile * BLOCK_M
        tn = _normalized(tl.trans(t_desc.load([0, m0]).to(tl.float32)), wo, bo, eps, C, dtype)  # [BLOCK_M, C]
        zn = _normalized(z_desc.load([m0, 0]).to(tl.float32), wi, bi, eps, CZ, dtype)  # [BLOCK_M, CZ]
        for s in tl.static_range(CZ // BLOCK_N):
            y = tl.dot(tn, tl.trans(wp_desc.load([s * BLOCK_N, 0]))).to(dtype).to(tl.float32)
            g = tl.dot(zn, tl.trans(wg_desc.load([s * BLOCK_N, 0]))).to(dtype).to(tl.float32)
            o_desc.store([m0, s * BLOCK_N], (y * tl.sigmoid(g)).to(dtype))


def _grid(M: int, block_m: int, per_sm: int, device: torch.device) -> tuple[int]:
    tiles = triton.cdiv(M, block_m)
    return (tiles if per_sm == 0 else min(tiles, per_sm * multiprocessors(device)),)


def run_glu(x, lnw, lnb, w, mask, h, act, planes, tile, x_desc):
    """The design's pass into h ((H, M) planes' view or (M, H) rows) with `tile`."""
    (M, D), H = x.shape, w.shape[0] // 2
    bm, bn, warps, stages, per_sm = tile
    glu_kernel[_grid(M, bm, per_sm, x.device)](
        x, TensorDescriptor.from_tensor(x, [bm, D]), lnw, lnb, TensorDescriptor.from_tensor(w, [bn, D]),
        TensorDescriptor.from_tensor(h, [bn, bm] if planes else [bm, bn]), x if mask is None else mask, M, 1e-5,
        D=D, H=H, ACT=act, HAS_MASK=mask is not None, PLANES=planes, X_DESC=x_desc, PERSISTENT=per_sm > 0,
        BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, num_warps=warps, num_stages=stages)


def run_output(t, z, lno_w, lno_b, lni_w, lni_b, wp, wg, out, tile):
    (C, M), CZ = t.shape, z.shape[1]
    bm, bn, warps, stages, per_sm = tile
    output_kernel[_grid(M, bm, per_sm, t.device)](
        TensorDescriptor.from_tensor(t, [C, bm]), TensorDescriptor.from_tensor(z, [bm, CZ]), lno_w, lno_b, lni_w,
        lni_b, TensorDescriptor.from_tensor(wp, [bn, C]), TensorDescriptor.from_tensor(wg, [bn, CZ]),
        TensorDescriptor.from_tensor(out, [bm, bn]), M, 1e-5, C=C, CZ=CZ, PERSISTENT=per_sm > 0, BLOCK_M=bm,
        BLOCK_N=bn, STAGES=stages, num_warps=warps, num_stages=stages)


def copy_rate(device) -> float:
    """Bytes a second, read and written, of a device-to-device copy of 1 GiB (1.0 in the interpreter: no times)."""
    if interpreting():
        return 1.0
    x = torch.empty(2**29, dtype=torch.float16, device=device)
    y = torch.empty_like(x)
    return 2 * x.nbytes / (triton.testing.do_bench(lambda: y.copy_(x), warmup=5, rep=20) / 1e3)


def _ms(fn) -> float:
    fn()
    return float("nan") if interpreting() else triton.testing.do_bench(fn, warmup=10, rep=30)


def _layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype)


def _report(label, fn, got, want, floor_ms) -> float:
    """Times fn (which writes got), prints the row, and returns got's largest error against want (inf where the
    design failed: a tile that does not compile is reported and the run goes on)."""
    try:
        ms = _ms(fn)
    except Exception as e:  # noqa: BLE001
        print(f"  {label:<44} {type(e).__name__}: {str(e)[:160]}", flush=True)
        return float("inf")
    error = (got.float() - want.float()).abs().max().item()
    print(f"  {label:<44} {ms:8.4f} ms  {floor_ms / ms:5.0%} of the floor's rate  max error {error:.3g}", flush=True)
    return error


def glu_case(name, M, D, H, act, planes, tiles, device, dtype, rate) -> list[float]:
    """The LayerNorm + gated projection pass: the library's and each design's errors, in that order; rate: the copy
    rate (bytes a second) its floor takes."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, D, generator=g).to(device, dtype)
    lnw, lnb = (1 + 0.1 * torch.randn(D, generator=g)).to(device, dtype), (0.1 * torch.randn(D, generator=g)).to(
        device, dtype)
    w = (torch.randn(2 * H, D, generator=g) / D ** 0.5).to(device, dtype)
    mask = (torch.rand(M, generator=g) > 0.1).to(device, dtype) if planes else None
    ab = (_layer_norm(x, lnw, lnb) @ w.t()).float()
    a, b = ab[:, :H], ab[:, H:]
    want = (a * torch.sigmoid(a) * b if act == "swiglu" else a * torch.sigmoid(b)) * (1 if mask is None else mask[:, None])
    floor_ms = ((M * D + M * H) * x.element_size() + (M * mask.element_size() if planes else 0)) / rate * 1e3
    print(f"== {name}: M {M}, D {D}, H {H}, {act}, {'planes' if planes else 'rows'}; floor {floor_ms:.3f} ms",
          flush=True)

    def new_h():  # (the library's layout: planes as the transposed view of (H, M))
        return torch.empty(H, M, device=device, dtype=dtype).t() if planes else torch.empty(M, H, device=device,
                                                                                            dtype=dtype)
    h = new_h()
    errors = [_report("layer_norm_glu", lambda: layer_norm_glu(x, lnw, lnb, w, None, mask, h, act, "default"), h,
                      want, floor_ms)]
    for tile in tiles:
        for x_desc in (False, True):
            h = new_h()
            target = h.t() if planes else h
            errors.append(_report(f"descriptors {tile} x by {'descriptor' if x_desc else 'loads'}",
                                  lambda: run_glu(x, lnw, lnb, w, mask, target, act, planes, tile, x_desc), h, want,
                                  floor_ms))
    return errors


def output_case(N, C, tiles, device, dtype, rate) -> list[float]:
    """Triangle multiplication's output pass: the library's and each design's errors, in that order; rate as
    `glu_case`'s."""
    M = N * N
    g = torch.Generator().manual_seed(0)
    t = torch.randn(C, 1, N, N, generator=g).to(device, dtype)
    z = torch.randn(1, N, N, C, generator=g).to(device, dtype)
    lno_w, lno_b, lni_w, lni_b = ((1 + 0.1 * torch.randn(C, generator=g)).to(device, dtype) for _ in range(4))
    wp, wg = ((torch.randn(C, C, generator=g) / C ** 0.5).to(device, dtype) for _ in range(2))
    want = ((_layer_norm(t.reshape(C, M).t(), lno_w, lno_b) @ wp.t()).float()
            * torch.sigmoid((_layer_norm(z.reshape(M, C), lni_w, lni_b) @ wg.t()).float()))
    floor_ms = 3 * M * C * t.element_size() / rate * 1e3
    print(f"== output N {N}, c = c_z = {C}: floor {floor_ms:.3f} ms", flush=True)
    out = torch.empty(1, N, N, C, device=device, dtype=dtype)
    errors = [_report("gated_output", lambda: gated_output(t, z, lni_w, lni_b, wg, None, lno_w, lno_b, wp, None,
                                                           "default", out), out.view(M, C), want, floor_ms)]
    for tile in tiles:
        out = torch.empty(M, C, device=device, dtype=dtype)
        errors.append(_report(f"descriptors {tile}", lambda: run_output(t.view(C, M), z.view(M, C), lno_w, lno_b,
                                                                        lni_w, lni_b, wp, wg, out, tile), out, want,
                              floor_ms))
    return errors


def main(argv=None) -> list[float]:
    """Every pass's errors against its reference, in the order printed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="trimul-768,trans-768,trimul-2048,trans-384")
    parser.add_argument("--output", default="768,2048", help="N of the output pass's rows ('' for none)")
    parser.add_argument("--tiny", action="store_true", help="small shapes and tiles (Triton's interpreter)")
    args = parser.parse_args(argv)
    device = "cpu" if interpreting() else "cuda"
    dtype = torch.float16 if interpreting() else torch.bfloat16  # (the interpreter's bf16 products are unreliable)
    if args.tiny:
        return (glu_case("trimul", 64, 32, 32, "sigmoid", True, TINY, device, dtype, 1.0)
                + glu_case("trans", 48, 32, 64, "swiglu", False, TINY, device, dtype, 1.0)
                + output_case(8, 32, TINY, device, dtype, 1.0))
    rate = copy_rate(device)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__,
          f"copy {rate / 1e12:.2f} TB/s", flush=True)
    errors = []
    for name in filter(None, args.cases.split(",")):
        errors += glu_case(name, *CASES[name], TILES, device, dtype, rate)
    for N in filter(None, args.output.split(",")):
        errors += output_case(int(N), 128, TILES, device, dtype, rate)
    return errors


if __name__ == "__main__":
    main()
