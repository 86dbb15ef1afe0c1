"""Does Triton's automatic warp specialization (`tl.range(..., warp_specialize=True)`) act on sm_90? Compiled
offline (no GPU; run with triton 3.6, the device's version, first on the path): a persistent bf16 matmul whose tile
loop asks for it, its operands through pointers or tensor descriptors (TMA), at several warps and tiles. Prints
how many `ttg.warp_specialize` regions the TTGIR holds and the warps the kernel ends up with (session 17)."""
import os

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402


@triton.jit
def mm_ptr(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), n_m * n_n, tl.num_programs(0), warp_specialize=True):
        rm = (tile // n_n) * BM + tl.arange(0, BM)
        rn = (tile % n_n) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            acc = tl.dot(tl.load(a_ptr + rm[:, None] * K + rk[None, :]), tl.load(b_ptr + rk[:, None] * N + rn[None, :]),
                         acc)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


@triton.jit
def mm_desc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), n_m * n_n, tl.num_programs(0), warp_specialize=True):
        pm, pn = tile // n_n, tile % n_n
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_d.load([pm * BM, k]), b_d.load([k, pn * BN]), acc)
        c_d.store([pm * BM, pn * BN], acc.to(tl.bfloat16))


SIG = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32",
       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
print(f"triton {triton.__version__}")
for kernel, warps, bm, bn, stages in ((mm_ptr, 4, 128, 128, 3), (mm_ptr, 8, 128, 256, 3), (mm_desc, 8, 128, 256, 2),
                                      (mm_desc, 8, 128, 128, 3), (mm_desc, 4, 64, 256, 3), (mm_desc, 4, 128, 128, 3),
                                      (mm_desc, 4, 128, 256, 3)):
    src = triton.compiler.ASTSource(fn=kernel, signature=SIG, constexprs={"BM": bm, "BN": bn, "BK": 64})
    try:
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        print(f"{kernel.__name__} {warps} warps {bm}x{bn} {stages} stages: {c.asm['ttgir'].count('ttg.warp_specialize')}"
              f" warp_specialize regions, {c.metadata.num_warps} warps, {c.metadata.shared / 1024:.0f} KiB shared")
    except Exception as err:
        print(f"{kernel.__name__} {warps} warps {bm}x{bn} {stages} stages: fails ({str(err).splitlines()[0][:80]})")
