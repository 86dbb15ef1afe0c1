"""Can Triton 3.6's automatic warp specialization take the Outer Product Mean's tile loop on sm_90? Compiled offline
(triton 3.6 first on the path, no GPU): a one-pass outer-product tile loop (a and b through tensor descriptors,
num_warps=4, `tl.range(..., warp_specialize=True)`) with the X tile stored as it is, and with the multi-pass
kernel's kind of epilogue instead (X rearranged to [(i j), (p q)], cast, multiplied by out_proj's row blocks).
Prints the `ttg.warp_specialize` regions, warps and shared memory, or the failure (session 17; the two-pass form
with its workspace fails the same way)."""
import os

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402


@triton.jit
def opm_ws1(a_ptr, b_ptr, w_ptr, o_ptr, S, N, R: tl.constexpr, C: tl.constexpr,
            BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_R: tl.constexpr, EPI: tl.constexpr):
    PAIRS: tl.constexpr = BLOCK_I * BLOCK_J
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[S, N * C], strides=[N * C, 1], block_shape=[BLOCK_S, BLOCK_I * C])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[S, N * C], strides=[N * C, 1], block_shape=[BLOCK_S, BLOCK_J * C])
    n_i = tl.cdiv(N, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    pair = tl.arange(0, PAIRS)
    for tile in tl.range(tl.program_id(0), n_i * n_j, tl.num_programs(0), warp_specialize=True):
        bi = tile // n_j
        bj = tile % n_j
        acc = tl.zeros((BLOCK_I * C, BLOCK_J * C), tl.float32)
        for s0 in range(0, S, BLOCK_S):
            acc = tl.dot(tl.trans(a_d.load([s0, bi * BLOCK_I * C])), b_d.load([s0, bj * BLOCK_J * C]), acc)
        oi = bi * BLOCK_I + pair // BLOCK_J
        oj = bj * BLOCK_J + pair % BLOCK_J
        if EPI:
            x = tl.reshape(tl.permute(tl.reshape(acc, (BLOCK_I, C, BLOCK_J, C)), (0, 2, 1, 3)), (PAIRS, C * C))
            x_t = tl.trans(x.to(tl.bfloat16))
            for r0 in tl.static_range(0, R, BLOCK_R):
                offs_r = r0 + tl.arange(0, BLOCK_R)
                w_r = tl.load(w_ptr + offs_r[:, None] * (C * C) + tl.arange(0, C * C)[None, :])
                sums = tl.dot(w_r, x_t)
                tl.store(o_ptr + (oi * N + oj)[None, :] * R + offs_r[:, None], sums.to(tl.bfloat16))
        else:
            rows = bi * BLOCK_I * C + tl.arange(0, BLOCK_I * C)
            cols = bj * BLOCK_J * C + tl.arange(0, BLOCK_J * C)
            tl.store(o_ptr + rows[:, None] * (N * C) + cols[None, :], acc.to(tl.bfloat16))

print(f"triton {triton.__version__}")
sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "w_ptr": "*bf16", "o_ptr": "*bf16", "S": "i32", "N": "i32"}
for bi, bj, epi in ((4, 4, False), (4, 4, True), (4, 8, True)):
    consts = dict(R=128, C=32, BLOCK_I=bi, BLOCK_J=bj, BLOCK_S=64, BLOCK_R=64, EPI=epi)
    s_ = dict(sig) | {k: "constexpr" for k in consts}
    src = triton.compiler.ASTSource(fn=opm_ws1, signature=s_, constexprs=consts,
                                    attrs={(4,): [["tt.divisibility", 16]], (5,): [["tt.divisibility", 16]]})
    try:
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
        print(f"{bi * 32}x{bj * 32} tile, epilogue product {epi}: {c.asm['ttgir'].count('ttg.warp_specialize')} warp_specialize "
              f"regions, {c.metadata.num_warps} warps, {c.metadata.shared // 1024} KiB shared", flush=True)
    except Exception as e:  # a compile failure is the finding
        print(f"{bi * 32}x{bj * 32} tile, epilogue product {epi}: fails ({str(e).splitlines()[0][:60]})", flush=True)
