"""The Outer Product Mean's contraction, from the masked projections a, b to the output, on two routes.

16-bit inputs: for a block of rows i, cuBLAS makes the outer products summed over the MSA rows,
X[(i p), (j q)] = sum_s a[s, i, p] b[s, j, q] (one product of the block's a with all of b, float32 sums
rounded once to the input's dtype after a power-of-two scale that keeps them in float16's range), and
`opm_project_kernel` reads X pair by pair as [(i j), (p q)] and multiplies it by out_proj's weight on tensor
cores, with the normalization and the bias in its epilogue: X exists one block of rows at a time, never for
all N*N pairs.

float32 inputs: `opm_forward_kernel` fuses both products. For a tile of residues i (BLOCK_I of them) and j
(BLOCK_J), X is a matrix product on tensor cores with a float32 accumulator, rearranged to X[(i j), (p q)],
scaled by the normalization and multiplied by out_proj's weight in the epilogue: only the (B, N, N, R) output
reaches memory. The accumulator holds C // PASSES of the channels p at a time: the tile is taken in PASSES
passes over the channels p, and each pass adds its share of the output, X_pass @ W[:, (p q)]^T, to a float32
workspace of the program's own (the tile's pairs are the M of that product, out_proj's weight its operand in
shared memory, BLOCK_R rows of it a step). Programs are persistent, one workspace each, and walk the tiles in a
grouped order so that tiles running together share rows of a and b in L2. Its operands are float16 after a
power-of-two scale into float16's range: at the default precision as high and low halves (TERMS = 3: the
products hi*hi + hi*lo + lo*hi, ~2**-22 relative, for both contractions), at the "fast" precision as the high
halves alone (TERMS = 1).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...stages.float16_halves import finite_abs, power_of_two_scales, store_halves


@triton.jit
def opm_forward_kernel(
    a_ptr, b_ptr, stride_xb, stride_xs, stride_xn, stride_xh,  # a, b: (B, S, N, C) float16, channel stride 1;
    # TERMS == 3: their low halves stride_xh further on
    cnt_ptr, stride_cb, stride_ci, stride_cj,  # HAS_COUNTS: the normalization's counts (B, N, N) float32
    w_ptr, stride_wr, stride_wk, stride_wh,  # out_proj weight: (R, C*C), flat index p*C + q; TERMS == 3: its low
    # half stride_wh further on
    wb_ptr,  # out_proj bias: (R,)
    inv_ptr,  # one float32, 1 / the product of the power-of-two scales of a, b and the weight
    ws_ptr, WS_SLOT,  # workspace: WS_SLOT float32 elements a program
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: (B, N, N, R)
    B, S, N, R,
    S_BUCKET, N_BUCKET,  # autotuning keys only
    C: tl.constexpr,
    DIVIDE_BIAS: tl.constexpr,  # "count_ij_after": the output divided after out_proj, its bias too
    EPS: tl.constexpr,  # added to the counts ("count_ij_after"), else the counts are clamped to >= 1
    HAS_COUNTS: tl.constexpr,  # without a mask every count is S
    TERMS: tl.constexpr,  # 1: the high halves alone ("fast"); 3: high and low halves, three products each
    PASSES_PER_32: tl.constexpr,  # passes over the channels p per 32 of them (rounded up)
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_R: tl.constexpr,
    GROUP_I: tl.constexpr,
    W_STAGES: tl.constexpr,  # pipeline depth of the epilogue's loop over out_proj's row blocks
):
    PASSES: tl.constexpr = (PASSES_PER_32 * C + 31) // 32
    CP: tl.constexpr = C // PASSES  # channels p a pass
    PAIRS: tl.constexpr = BLOCK_I * BLOCK_J
    n_i = tl.cdiv(N, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    tiles = n_i * n_j
    rows = tl.arange(0, BLOCK_I * CP)  # rows (i, p) of the first product
    cols = tl.arange(0, BLOCK_J * C)  # its columns (j, q)
    pair = tl.arange(0, PAIRS)  # the tile's (i, j) pairs
    ws = ws_ptr + tl.program_id(0).to(tl.int64) * WS_SLOT
    for tile in range(tl.program_id(0), B * tiles, tl.num_programs(0)):
        bb = (tile // tiles).to(tl.int64)
        blk_i, blk_j = _grouped(tile % tiles, n_i, n_j, GROUP_I)
        row_i = blk_i * BLOCK_I + rows // CP  # [BLOCK_I*CP]
        col_j = blk_j * BLOCK_J + cols // C  # [BLOCK_J*C]
        a_rows = a_ptr + bb * stride_xb + row_i.to(tl.int64) * stride_xn + rows % CP
        b_cols = b_ptr + bb * stride_xb + col_j.to(tl.int64) * stride_xn + cols % C
        out_i = blk_i * BLOCK_I + pair // BLOCK_J  # [PAIRS]
        out_j = blk_j * BLOCK_J + pair % BLOCK_J
        pair_ok = (out_i < N) & (out_j < N)
        scale = pair_scale(cnt_ptr + bb * stride_cb, stride_ci, stride_cj, out_i, out_j, pair_ok, S, EPS,
                            HAS_COUNTS)  # [PAIRS]
        o_pairs = o_ptr + bb * stride_ob + out_i.to(tl.int64) * stride_oi + out_j.to(tl.int64) * stride_oj

        for part in tl.static_range(PASSES):
            acc = tl.zeros((BLOCK_I * CP, BLOCK_J * C), dtype=tl.float32)
            acc = _outer_products(acc, a_rows + part * CP, row_i < N, b_cols, col_j < N, S, stride_xs, stride_xh,
                                  TERMS, BLOCK_S)  # [(i p), (j q)]
            x = _by_pairs(acc, BLOCK_I, CP, BLOCK_J, C) * scale[:, None]  # [(i j), (p q)] float32
            x_hi = x.to(w_ptr.dtype.element_ty)
            if TERMS == 3:
                x_lo = (x - x_hi.to(tl.float32)).to(w_ptr.dtype.element_ty)
            offs_k = part * CP * C + tl.arange(0, CP * C)  # out_proj's columns (p q) of this pass
            tl.debug_barrier()  # the workspace: every thread's reads and writes of the last pass are done
            for r0 in tl.range(0, R, BLOCK_R, num_stages=W_STAGES):
                offs_r = r0 + tl.arange(0, BLOCK_R)
                r_ok = offs_r < R
                w_tile = w_ptr + offs_k[:, None] * stride_wk + offs_r[None, :] * stride_wr  # [CP*C, BLOCK_R]
                w = tl.load(w_tile, mask=r_ok[None, :], other=0.0)
                ws_r = ws + r0 * PAIRS + pair[:, None] * BLOCK_R + tl.arange(0, BLOCK_R)[None, :]  # [PAIRS, BLOCK_R]
                if TERMS == 3:  # each pass's products start from zero and join the running sums in a rounded
                    # float32 add: the tensor cores' own accumulation truncates, and chained over all C*C columns
                    # of the three products it passes float32's 1e-5 contract at c = 64
                    sums = tl.dot(x_hi, tl.load(w_tile + stride_wh, mask=r_ok[None, :], other=0.0),
                                  tl.zeros((PAIRS, BLOCK_R), dtype=tl.float32))
                    sums = tl.dot(x_lo, w, sums)
                    sums += tl.dot(x_hi, w, tl.zeros((PAIRS, BLOCK_R), dtype=tl.float32))  # [PAIRS, BLOCK_R]
                    if part > 0:
                        sums += tl.load(ws_r)
                elif part == 0:
                    sums = tl.dot(x_hi, w, tl.zeros((PAIRS, BLOCK_R), dtype=tl.float32))  # [PAIRS, BLOCK_R]
                else:
                    sums = tl.dot(x_hi, w, tl.load(ws_r))
                if part < PASSES - 1:
                    tl.store(ws_r, sums)
                else:
                    sums = sums * tl.load(inv_ptr)
                    bias = tl.load(wb_ptr + offs_r, mask=r_ok, other=0.0).to(tl.float32)  # [BLOCK_R]
                    if DIVIDE_BIAS:
                        sums += scale[:, None] * bias[None, :]
                    else:
                        sums += bias[None, :]
                    tl.store(o_pairs[:, None] + offs_r[None, :] * stride_or, sums.to(o_ptr.dtype.element_ty),
                             mask=pair_ok[:, None] & r_ok[None, :])


@triton.jit
def _outer_products(acc, a_rows, row_ok, b_cols, col_ok, S, stride_s, stride_h, TERMS: tl.constexpr,
                    BLOCK_S: tl.constexpr):
    """acc [rows, cols] += sum over the MSA rows s < S of a[s, rows]^T b[s, cols] (16-bit operands); a_rows
    [rows] and b_cols [cols] point at row s = 0. TERMS == 3: the operands' low halves lie stride_h further on, and
    the products a_hi b_lo, a_lo b_hi, a_hi b_hi (small terms first) are one loop over the rows taken three times,
    in whole steps of BLOCK_S rows each (one pipelined loop, one set of pointers); TERMS == 1 has a loop of its own,
    which derives no term a step."""
    if TERMS == 1:
        for s0 in range(0, S, BLOCK_S):
            s = s0 + tl.arange(0, BLOCK_S)
            s_ok = s < S
            s_off = s.to(tl.int64) * stride_s
            a = tl.load(a_rows[:, None] + s_off[None, :], mask=row_ok[:, None] & s_ok[None, :], other=0.0)  # [rows, BLOCK_S]
            b = tl.load(b_cols[None, :] + s_off[:, None], mask=s_ok[:, None] & col_ok[None, :], other=0.0)  # [BLOCK_S, cols]
            acc = tl.dot(a, b, acc)
    else:
        steps = tl.cdiv(S, BLOCK_S) * BLOCK_S  # the rows a term takes, S rounded up to whole steps
        for t0 in range(0, TERMS * steps, BLOCK_S):
            term = t0 // steps  # 0 (a_hi, b_lo), 1 (a_lo, b_hi), 2 (a_hi, b_hi)
            s = t0 - term * steps + tl.arange(0, BLOCK_S)
            s_ok = s < S
            s_off = s.to(tl.int64) * stride_s
            a_off = s_off + (term == 1).to(tl.int64) * stride_h
            b_off = s_off + (term == 0).to(tl.int64) * stride_h
            a = tl.load(a_rows[:, None] + a_off[None, :], mask=row_ok[:, None] & s_ok[None, :], other=0.0)
            b = tl.load(b_cols[None, :] + b_off[:, None], mask=s_ok[:, None] & col_ok[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def pair_scale(cnt_ptr, stride_ci, stride_cj, out_i, out_j, pair_ok, S, EPS: tl.constexpr,
                HAS_COUNTS: tl.constexpr):
    """The normalization's factor of the pairs (out_i, out_j) (any shape; float32): 1 / (EPS + count) for "count_ij_after"
    (EPS > 0), else 1 / max(count, 1); the count is S without a mask."""
    if HAS_COUNTS:
        count = tl.load(cnt_ptr + out_i.to(tl.int64) * stride_ci + out_j.to(tl.int64) * stride_cj, mask=pair_ok,
                        other=1.0)
    else:
        count = tl.zeros(pair_ok.shape, dtype=tl.float32) + S
    if EPS > 0:
        return 1.0 / (EPS + count)
    return 1.0 / tl.maximum(count, 1.0)


@triton.jit
def _by_pairs(x, BLOCK_I: tl.constexpr, CP: tl.constexpr, BLOCK_J: tl.constexpr, C: tl.constexpr):
    """x [(i p), (j q)] rearranged to [(i j), (p q)] (through shared memory)."""
    return tl.reshape(tl.permute(tl.reshape(x, (BLOCK_I, CP, BLOCK_J, C)), (0, 2, 1, 3)), (BLOCK_I * BLOCK_J, CP * C))


@triton.jit
def _grouped(tile, n_i, n_j, GROUP_I: tl.constexpr):
    """(block i, block j) of tile number `tile` in grouped order: GROUP_I blocks of rows i sweep the
    columns j together, so that neighbouring programs share a's and b's tiles in L2."""
    group = tile // (GROUP_I * n_j)
    first_i = group * GROUP_I
    size = tl.minimum(n_i - first_i, GROUP_I)
    return first_i + (tile % (GROUP_I * n_j)) % size, (tile % (GROUP_I * n_j)) // size


@triton.jit
def opm_project_kernel(
    x_ptr, stride_xb, stride_xr, stride_xc,  # a block of n rows i of the outer products: (B, n*C, N*C), row (i p),
    # column (j q), in the input's dtype, times x_scale
    cnt_ptr, stride_cb, stride_ci, stride_cj,  # HAS_COUNTS: the block's rows of the counts (B, n, N) float32
    w_ptr, stride_wr, stride_wk,  # out_proj weight: (R, C*C), flat index p*C + q
    wb_ptr,  # out_proj bias: (R,)
    o_ptr, stride_ob, stride_oi, stride_oj, stride_or,  # out: the block's rows (B, n, N, R)
    n, N, R, S, x_scale,  # x_scale: the power of two X was multiplied by
    N_BUCKET,  # autotuning key only
    C: tl.constexpr,
    DIVIDE_BIAS: tl.constexpr,  # "count_ij_after": the output divided after out_proj, its bias too
    EPS: tl.constexpr,  # added to the counts ("count_ij_after"), else the counts are clamped to >= 1
    HAS_COUNTS: tl.constexpr,  # without a mask every count is S
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,  # columns (p q) of out_proj's weight a step
    GROUP_I: tl.constexpr,
    PRECISION: tl.constexpr = "tf32",  # tl.dot's input_precision where X and W are float32
):
    """out[b, i, j, r] = (sum_(p q) X[b, (i p), (j q)] W[r, (p q)]) / x_scale times the pair's factor, plus the
    bias (divided too for "count_ij_after"), for a tile of BLOCK_I x BLOCK_J pairs and BLOCK_R of the outputs:
    the pairs are the M of the product, each pair's (p q) block read as C runs of C columns of X, the weight its
    [BLOCK_K, BLOCK_R] operand; float32 sums. Tiles go in grouped order (neighbouring programs share rows of X),
    a tile's blocks of outputs r consecutively."""
    PAIRS: tl.constexpr = BLOCK_I * BLOCK_J
    n_r = tl.cdiv(R, BLOCK_R)
    n_i = tl.cdiv(n, BLOCK_I)
    n_j = tl.cdiv(N, BLOCK_J)
    tiles = n_i * n_j
    tile = tl.program_id(0) // n_r
    bb = (tile // tiles).to(tl.int64)
    blk_i, blk_j = _grouped(tile % tiles, n_i, n_j, GROUP_I)
    pair = tl.arange(0, PAIRS)
    i = blk_i * BLOCK_I + pair // BLOCK_J  # [PAIRS]
    j = blk_j * BLOCK_J + pair % BLOCK_J
    pair_ok = (i < n) & (j < N)
    offs_r = (tl.program_id(0) % n_r) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    r_ok = offs_r < R
    x_pairs = x_ptr + bb * stride_xb + i.to(tl.int64) * (C * stride_xr) + j.to(tl.int64) * (C * stride_xc)  # [PAIRS]
    acc = tl.zeros((PAIRS, BLOCK_R), dtype=tl.float32)
    for k0 in range(0, C * C, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # (p q)
        x = tl.load(x_pairs[:, None] + ((offs_k // C) * stride_xr + (offs_k % C) * stride_xc)[None, :],
                    mask=pair_ok[:, None], other=0.0)  # [PAIRS, BLOCK_K]
        w = tl.load(w_ptr + offs_r[None, :] * stride_wr + offs_k[:, None] * stride_wk, mask=r_ok[None, :],
                    other=0.0)  # [BLOCK_K, BLOCK_R]
        acc = tl.dot(x, w, acc, input_precision=PRECISION)  # [PAIRS, BLOCK_R]
    scale = pair_scale(cnt_ptr + bb * stride_cb, stride_ci, stride_cj, i, j, pair_ok, S, EPS, HAS_COUNTS)  # [PAIRS]
    bias = tl.load(wb_ptr + offs_r, mask=r_ok, other=0.0).to(tl.float32)  # [BLOCK_R]
    if DIVIDE_BIAS:
        out = (acc / x_scale + bias[None, :]) * scale[:, None]
    else:
        out = acc * (scale / x_scale)[:, None] + bias[None, :]
    o_pairs = o_ptr + bb * stride_ob + i.to(tl.int64) * stride_oi + j.to(tl.int64) * stride_oj  # [PAIRS]
    tl.store(o_pairs[:, None] + offs_r[None, :] * stride_or, out.to(o_ptr.dtype.element_ty),
             mask=pair_ok[:, None] & r_ok[None, :])


@triton.jit
def operand_maxima_kernel(
    ab_ptr, M,  # the masked projections [a | b]: (M, 2C) float32, contiguous
    w_ptr, W_SIZE,  # out_proj's weight, (W_SIZE,) float32, contiguous
    partial_ptr,  # out: (programs, 4) float32: each program's largest finite |a|, |b|, |w| and a 0
    AB_PROGRAMS, blocks_per_program,  # the first AB_PROGRAMS programs take ab, blocks_per_program row blocks each
    C: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    slot = tl.arange(0, 4)
    if pid < AB_PROGRAMS:
        cols = tl.arange(0, 2 * C)
        largest = tl.zeros((2 * C,), dtype=tl.float32)
        for block in range(blocks_per_program):
            rows = (pid * blocks_per_program + block) * BLOCK_M + tl.arange(0, BLOCK_M)
            x = tl.load(ab_ptr + rows.to(tl.int64)[:, None] * (2 * C) + cols[None, :], mask=(rows < M)[:, None],
                        other=0.0)  # [BLOCK_M, 2C]
            largest = tl.maximum(largest, tl.max(finite_abs(x), axis=0))
        a_max = tl.max(tl.where(cols < C, largest, 0.0), axis=0)
        b_max = tl.max(tl.where(cols >= C, largest, 0.0), axis=0)
        maxima = tl.where(slot == 0, a_max, tl.where(slot == 1, b_max, 0.0))  # [4]
    else:
        offs = (pid - AB_PROGRAMS).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
        w = tl.load(w_ptr + offs, mask=offs < W_SIZE, other=0.0)  # [BLOCK_W]
        maxima = tl.where(slot == 2, tl.max(finite_abs(w), axis=0), 0.0)
    tl.store(partial_ptr + pid * 4 + slot, maxima)


@triton.jit
def float16_operands_kernel(
    ab_ptr, M,  # the masked projections [a | b]: (M, 2C) float32, contiguous
    w_ptr, W_SIZE,  # out_proj's weight, (W_SIZE,) float32, contiguous
    partial_ptr, PARTIALS,  # operand_maxima_kernel's (PARTIALS, 4) maxima
    ab_h_ptr, stride_abh,  # out: (TERMS == 3 ? 2 : 1, M, 2C) float16, the low halves stride_abh after the high
    w_h_ptr, stride_wh,  # out: (TERMS == 3 ? 2 : 1, W_SIZE) float16
    inv_ptr,  # out: (1,) float32, 1 / the product of the three scales
    AB_PROGRAMS, blocks_per_program,  # as operand_maxima_kernel's
    TERMS: tl.constexpr,  # 3: high and low halves; 1: high halves alone
    C: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    pid = tl.program_id(0)
    slot = tl.arange(0, 4)
    maxima = tl.zeros((4,), dtype=tl.float32)
    for p0 in range(0, PARTIALS, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        part = tl.load(partial_ptr + p[:, None] * 4 + slot[None, :], mask=(p < PARTIALS)[:, None], other=0.0)  # [BLOCK_P, 4]
        maxima = tl.maximum(maxima, tl.max(part, axis=0))
    scales = power_of_two_scales(maxima)  # [4]: a, b, w, (unused)
    s_a = tl.sum(tl.where(slot == 0, scales, 0.0), axis=0)
    s_b = tl.sum(tl.where(slot == 1, scales, 0.0), axis=0)
    s_w = tl.sum(tl.where(slot == 2, scales, 0.0), axis=0)
    if pid == 0:
        tl.store(inv_ptr, (1.0 / s_a) * (1.0 / s_b) * (1.0 / s_w))
    if pid < AB_PROGRAMS:
        cols = tl.arange(0, 2 * C)
        col_scale = tl.where(cols < C, s_a, s_b)  # [2C]
        for block in range(blocks_per_program):
            rows = (pid * blocks_per_program + block) * BLOCK_M + tl.arange(0, BLOCK_M)
            offs = rows.to(tl.int64)[:, None] * (2 * C) + cols[None, :]  # [BLOCK_M, 2C]
            ok = (rows < M)[:, None]
            x = tl.load(ab_ptr + offs, mask=ok, other=0.0) * col_scale[None, :]
            store_halves(ab_h_ptr + offs, stride_abh, x, ok, TERMS)
    else:
        offs = (pid - AB_PROGRAMS).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
        ok = offs < W_SIZE
        store_halves(w_h_ptr + offs, stride_wh, tl.load(w_ptr + offs, mask=ok, other=0.0) * s_w, ok, TERMS)
