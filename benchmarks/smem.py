"""Shared memory and registers of the fused projection's launches, by compiling for sm_90 locally (no GPU).

python3 benchmarks/smem.py: for each (dtype, D, K), the tiles `_tiles` picks and what they need.
"""

import torch
import triton
from triton.backends.compiler import GPUTarget

from evofuse.ops.layer_norm_linear import _ln_linear_kernel, _tiles

POINTERS = ("x_ptr", "lnw_ptr", "lnb_ptr", "w_ptr", "bias_ptr", "y_ptr")


def compiled(kernel, types, consts, num_warps, num_stages):
    sig = {n: "constexpr" if n in consts else types.get(n, "i32") for n in kernel.arg_names}
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages}).metadata


if __name__ == "__main__":
    for name in ("bf16",):
        for D, K in ((64, 64), (128, 64), (256, 64), (256, 1024), (512, 64), (512, 2048)):
            rows, block_d, block_k = _tiles(D, K)
            warps = 4
            types = {n: f"*{name}" for n in POINTERS} | {"m_ptr": "*fp32", "eps": "fp32"}
            consts = dict(SLOT=K, HAS_LN=True, HAS_MASK=True, BLOCK_ROWS=rows, BLOCK_D=block_d, BLOCK_K=block_k)
            meta = compiled(_ln_linear_kernel, types, consts, warps, 2)
            print(f"{name} D={D} K={K}: rows {rows} block_k {block_k} warps {warps}: "
                  f"{meta.shared / 1024:.0f} KiB shared")
