"""Matrix products for the operations' float32 paths: three TF32 products on tensor cores (Triton's "tf32x3": each
operand's high and low TF32 halves, ~1e-7 relative, within float32's contract of 1e-5) in place of cuBLAS's IEEE
float32 products, which run on the CUDA cores at a fraction of the tensor cores' rate. 16-bit operands, and float32 at
the "fast" precision, take cuBLAS (`torch.matmul`; "fast" at whatever TF32 setting the caller has).

`matmul(a, b)` is called inside the operations' ops and backwards; traced (torch.compile, torch.export) it goes
through the custom op `evofuse::matmul`, eagerly the same function without the dispatcher.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .._runtime import OPERAND_SHARED_BYTES, autotuned, bucket, cdiv, custom_op, next_pow2, traced, tuning_candidates


@triton.jit
def _matmul_kernel(
    a_ptr, stride_ab, stride_am, stride_ak,  # a: (batch, M, K), any strides
    b_ptr, stride_bb, stride_bk, stride_bn,  # b: (batch, K, N), any strides
    c_ptr, stride_cb, stride_cm,  # out: (batch, M, N), unit stride along N
    M, N, K, alpha,
    M_BUCKET, N_BUCKET, K_BUCKET,  # autotuning key only
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # row blocks that share b's column blocks in L2 (programs grouped as the Triton tutorial)
):
    """alpha * a @ b for a [BLOCK_M, BLOCK_N] tile of one batch element, float32 accumulated over K in steps of
    BLOCK_K, three TF32 products a step."""
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * blocks_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    m_ok = offs_m < M
    n_ok = offs_n < N
    a_rows = a_ptr + batch * stride_ab + offs_m.to(tl.int64)[:, None] * stride_am  # [BLOCK_M, 1]
    b_cols = b_ptr + batch * stride_bb + offs_n.to(tl.int64)[None, :] * stride_bn  # [1, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        a = tl.load(a_rows + offs_k.to(tl.int64)[None, :] * stride_ak, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_cols + offs_k.to(tl.int64)[:, None] * stride_bk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")  # [BLOCK_M, BLOCK_N]
    out = c_ptr + batch * stride_cb + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(out, acc * alpha, mask=m_ok[:, None] & n_ok[None, :])


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=warps,
                          num_stages=stages) for bm, bn, bk, warps, stages in tiles]


# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of float32 tiles; the first that fits is the default where
# autotuning is off
CONFIGS = _configs(((128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (64, 64, 32, 4, 4),
                    (128, 128, 16, 8, 4), (64, 64, 16, 4, 2), (32, 64, 32, 4, 2), (16, 32, 32, 4, 2)))
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}, num_warps=1,
                                   num_stages=1)
MAX_BATCH = 65535  # batch elements one launch takes (the grid's second dimension)


def fits(config: triton.Config, M: int, N: int, K: int) -> bool:
    bm, bn, bk = (config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    if bm > max(16, next_pow2(M)) or bn > max(16, next_pow2(N)) or bk > max(16, next_pow2(K)):
        return False
    return (bm + bn) * bk * 4 * max(1, config.num_stages) <= OPERAND_SHARED_BYTES


def _prune(configs, named_args, **kwargs):
    return tuning_candidates(CONFIGS, lambda c: fits(c, named_args["M"], named_args["N"], named_args["K"]),
                             INTERPRETER_CONFIG)


KEY = ["M_BUCKET", "N_BUCKET", "K_BUCKET"]  # what the autotuner's choice is kept by


def uses_tensor_cores(dtype: torch.dtype, precision: str) -> bool:
    """Whether `matmul` takes the three TF32 products (float32 at the default precision) rather than cuBLAS."""
    return dtype == torch.float32 and precision == "default"


def matmul_impl(a: Tensor, b: Tensor, alpha: float) -> Tensor:
    """alpha * a @ b by three TF32 products for float32 a (..., M, K) and b (..., K, N), any strides, batch
    dimensions alike (or b without them, shared); returns (..., M, N) contiguous."""
    out = a.new_empty(*a.shape[:-1], b.shape[-1])
    return matmul_into(a, b, out, alpha)


def matmul_into(a: Tensor, b: Tensor, out: Tensor, alpha: float = 1.0) -> Tensor:
    """`matmul_impl` written into out (..., M, N) whose last dimension has unit stride and whose batch dimensions
    fold into one (an eager caller's buffer; traced calls take `matmul`); returns out."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = a.shape[:-2].numel()
    if K == 0 or batch * M * N == 0:
        return out.zero_()
    a3, out3 = a.reshape(batch, M, K), out.view(batch, M, N)
    b3 = b.reshape(batch, K, N) if b.dim() > 2 else b[None]
    stride_bb = b3.stride(0) if b.dim() > 2 else 0  # (a shared b: every batch element reads it)
    for b0 in range(0, batch, MAX_BATCH):
        n = min(MAX_BATCH, batch - b0)
        chunk_a, chunk_b, chunk_out = a3[b0:b0 + n], b3[b0:b0 + n] if stride_bb else b3, out3[b0:b0 + n]

        def grid(meta):
            return cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]), n

        autotuned(_matmul_kernel, lambda: CONFIGS, KEY, _prune)[grid](
            chunk_a, *chunk_a.stride(), chunk_b, stride_bb, *chunk_b.stride()[1:], chunk_out, chunk_out.stride(0),
            chunk_out.stride(1), M, N, K, float(alpha), bucket(M), bucket(N), bucket(K))
    return out


def _matmul_fake(a, b, alpha):
    return a.new_empty(*a.shape[:-1], b.shape[-1])


matmul_op = custom_op("matmul", matmul_impl, _matmul_fake)


def matmul(a: Tensor, b: Tensor, precision: str = "default", alpha: float = 1.0) -> Tensor:
    """alpha * a @ b: float32 at the default precision by `matmul_impl` (through `evofuse::matmul` when traced,
    else directly), otherwise by `torch.matmul`."""
    if not uses_tensor_cores(a.dtype, precision):
        out = torch.matmul(a, b)
        return out if alpha == 1.0 else out * alpha
    return (matmul_op if traced(a) else matmul_impl)(a, b, float(alpha))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, precision: str = "default") -> Tensor:
    """x @ weight^T + bias for x (..., K), weight (N, K), bias (N,) or None, as `matmul` computes products:
    `F.linear` unless float32 at the default precision."""
    if not uses_tensor_cores(x.dtype, precision):
        return torch.nn.functional.linear(x, weight, bias)
    out = matmul(x.reshape(-1, x.shape[-1]), weight.t(), precision)
    return (out if bias is None else out + bias).view(*x.shape[:-1], weight.shape[0])


def float32_products(a: Tensor, b: Tensor, precision: str) -> Tensor:
    """a @ b for (n, M, K) and (n, K, N) of one dtype, written in float32 (n, M, N): 16-bit products accumulate
    in float32 and stay there (cuBLAS's out_dtype on CUDA; PyTorch's CPU bmm, which Triton's interpreter runs
    on, has none, so there the operands are widened first: the same exact products); float32 ones by `matmul`."""
    if a.dtype == torch.float32:
        return matmul(a, b, precision)
    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())
