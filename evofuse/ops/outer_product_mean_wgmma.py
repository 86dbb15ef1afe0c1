"""The Outer Product Mean's second stage for 16-bit operands at hidden_dim 32 on Hopper (sm_90), in Gluon.

`outer_product_mean._opm_multipass_kernel` runs each tile's epilogue (the tile rearranged, its product with
out_proj's weight, the workspace between its two passes) with nothing overlapping it: one 8-warp program a
multiprocessor, its shared memory full, and the tensor cores idle while it waits on out_proj's blocks and the
workspace (opm-af2-main bf16: 0.25 of its 0.50 ms, session 16). Triton 3.6's automatic warp specialization does
not take that epilogue (session 17). This kernel schedules it by hand:

- operands through TMA (tensor descriptors) into a ring of STAGES buffers, each with an mbarrier; a comes
  pass-major from the projections (`ln_linear(..., a_passes=2)`), so that a pass's rows (i, p') for 8 residues i
  and 16 channels p' are one 128-byte-swizzled box, which the wgmma reads transposed (as eight 16-channel boxes of
  32-byte rows, a read as it is, the kernel took 0.53 ms against 0.37, session 18);
- the outer products X_pass [(i p'), (j q)] = sum_s a[s, i, p'] b[s, j, q] accumulate in registers over the
  MSA rows (async wgmma, one in flight while the next stage's loads are issued);
- at a pass's end X_pass is rearranged to x [(i j), (p' q)] and stored to shared memory in 16 bits; its product
  with out_proj's columns of the pass, out[(i j), r] += x @ w_pass^T, is issued in 64-column chunks, one chunk in
  each step of the next pass's main loop (or the next tile's), from out_proj's blocks in a ring of W_STAGES
  buffers; so the epilogue's tensor-core work queues beside the main loop's instead of after it;
- the tile's two passes add into one float32 accumulator [(i j), r] in registers (no workspace in memory); after
  its last chunk it is scaled by the normalization, the bias added, and the output stored.

Operands are scaled before the 16-bit cast in the other kernels; here x is cast unscaled and the per-pair factor
multiplies the float32 sums (the same rounding of X, one multiply fewer a element). GPU only: Gluon kernels do
not run in Triton's interpreter, so the CI checks the other kernels in it and this one compiles for sm_90 there
(`benchmarks/compile_sm90.py`); its tests carry the gpu marker.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._common import (
    _record_launch,
    autotune_enabled,
    bucket,
    cached_launch,
    cdiv,
    interpreting,
    multiprocessors,
    next_pow2,
)
from ._tape import taped_whole

# Gluon's API is experimental and changes between Triton releases: this kernel is written and checked on the H200
# with Triton 3.6's (`tma.async_copy_global_to_shared`, `_reinterpret`; Triton 3.9 has `async_load` instead, the
# old name a stub that raises, and `reinterpret`). Elsewhere the multi-pass Triton kernel takes its place.
GLUON_API = not hasattr(tma, "async_load") and hasattr(gl.shared_memory_descriptor, "_reinterpret")

C_WGMMA = 32  # hidden_dim of this kernel
PASSES = gl.constexpr(2)  # passes over the channels p, 16 a pass
BLOCK_I = gl.constexpr(8)  # residues i a tile (128 rows (i p') a pass)
BLOCK_J = gl.constexpr(8)  # residues j a tile (256 columns (j q))
W_BLOCK = gl.constexpr(64)  # out_proj's columns (p q) an epilogue chunk
# (the same as ints, for the launcher)
_PASSES, _BLOCK_I, _BLOCK_J, _W_BLOCK = PASSES.value, BLOCK_I.value, BLOCK_J.value, W_BLOCK.value
MAX_R = 128  # pair_dim up to this (the epilogue's float32 sums stay in registers)


@gluon.jit
def _tile_coords(tile, n_i, n_j, GROUP_I: gl.constexpr):
    """(batch element, block i, block j) of a tile, grouped GROUP_I block rows at a time (L2 reuse of b)."""
    tiles = n_i * n_j
    pid_b = tile // tiles
    t = tile % tiles
    per_group = GROUP_I * n_j
    first_i = (t // per_group) * GROUP_I
    rows = gl.minimum(n_i - first_i, GROUP_I)
    blk_i = first_i + (t % per_group) % rows
    blk_j = (t % per_group) // rows
    return pid_b, blk_i, blk_j


@gluon.jit
def _issue_loads(it, total, a_desc, b_desc, a_ring, b_ring, ready, first_tile, programs, n_i, n_j, steps,
                 CP: gl.constexpr, C: gl.constexpr, BLOCK_S: gl.constexpr, STAGES: gl.constexpr,
                 GROUP_I: gl.constexpr, BI: gl.constexpr, BJ: gl.constexpr):
    """TMA loads of main-loop step `it` (this program's steps in order: tile, pass, MSA-row step) into its ring
    stage: a's rows (i p') of the pass, b's columns (j q); none past `total`."""
    pred = it < total
    local = it // (PASSES * steps)
    rem = it % (PASSES * steps)
    part = rem // steps
    s0 = (rem % steps) * BLOCK_S
    pid_b, blk_i, blk_j = _tile_coords(first_tile + local * programs, n_i, n_j, GROUP_I)
    st = it % STAGES
    bar = ready.index(st)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [pid_b, s0, part, blk_i * BI * CP], bar, a_ring.index(st), pred)
    tma.async_copy_global_to_shared(b_desc, [pid_b, s0, blk_j * BJ * C], bar, b_ring.index(st), pred)


@gluon.jit
def _issue_w(e, total, w_desc, w_ring, w_ready, W_STAGES: gl.constexpr, CHUNKS: gl.constexpr):
    """TMA load of out_proj's block for epilogue chunk `e` (chunks go pass 0's, pass 1's, ..., so chunk e
    takes columns (e % (PASSES * CHUNKS)) * W_BLOCK on); none past `total`."""
    pred = e < total
    slot = e % W_STAGES
    mbarrier.expect(w_ready.index(slot), w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(w_desc, [0, (e % (PASSES * CHUNKS)) * W_BLOCK], w_ready.index(slot),
                                    w_ring.index(slot), pred)


@gluon.jit
def _chunk_now(out, x_c, e, total_w, w_desc, w_ring, w_ready, W_STAGES: gl.constexpr, CHUNKS: gl.constexpr):
    """Epilogue chunk `e` on its own (no main-loop step beside it): out += x_c @ its block of out_proj^T, waited
    for; then its ring slot takes the block W_STAGES chunks ahead."""
    slot = e % W_STAGES
    mbarrier.wait(w_ready.index(slot), (e // W_STAGES) & 1)
    out = warpgroup_mma(x_c, w_ring.index(slot).permute((1, 0)), out, use_acc=True, is_async=True)
    out = warpgroup_mma_wait(0, deps=(out,))
    gl.thread_barrier()
    _issue_w(e + W_STAGES, total_w, w_desc, w_ring, w_ready, W_STAGES, CHUNKS)
    return out


@gluon.jit
def _finish(out, tile, n_i, n_j, sc_ptr, stride_scb, stride_sci, stride_scj, wb_ptr, o_ptr, stride_ob, stride_oi,
            stride_oj, stride_or, N, R, NORM: gl.constexpr, GROUP_I: gl.constexpr, BI: gl.constexpr,
            BJ: gl.constexpr, PAIRS: gl.constexpr, R_PAD: gl.constexpr, layout: gl.constexpr):
    """A tile's sums out [(i j), r] float32: times the normalization's per-pair factor, the bias added (af2
    scales it too), stored to the output."""
    pid_b, blk_i, blk_j = _tile_coords(tile, n_i, n_j, GROUP_I)
    pair = gl.arange(0, PAIRS, layout=gl.SliceLayout(1, layout))
    offs_r = gl.arange(0, R_PAD, layout=gl.SliceLayout(0, layout))
    out_i = (blk_i * BI + pair // BJ).to(gl.int64)  # [(i j)]
    out_j = (blk_j * BJ + pair % BJ).to(gl.int64)
    pair_ok = (out_i < N) & (out_j < N)
    r_ok = offs_r < R
    b64 = pid_b.to(gl.int64)
    scale = gl.load(sc_ptr + b64 * stride_scb + out_i * stride_sci + out_j * stride_scj, mask=pair_ok, other=0.0)
    wb = gl.load(wb_ptr + offs_r, mask=r_ok, other=0.0).to(gl.float32)
    out = out * scale[:, None]  # [(i j), R_PAD]
    if NORM == 1:
        out = out + scale[:, None] * wb[None, :]
    else:
        out = out + wb[None, :]
    o_base = o_ptr + b64 * stride_ob + out_i * stride_oi + out_j * stride_oj  # [(i j)]
    gl.store(o_base[:, None] + offs_r[None, :] * stride_or, out.to(o_ptr.dtype.element_ty),
             mask=pair_ok[:, None] & r_ok[None, :])


@gluon.jit
def _opm_wgmma_kernel(
    a_desc,  # a, pass-major: (B, S, PASSES, N*C // PASSES) 16-bit, blocks [1, BLOCK_S, 1, BLOCK_I*C // PASSES]
    b_desc,  # b: (B, S, N*C), blocks [1, BLOCK_S, BLOCK_J*C]
    w_desc,  # out_proj weight (R, C*C) in a's dtype, blocks [R_PAD, W_BLOCK]
    sc_ptr, stride_scb, stride_sci, stride_scj,  # the normalization's per-pair factor (B, N, N) float32
    wb_ptr,  # out_proj bias (R,)
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, N, N, R)
    B, S, N, R,
    C: gl.constexpr,
    NORM: gl.constexpr,  # 0 seed, 1 af2 (which divides the bias too), 2 boltz
    BLOCK_S: gl.constexpr,
    STAGES: gl.constexpr,  # the main loop's ring of operand buffers
    W_STAGES: gl.constexpr,  # out_proj's ring of blocks
    R_PAD: gl.constexpr,  # R rounded up to a power of two >= 16 (out_proj's rows a block)
    GROUP_I: gl.constexpr,
    num_warps: gl.constexpr,
):
    """Persistent: program k takes tiles k, k + programs, ... of every batch element."""
    CP: gl.constexpr = C // PASSES
    BI: gl.constexpr = BLOCK_I
    BJ: gl.constexpr = BLOCK_J
    ROWS: gl.constexpr = BI * CP  # rows (i p') of a pass's outer products
    COLS: gl.constexpr = BJ * C  # columns (j q)
    PAIRS: gl.constexpr = BI * BJ
    CHUNKS: gl.constexpr = CP * C // W_BLOCK  # epilogue chunks a pass
    dtype: gl.constexpr = a_desc.dtype
    main_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                          instr_shape=[16, COLS, 16])
    epi_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, num_warps // 4],
                                                         instr_shape=[16, R_PAD // (num_warps // 4), 16])
    tile_layout: gl.constexpr = gl.NVMMASharedLayout(128, 16, rank=2)

    # the rings as TMA writes them (a [stage][1, s, 1, (i p')], b [stage][1, s, (j q)]) and as the wgmma reads them
    a_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_S, 1, ROWS], a_desc.layout)
    a_mma = a_ring._reinterpret(dtype, [STAGES, BLOCK_S, ROWS], tile_layout)
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_S, COLS], b_desc.layout)
    b_mma = b_ring._reinterpret(dtype, [STAGES, BLOCK_S, COLS], tile_layout)
    w_ring = gl.allocate_shared_memory(dtype, [W_STAGES, R_PAD, W_BLOCK], w_desc.layout)
    # x [(i j), (p' q)] as stored, and as the chunks' wgmmas read it, [chunk][(i j), 64 of (p' q)] (a 128-byte-
    # swizzled tile lies in 64-element column blocks, each spanning every row)
    x_chunks = gl.allocate_shared_memory(dtype, [CHUNKS, PAIRS, W_BLOCK], tile_layout)
    x_smem = x_chunks._reinterpret(dtype, [PAIRS, CP * C], tile_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    w_ready = gl.allocate_shared_memory(gl.int64, [W_STAGES, 1], mbarrier.MBarrierLayout())
    for k in gl.static_range(STAGES):
        mbarrier.init(ready.index(k), count=1)
    for k in gl.static_range(W_STAGES):
        mbarrier.init(w_ready.index(k), count=1)

    n_i = gl.cdiv(N, BI)
    n_j = gl.cdiv(N, BJ)
    first_tile = gl.program_id(0)
    programs = gl.num_programs(0)
    my_tiles = gl.cdiv(B * n_i * n_j - first_tile, programs)
    steps = gl.cdiv(S, BLOCK_S)
    total = my_tiles * PASSES * steps  # this program's main-loop steps
    total_w = my_tiles * PASSES * CHUNKS  # and epilogue chunks

    for k in gl.static_range(STAGES - 1):
        _issue_loads(k, total, a_desc, b_desc, a_ring, b_ring, ready, first_tile, programs, n_i, n_j, steps, CP, C,
                     BLOCK_S, STAGES, GROUP_I, BI, BJ)
    for k in gl.static_range(W_STAGES):
        _issue_w(k, total_w, w_desc, w_ring, w_ready, W_STAGES, CHUNKS)

    acc = gl.zeros((ROWS, COLS), dtype=gl.float32, layout=main_layout)
    out = gl.zeros((PAIRS, R_PAD), dtype=gl.float32, layout=epi_layout)
    it = 0  # main-loop steps consumed
    e = 0  # epilogue chunks issued
    left = 0  # chunks of the x in shared memory not yet issued (of the pass before the running one)
    for local in range(my_tiles):
        tile = first_tile + local * programs
        for part in gl.static_range(PASSES):
            for ks in range(steps):
                st = it % STAGES
                mbarrier.wait(ready.index(st), (it // STAGES) & 1)
                a_t = a_mma.index(st).permute((1, 0))  # [(i p'), s]
                if left > 0:  # one chunk of the pending epilogue, queued before this step's outer products
                    slot = e % W_STAGES
                    mbarrier.wait(w_ready.index(slot), (e // W_STAGES) & 1)
                    x_c = x_chunks.index(CHUNKS - left)  # [(i j), 64 of (p' q)]
                    out = warpgroup_mma(x_c, w_ring.index(slot).permute((1, 0)), out, use_acc=True, is_async=True)
                    acc = warpgroup_mma(a_t, b_mma.index(st), acc, use_acc=ks > 0, is_async=True)
                    out, acc = warpgroup_mma_wait(1, deps=(out, acc))  # the chunk and the last step's done
                    gl.thread_barrier()
                    _issue_w(e + W_STAGES, total_w, w_desc, w_ring, w_ready, W_STAGES, CHUNKS)
                    e += 1
                    left -= 1
                    if part == 0:  # the pending x is the last tile's last pass: its sums are complete
                        if left == 0:
                            _finish(out, tile - programs, n_i, n_j, sc_ptr, stride_scb, stride_sci, stride_scj,
                                    wb_ptr, o_ptr, stride_ob, stride_oi, stride_oj, stride_or, N, R, NORM, GROUP_I,
                                    BI, BJ, PAIRS, R_PAD, epi_layout)
                            out = gl.zeros((PAIRS, R_PAD), dtype=gl.float32, layout=epi_layout)
                else:
                    acc = warpgroup_mma(a_t, b_mma.index(st), acc, use_acc=ks > 0, is_async=True)
                    acc = warpgroup_mma_wait(1, deps=(acc,))
                    gl.thread_barrier()
                # the last step's stage is free: the step STAGES - 1 ahead goes into it
                _issue_loads(it + STAGES - 1, total, a_desc, b_desc, a_ring, b_ring, ready, first_tile, programs,
                             n_i, n_j, steps, CP, C, BLOCK_S, STAGES, GROUP_I, BI, BJ)
                it += 1
            acc = warpgroup_mma_wait(0, deps=(acc,))
            # chunks still pending (fewer steps than chunks), issued one after another
            for _ in range(left):
                out = _chunk_now(out, x_chunks.index(CHUNKS - left), e, total_w, w_desc, w_ring, w_ready, W_STAGES,
                                 CHUNKS)
                e += 1
                left -= 1
                if part == 0:
                    if left == 0:
                        _finish(out, tile - programs, n_i, n_j, sc_ptr, stride_scb, stride_sci, stride_scj, wb_ptr,
                                o_ptr, stride_ob, stride_oi, stride_oj, stride_or, N, R, NORM, GROUP_I, BI, BJ, PAIRS,
                                R_PAD, epi_layout)
                        out = gl.zeros((PAIRS, R_PAD), dtype=gl.float32, layout=epi_layout)
            # this pass's x [(i j), (p' q)]: every warp group's reads of the last x are done (waited above)
            x = gl.reshape(gl.permute(gl.reshape(acc, (BI, CP, BJ, C)), (0, 2, 1, 3)), (PAIRS, CP * C))
            gl.thread_barrier()
            x_smem.store(x.to(dtype))
            fence_async_shared()
            gl.thread_barrier()
            left = CHUNKS
    # the last tile's last pass
    for _ in range(left):
        out = _chunk_now(out, x_chunks.index(CHUNKS - left), e, total_w, w_desc, w_ring, w_ready, W_STAGES, CHUNKS)
        e += 1
        left -= 1
    if my_tiles > 0:
        _finish(out, first_tile + (my_tiles - 1) * programs, n_i, n_j, sc_ptr, stride_scb, stride_sci, stride_scj,
                wb_ptr, o_ptr, stride_ob, stride_oi, stride_oj, stride_or, N, R, NORM, GROUP_I, BI, BJ, PAIRS, R_PAD,
                epi_layout)
    for k in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(k))
    for k in gl.static_range(W_STAGES):
        mbarrier.invalidate(w_ready.index(k))


# (BLOCK_S, STAGES, W_STAGES): MSA rows a step, the ring's depth, out_proj's blocks in flight. Shared memory:
# STAGES * BLOCK_S * 768 bytes + x's 64 KiB + W_STAGES * R_PAD * 128 bytes (227 KiB on the H200). The first is
# the default (the fastest at the three large suite shapes, session 18), the one launched with autotuning off;
# with it on, `_config` times them once per bucketed key.
CONFIGS = ((64, 3, 1), (64, 2, 2), (32, 5, 2))
NUM_WARPS = 8


def supported(msa_repr: torch.Tensor, c: int, R: int) -> bool:
    """Whether this kernel takes the second stage for `msa_repr` (B, S, N, D): hidden_dim c = 32, bfloat16 or
    float16 on a CUDA sm_90 device, pair_dim up to MAX_R, not in Triton's interpreter, Gluon's API as the kernel
    was written for (GLUON_API)."""
    return (GLUON_API and c == C_WGMMA and msa_repr.is_cuda and msa_repr.dtype in (torch.bfloat16, torch.float16) and R <= MAX_R
            and not interpreting() and _capability(msa_repr.device.index) == (9, 0))


@functools.lru_cache(maxsize=None)
def _capability(index: int | None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def _layouts():
    """TMA's shared-memory layouts of a's, b's and out_proj's blocks."""
    return (gl.NVMMASharedLayout(128, 16, rank=4), gl.NVMMASharedLayout(128, 16, rank=3),
            gl.NVMMASharedLayout(128, 16, rank=2))


@taped_whole
def outer_products_wgmma(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor, out: torch.Tensor, norm: int) -> torch.Tensor:
    """out (B, N, N, R) = the normalized outer products of a and b contracted with out_proj: a, b (B, S, N, 32)
    contiguous, 16-bit, masked, a's memory pass-major, (B, S, 2, N, 16) (`ln_linear(..., a_passes=2)`); scale
    (B, N, N) float32, the per-pair factor; weight (R, 1024) in a's dtype, contiguous; bias (R,) any float dtype;
    norm 0 seed, 1 af2, 2 boltz. Launched at the config `_config` picks."""
    B, S, N, c = a.shape
    R = weight.shape[0]
    if weight.data_ptr() % 16:  # (TMA reads from 16-byte-aligned addresses)
        weight = weight.clone()
    r_pad = max(16, next_pow2(R))
    a_layout, b_layout, w_layout = _layouts()
    tiles = B * cdiv(N, _BLOCK_I) * cdiv(N, _BLOCK_J)
    _record_launch(None)  # Triton's own launch (tensor descriptors): not one a replay or tape repeats
    ints = (*scale.stride(), *out.stride(), B, S, N, R)  # (the kernel's integer arguments, in its order)

    def run(config):
        block_s, stages, w_stages = config
        descs = ((a, [B, S, _PASSES, N * c // _PASSES], [S * N * c, N * c, N * c // _PASSES, 1],
                  [1, block_s, 1, _BLOCK_I * c // _PASSES], a_layout),
                 (b, [B, S, N * c], [S * N * c, N * c, 1], [1, block_s, _BLOCK_J * c], b_layout),
                 (weight, list(weight.shape), list(weight.stride()), [r_pad, _W_BLOCK], w_layout))
        consts = (c, norm, block_s, stages, w_stages, r_pad, 8, NUM_WARPS)  # C, NORM, ..., GROUP_I, num_warps
        _launch((min(tiles, multiprocessors(a.device)),), descs, scale, bias, out, ints, consts)

    run(_config((a.device.index, a.dtype, bucket(B), bucket(S), bucket(N), r_pad, norm), run))
    return out


class _Descriptor:
    """What a compiled binary's launcher reads of a tensor descriptor (Triton 3.6: the base's address, the shape,
    the strides, the padding) without `TensorDescriptor`'s checks, which the key's first launch made."""

    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, base, shape, strides, block_shape, layout):
        self.base, self.shape, self.strides, self.padding = base, shape, strides, "zero"


_BINARIES: dict = {}  # a launch's key -> the binary compiled for it


def _launch(grid, descs, scale, bias, out, ints, consts) -> None:
    """The kernel's launch on descriptors (tensor, shape, strides, block shape, layout) and its other arguments:
    Triton's own for the first of a key (which makes the descriptors with their checks and compiles or finds the
    binary) and under a launch hook (a profiler's); after that straight into the binary (measured on the H200's
    host, session 20: 52 -> 23 us a launch). The key holds everything the binary is specialized on and more: the
    device, the constexprs, each tensor's dtype and address modulo 16, the descriptors' shapes and strides and
    the integer arguments."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    cached = cached_launch(_opm_wgmma_kernel)
    device = cached._driver.active.get_current_device()
    tensors = (*(d[0] for d in descs), scale, bias, out)
    key = (device, grid, consts, ints, *[(t.dtype, t.data_ptr() % 16) for t in tensors],
           *[(tuple(d[1]), tuple(d[2])) for d in descs])
    binary = _BINARIES.get(key)
    if binary is None or cached._hooked():
        names = ("C", "NORM", "BLOCK_S", "STAGES", "W_STAGES", "R_PAD", "GROUP_I", "num_warps")
        binary = _opm_wgmma_kernel[grid](*[TensorDescriptor(*d) for d in descs], scale, *ints[:3], bias, out,
                                         *ints[3:], **dict(zip(names, consts)))
        if all(hasattr(binary, name) for name in ("run", "function", "packed_metadata")):
            _BINARIES[key] = binary
        return
    binary.run(grid[0], 1, 1, cached._driver.active.get_current_stream(device), binary.function,
               binary.packed_metadata, None, None, None, *[_Descriptor(*d) for d in descs], scale.data_ptr(),
               *ints[:3], bias.data_ptr(), out.data_ptr(), *ints[3:], *consts)


_CHOSEN: dict = {}  # autotuning key -> the config picked


def _config(key: tuple, run) -> tuple[int, int, int]:
    """CONFIGS[0] with autotuning off (EVOFUSE_AUTOTUNE=0); else the fastest of CONFIGS for `key` (the device,
    dtype, bucketed B, S and N, R_PAD and the normalization), timed once with `run(config)` on the first call's own
    buffers (each config's launch writes the whole output: the last launch, the picked one's, stands)."""
    if not autotune_enabled() or len(CONFIGS) == 1:
        return CONFIGS[0]
    config = _CHOSEN.get(key)
    if config is None:
        import triton.testing

        times = [triton.testing.do_bench(lambda cfg=cfg: run(cfg), warmup=5, rep=20) for cfg in CONFIGS]
        config = _CHOSEN[key] = CONFIGS[times.index(min(times))]
    return config
