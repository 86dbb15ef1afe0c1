"""The transition's backward through tensor descriptors (TMA, sm_90 and later), for many 16-bit rows: a program holds
whole rows, normalizes them once, and steps through the hidden channels with the weight tiles pipelined into shared
memory; a and b are made again, the hidden rows' gradient dh = (g mask) W_out taken on chip, and from them the
pre-activations' gradient, which also meets W_in on chip: the LayerNorm output's gradient is summed in float32 over
the hidden channels and the LayerNorm's backward taken at the end of the program. What leaves the chip is the
pre-activations' gradient and the normalized rows (for W_in's gradient, by cuBLAS), the hidden rows (for W_out's), x's
gradient and each program's sums for the LayerNorm's parameters. The pointer kernel (`kernels.py`) and
`layer_norm_linear_backward` take every other call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.tools.tensor_descriptor import TensorDescriptor

from ..._runtime import (
    OPERAND_SHARED_BYTES,
    autotuned,
    bucket,
    capability,
    cdiv,
    custom_op,
    distributed,
    interpreting,
    tuning_candidates,
)
from ...reference import LAYER_NORM_EPS
from ...stages.layer_norm_backward import layer_norm_pass
from ...stages.layer_norm_glu_tma import addressable, descriptor_strides
from ...stages.layer_norm_rows import centred_rows
from ...stages.matmul import matmul
from .kernels import core_backward


@triton.jit
def transition_backward_tma_kernel(
    x_desc,  # x (M, D), blocks [BLOCK_M, D]
    lnw_ptr, lnb_ptr,  # the LayerNorm's weight and bias (D,)
    w_desc,  # the input projection (K, D), blocks [BLOCK_N, D]: a's H rows, then b's (K = 2H; ReLU: a's, K = H)
    bias_ptr,  # HAS_BIAS: (K,)
    g_desc,  # the output's gradient (M, C), blocks [BLOCK_M, C]
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    wo_desc,  # the output projection (C, H), blocks [C, BLOCK_N]
    dpre_desc,  # out: the pre-activations' gradient (M, K), blocks [BLOCK_M, BLOCK_N]
    h_desc,  # out: the hidden rows again, times the row mask (M, H), blocks [BLOCK_M, BLOCK_N]
    xn_desc,  # out: LayerNorm(x) (M, D), blocks [BLOCK_M, D]
    dx_desc,  # out: x's gradient (M, D), blocks [BLOCK_M, D]
    dln_ptr,  # out: each program's sums for the LayerNorm's weight and bias, (2, blocks, D) float32
    M, H, eps, blocks,
    M_BUCKET, H_BUCKET,  # autotuning key only
    D: tl.constexpr,
    C: tl.constexpr,
    GLU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # divides H: a's tiles never run into b's
):
    """BLOCK_M rows, all H hidden channels BLOCK_N a step. The arithmetic is the pointer path's: LayerNorm(x) and a,
    b rounded to x's dtype as the forward makes them; in float32 GLU h = silu(a) b, da = dh b silu'(a) with
    silu'(a) = s (1 + a (1 - s)) for s = sigmoid(a), db = dh silu(a), else h = relu(a), da = dh [a > 0]; da and db
    rounded to x's dtype, then their products with W_in accumulated in float32 (the LayerNorm output's gradient,
    never rounded). Rows past M read as zeros, are left out of the sums and clipped from the stores."""
    pid = tl.program_id(0)
    m0 = pid * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    offs_d = tl.arange(0, D)
    dtype = x_desc.dtype
    x_ok = m_ok[:, None] & (offs_d < D)[None, :]
    xc, var = centred_rows(x_desc.load([m0, 0]).to(tl.float32), x_ok, D, True)  # [BLOCK_M, D]
    rstd = 1.0 / tl.sqrt(var + eps)
    lnw = tl.load(lnw_ptr + offs_d).to(tl.float32)
    xn = (xc * rstd[:, None] * lnw[None, :] + tl.load(lnb_ptr + offs_d).to(tl.float32)[None, :]).to(dtype)
    xn_desc.store([m0, 0], xn)
    g = g_desc.load([m0, 0])  # [BLOCK_M, C]
    if HAS_MASK:  # (applied to dh: (g mask) W_out = mask (g W_out) exactly, and g stays a product's operand)
        keep = tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32)
    dxn = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for n0 in range(0, H, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        w_a = w_desc.load([n0, 0])  # [BLOCK_N, D]
        a = _pre_activation(xn, w_a, bias_ptr + offs_n, dtype, HAS_BIAS)
        dh = tl.dot(g, wo_desc.load([0, n0]))  # [BLOCK_M, BLOCK_N] float32
        if HAS_MASK:
            dh *= keep[:, None]
        if GLU:
            w_b = w_desc.load([H + n0, 0])
            b = _pre_activation(xn, w_b, bias_ptr + H + offs_n, dtype, HAS_BIAS)
            s = tl.sigmoid(a)
            silu = a * s
            da = (dh * b * s * (1.0 + a * (1.0 - s))).to(dtype)
            db = (dh * silu).to(dtype)
            dpre_desc.store([m0, H + n0], db)
            dxn = tl.dot(db, w_b, dxn)
            h = silu * b
        else:
            da = tl.where(a > 0.0, dh, 0.0).to(dtype)
            h = tl.maximum(a, 0.0)
        dpre_desc.store([m0, n0], da)
        dxn = tl.dot(da, w_a, dxn)
        if HAS_MASK:
            h *= keep[:, None]
        h_desc.store([m0, n0], h.to(dtype))
    dxn = tl.where(m_ok[:, None], dxn, 0.0)  # (rows past M: a non-finite weight must not reach the sums)
    # (the rows read again rather than their standardized form held through the loop: fewer registers)
    xc, _ = centred_rows(x_desc.load([m0, 0]).to(tl.float32), x_ok, D, True)
    xhat = xc * rstd[:, None]
    tl.store(dln_ptr + pid * D + offs_d, tl.sum(dxn * xhat, axis=0))
    tl.store(dln_ptr + (blocks + pid) * D + offs_d, tl.sum(dxn, axis=0))
    gw = dxn * lnw[None, :]  # the gradient of xhat
    mean_gw = tl.sum(gw, axis=1) / D
    mean_gw_xhat = tl.sum(gw * xhat, axis=1) / D
    dx_desc.store([m0, 0], ((gw - mean_gw[:, None] - xhat * mean_gw_xhat[:, None]) * rstd[:, None]).to(dtype))


@triton.jit
def _pre_activation(xn, w, bias_at, dtype: tl.constexpr, HAS_BIAS: tl.constexpr):
    """xn [BLOCK_M, D] against the weight rows w [BLOCK_N, D], accumulated in float32, the bias at bias_at added,
    rounded to `dtype` and returned in float32."""
    acc = tl.dot(xn, tl.trans(w))
    if HAS_BIAS:
        acc += tl.load(bias_at).to(tl.float32)[None, :]
    return acc.to(dtype).to(tl.float32)


def _block_shapes(nargs: dict) -> None:
    """A config's hook: the descriptors' blocks for its tile."""
    block_m, block_n, D, C = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["D"], nargs["C"]
    for name, block in (("x_desc", [block_m, D]), ("w_desc", [block_n, D]), ("g_desc", [block_m, C]),
                        ("wo_desc", [C, block_n]), ("dpre_desc", [block_m, block_n]), ("h_desc", [block_m, block_n]),
                        ("xn_desc", [block_m, D]), ("dx_desc", [block_m, D])):
        nargs[name].block_shape = block


def _config(block_m: int, block_n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages,
                         pre_hook=_block_shapes)


# (BLOCK_M, BLOCK_N, num_warps, num_stages): the stages pipeline the weight tiles; the first that fits is the default
# where autotuning is off
CONFIGS = [_config(*tile) for tile in ((128, 32, 8, 2), (64, 32, 4, 3), (128, 32, 8, 3), (64, 32, 4, 2),
                                       (64, 64, 4, 2))]
INTERPRETER_CONFIG = _config(16, 16, 1, 1)
LEAST_BLOCK_M = min(c.kwargs["BLOCK_M"] for c in CONFIGS)
# fewer rows take the pointer path: there the host time of eight descriptors made and encoded a launch is more than
# the kernel time the pass saves
MIN_ROWS = 1 << 16
KEY = ["M_BUCKET", "H_BUCKET", "D", "C", "GLU", "HAS_BIAS", "HAS_MASK"]


def fits(config: triton.Config, D: int, C: int, H: int, operands: int) -> bool:
    """A tile is kept where BLOCK_N divides H and its rows (x, LayerNorm(x), g, x's gradient), its pipelined weight
    tiles and its staged stores fit shared memory (16-bit elements)."""
    block_m, block_n = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    rows = block_m * (3 * D + C)
    weights = (operands * D + C) * block_n * max(1, config.num_stages)
    stores = (operands + 1) * block_m * block_n
    return H % block_n == 0 and (rows + weights + stores) * 2 <= OPERAND_SHARED_BYTES


def candidates(D: int, C: int, H: int, operands: int) -> list[triton.Config]:
    """The tiles tried for a call (none where none fits: the pointer path takes it)."""
    if H % INTERPRETER_CONFIG.kwargs["BLOCK_N"]:  # (every tile's BLOCK_N is a multiple of the interpreter's)
        return []
    return tuning_candidates(CONFIGS, lambda c: fits(c, D, C, H, operands), INTERPRETER_CONFIG, fallback=False)


def _prune(configs, named_args, **kwargs):
    return candidates(kwargs["D"], kwargs["C"], named_args["H"], 2 if kwargs["GLU"] else 1)


def _channels(n: int) -> bool:
    return 16 <= n <= 128 and n & (n - 1) == 0


def takes(x: Tensor, in_weight: Tensor, grad: Tensor, out_weight: Tensor, glu: bool) -> bool:
    """Whether this pass takes a backward call (`op.core_backward`'s arguments), from what a traced call knows too:
    at least MIN_ROWS 16-bit rows; D and C powers of two from 16 to 128; a device with TMA (Triton's interpreter
    emulates it); x, the weights and the gradient with strides descriptors can address; a tile that fits and divides
    H; plain tensors (a DTensor's backward takes the pointer path's sharded ops)."""
    M, D = x.shape
    C, H = out_weight.shape
    if M < MIN_ROWS or x.dtype not in (torch.float16, torch.bfloat16) or not (_channels(D) and _channels(C)):
        return False
    if distributed(x) or not (interpreting() or (x.device.type == "cuda" and capability(x.device) >= 9)):
        return False
    return all(descriptor_strides(t) for t in (x, in_weight, grad, out_weight)) and bool(candidates(D, C, H, 2 if glu else 1))


def transition_backward_rows(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, in_weight: Tensor,
                             in_bias: Tensor | None, grad: Tensor, mask: Tensor | None, out_weight: Tensor,
                             glu: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(d_pre (M, K), h (M, H), xn (M, D), dx (M, D), d_ln (2, D) float32) for a call that `takes` takes: the
    pre-activations' gradient, the hidden rows times the mask, LayerNorm(x), x's gradient (each in x's dtype), and
    the LayerNorm weight's and bias's gradients. x (M, D) float16 or bfloat16; ln_weight, ln_bias (D,); in_weight
    (K, D), in_bias (K,) or None; grad (M, C), the output's gradient; mask (M,) 0/1 of any real dtype, or None;
    out_weight (C, H); all but the mask in x's dtype. A base TMA cannot address (a view 2 bytes in) takes the pointer
    kernel, then x's gradient by cuBLAS and the LayerNorm's pass."""
    (M, D), (C, H) = x.shape, out_weight.shape
    K = in_weight.shape[0]
    if not all(addressable(t) for t in (x, in_weight, grad, out_weight)):
        d_pre, h = core_backward(x, ln_weight, ln_bias, in_weight, in_bias, grad, mask, out_weight, glu, "default")
        xn, dx, d_ln, _, _ = layer_norm_pass(x, ln_weight, ln_bias, matmul(d_pre, in_weight), None, None, 1, True,
                                             "default")
        return d_pre, h, xn, dx, d_ln
    d_pre, h, xn, dx = x.new_empty(M, K), x.new_empty(M, H), x.new_empty(M, D), x.new_empty(M, D)
    # a program's sums a block of rows of the table's narrowest tile (16 bytes a row of x's 2D at BLOCK_M 64): a
    # wider tile fills fewer and leaves zeros, which the autotuner's timing runs restore between tiles
    blocks = cdiv(M, INTERPRETER_CONFIG.kwargs["BLOCK_M"] if interpreting() else LEAST_BLOCK_M)
    d_ln = torch.zeros(2, blocks, D, dtype=torch.float32, device=x.device)
    # (the blocks are the config's: its hook sets them before each launch)
    descs = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (x, in_weight, grad, out_weight, d_pre, h, xn, dx)]

    def grid(meta):
        return (cdiv(M, meta["BLOCK_M"]),)

    autotuned(transition_backward_tma_kernel, lambda: CONFIGS, KEY, _prune, restore_value=("dln_ptr",))[grid](
        descs[0], ln_weight, ln_bias, descs[1], in_weight if in_bias is None else in_bias, descs[2],
        h if mask is None else mask, *descs[3:], d_ln, M, H, LAYER_NORM_EPS, blocks, bucket(M), bucket(H), D=D, C=C,
        GLU=glu, HAS_BIAS=in_bias is not None, HAS_MASK=mask is not None)
    return d_pre, h, xn, dx, d_ln.sum(1)


def _fake(x, ln_weight, ln_bias, in_weight, in_bias, grad, mask, out_weight, glu):
    M, D = x.shape
    return (x.new_empty(M, in_weight.shape[0]), x.new_empty(M, out_weight.shape[1]), x.new_empty(M, D),
            x.new_empty(M, D), x.new_empty(2, D, dtype=torch.float32))


transition_backward_rows_op = custom_op("transition_backward_rows", transition_backward_rows, _fake)
