"""`layer_norm_glu`'s forward through tensor descriptors (TMA, sm_90 and later): a program normalizes its whole rows
once and steps through h's channels, the weight's row tiles pipelined into shared memory and h's tiles stored by
the copy engine, where the pointer kernel loads the weight tiles a thread at a time from L2 and stores h through
registers. Taken for calls of many 16-bit rows of 16-256 channels (a power of two) whose tensors TMA can address; the
pointer kernel (`layer_norm_glu_kernel`) takes every other call, the gradients (through descriptors they were slower)
and the pre-activations' stores.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.tools.tensor_descriptor import TensorDescriptor

from .._runtime import OPERAND_SHARED_BYTES, autotuned, bucket, capability, cdiv, interpreting, tuning_candidates
from ..reference import LAYER_NORM_EPS
from .glu_activations import activation
from .layer_norm_rows import normalized


@triton.jit
def layer_norm_glu_tma_kernel(
    x_desc,  # x (M, D), blocks [BLOCK_M, D]
    lnw_ptr, lnb_ptr,  # the LayerNorm's weight and bias (D,)
    w_desc,  # the projection (K, D), blocks [BLOCK_N, D]: a's H rows, then b's (K = 2H; "relu": a's alone, K = H)
    bias_ptr,  # HAS_BIAS: (K,)
    m_ptr,  # HAS_MASK: the row mask (M,), 0/1 of any dtype
    h_desc,  # out: h (M, H), blocks [BLOCK_M, BLOCK_N]; PLANES: h's channel planes (H, M), blocks [BLOCK_N, BLOCK_M]
    M, H, eps,
    M_BUCKET, H_BUCKET,  # autotuning key only
    D: tl.constexpr,
    ACTIVATION: tl.constexpr,  # "swiglu": silu(a) * b, "sigmoid": a * sigmoid(b), "relu": relu(a)
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PLANES: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """BLOCK_M rows of h, all H channels, BLOCK_N a step: `layer_norm_glu_kernel`'s arithmetic (moments in float32,
    LayerNorm(x) rounded to x's dtype, a and b from products accumulated in float32 and rounded to it, the
    activation in float32 times the row mask, rounded once). Rows past M read as zeros and channels past H (a's tile
    running into b's rows) are computed and not stored: the descriptors clip both."""
    GATED: tl.constexpr = ACTIVATION != "relu"
    m0 = tl.program_id(0) * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    m_ok = offs_m < M
    dtype = h_desc.dtype
    x = x_desc.load([m0, 0]).to(tl.float32)  # [BLOCK_M, D]
    xn = normalized(x, m_ok[:, None] & (tl.arange(0, D) < D)[None, :], lnw_ptr, lnb_ptr, D, eps, dtype, D)
    if HAS_MASK:
        row_mask = tl.load(m_ptr + offs_m, mask=m_ok, other=0).to(tl.float32)
    for n0 in range(0, H, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)  # [BLOCK_N]
        n_ok = offs_n < H
        a = _projected(xn, w_desc, n0, bias_ptr, offs_n, n_ok, dtype, HAS_BIAS, PLANES)
        b = a
        if GATED:
            b = _projected(xn, w_desc, H + n0, bias_ptr + H, offs_n, n_ok, dtype, HAS_BIAS, PLANES)
        h = activation(a.to(tl.float32), b.to(tl.float32), ACTIVATION)
        if PLANES:
            if HAS_MASK:
                h *= row_mask[None, :]
            h_desc.store([n0, m0], h.to(dtype))
        else:
            if HAS_MASK:
                h *= row_mask[:, None]
            h_desc.store([m0, n0], h.to(dtype))


@triton.jit
def _projected(xn, w_desc, k0, bias_ptr, offs_n, n_ok, dtype: tl.constexpr, HAS_BIAS: tl.constexpr,
               PLANES: tl.constexpr):
    """Normalized rows xn [BLOCK_M, D] against the weight rows k0 on, [BLOCK_M, BLOCK_N] in `dtype` (PLANES: [BLOCK_N,
    BLOCK_M], the weight tile against the rows transposed, so that a channel plane's stores run along its unit
    stride), accumulated in float32, the bias at offs_n (from bias_ptr) added."""
    w = w_desc.load([k0, 0])  # [BLOCK_N, D]
    if PLANES:
        acc = tl.dot(w, tl.trans(xn))
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    else:
        acc = tl.dot(xn, tl.trans(w))
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return acc.to(dtype)


def _block_shapes(nargs: dict) -> None:
    """A config's hook: the descriptors' blocks for its tile (the autotuner times each tile with its own)."""
    block_m, block_n, D = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["D"]
    nargs["x_desc"].block_shape = [block_m, D]
    nargs["w_desc"].block_shape = [block_n, D]
    nargs["h_desc"].block_shape = [block_n, block_m] if nargs["PLANES"] else [block_m, block_n]


def _config(block_m: int, block_n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages,
                         pre_hook=_block_shapes)


# (BLOCK_M, BLOCK_N, num_warps, num_stages): the stages pipeline the weight tiles; the first that fits is the default
# where autotuning is off
CONFIGS = [_config(*tile) for tile in ((128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 2), (64, 128, 4, 2))]
INTERPRETER_CONFIG = _config(16, 16, 1, 1)
# fewer rows go to the pointer kernel: there the host time a launch through descriptors adds (three descriptors made
# and encoded, the config's hook) is more than the kernel time it saves
MIN_ROWS = 1 << 18
KEY = ["M_BUCKET", "H_BUCKET", "D", "ACTIVATION", "HAS_BIAS", "HAS_MASK", "PLANES"]


def fits(config: triton.Config, D: int, operands: int, element_size: int) -> bool:
    """A tile is kept where its rows, its pipelined weight tiles and h's staged tile fit shared memory."""
    block_m, block_n = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    return ((block_m * D + operands * block_n * D * config.num_stages + block_m * block_n) * element_size
            <= OPERAND_SHARED_BYTES)


def candidates(D: int, operands: int, element_size: int) -> list[triton.Config]:
    """The tiles tried for a call (none where none fits: the pointer kernel takes it)."""
    return tuning_candidates(CONFIGS, lambda c: fits(c, D, operands, element_size), INTERPRETER_CONFIG, fallback=False)


def _prune(configs, named_args, **kwargs):
    return candidates(kwargs["D"], 1 if kwargs["ACTIVATION"] == "relu" else 2,
                      named_args["x_desc"].base.element_size())


def descriptor_strides(t: Tensor) -> bool:
    """Whether a 2-D tensor's strides let TMA address it: unit stride last, rows of at least 16 bytes that do not
    overlap (no broadcast), 16-byte aligned. What a traced tensor can tell too: its base is `addressable`'s."""
    return (t.stride(1) == 1 and t.stride(0) >= t.shape[1] and t.stride(0) * t.element_size() % 16 == 0
            and t.shape[1] * t.element_size() >= 16)


def addressable(t: Tensor) -> bool:
    """Whether TMA can address a 2-D tensor as it is: `descriptor_strides`, and its base 16-byte aligned."""
    return descriptor_strides(t) and t.data_ptr() % 16 == 0


def _planes(h: Tensor) -> bool:
    """Whether h (M, H) is channel planes (unit row stride): its descriptor then addresses h.t(), (H, M)."""
    return h.stride(0) == 1 and h.stride(1) != 1


def takes(x: Tensor, weight: Tensor, h: Tensor, activation: str) -> bool:
    """Whether this pass takes a forward call of `layer_norm_glu` (its arguments as there): at least MIN_ROWS 16-bit
    rows of D = 16-256 channels, a power of two; a device with TMA (Triton's interpreter emulates it); x, the weight
    and h (its rows or, with unit row stride, its channel planes) addressable by descriptors; a tile that fits."""
    M, D = x.shape
    if M < MIN_ROWS or x.dtype not in (torch.float16, torch.bfloat16) or D < 16 or D > 256 or D & (D - 1):
        return False
    if not (interpreting() or (x.device.type == "cuda" and capability(x.device) >= 9)):
        return False
    if not (addressable(x) and addressable(weight) and addressable(h.t() if _planes(h) else h)):
        return False
    return bool(candidates(D, 1 if activation == "relu" else 2, x.element_size()))


def layer_norm_glu_tma(x: Tensor, ln_weight: Tensor, ln_bias: Tensor, weight: Tensor, bias: Tensor | None,
                       mask: Tensor | None, h: Tensor, activation: str) -> Tensor:
    """`layer_norm_glu`'s forward (no pre-activations) where `takes` holds: writes h (M, H) = act(a, b) * mask for
    [a, b] = LayerNorm(x) @ weight^T + bias and returns it. x (M, D) float16 or bfloat16; ln_weight, ln_bias (D,);
    weight (K, D), bias (K,) or None, in x's dtype; mask (M,) 0/1 of any real dtype, or None; h rows (M, H) or
    channel planes (unit row stride)."""
    (M, D), H = x.shape, h.shape[1]
    planes = _planes(h)
    K = H if activation == "relu" else 2 * H
    # (the blocks are the config's: its hook sets them before each launch)
    descs = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (x, weight[:K], h.t() if planes else h)]

    def grid(meta):
        return (cdiv(M, meta["BLOCK_M"]),)

    autotuned(layer_norm_glu_tma_kernel, lambda: CONFIGS, KEY, _prune)[grid](
        descs[0], ln_weight, ln_bias, descs[1], weight if bias is None else bias, h if mask is None else mask,
        descs[2], M, H, LAYER_NORM_EPS, bucket(M), bucket(H), D=D, ACTIVATION=activation, HAS_BIAS=bias is not None,
        HAS_MASK=mask is not None, PLANES=planes)
    return h
