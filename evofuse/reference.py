"""Every operation in plain PyTorch.

This module is the single definition of what evofuse computes: the tests and benchmarks import it,
the float64 evaluations that the numerics contract is checked against run through it, and it is the
path taken for CPU tensors. It works for any floating dtype, float64 included. Masks are 0/1 tensors
of any real dtype (bool, int, float); counts of unmasked rows are always taken in float32 or wider
so that they stay exact in low-precision runs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

NORMALIZATIONS = ("count_i", "count_ij_after", "count_ij")
LAYER_NORM_EPS = 1e-5
COUNT_EPS = 1e-3
MASK_LOGIT = -1e9
MASK_MODES = ("replace", "add")  # row attention: what a masked key's -1e9 logit passes back (see below)


def _count_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def outer_product_mean_reference(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    proj_a_weight: torch.Tensor,
    proj_a_bias: torch.Tensor,
    proj_b_weight: torch.Tensor,
    proj_b_bias: torch.Tensor,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    normalization: str = "count_i",
    count_eps: float = COUNT_EPS,
) -> torch.Tensor:
    """Outer Product Mean, written as the definition.

    msa_repr (B, S, N, D) float; msa_mask (B, S, N) 0/1 or None; proj weights (c, D), proj biases (c,) or None,
    out_proj weight (pair_dim, c*c); count_eps is what "count_ij_after" adds to the counts. Returns
    (B, N, N, pair_dim) in msa_repr's dtype. Materializes the (B, N, N, c*c) outer product: use it for reference
    and small shapes only.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    a, b, counts = outer_product_mean_projections(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias,
                                                  proj_a_weight, proj_a_bias, proj_b_weight, proj_b_bias)
    return outer_product_mean_rows(a, b, counts, counts, out_proj_weight, out_proj_bias, normalization, count_eps)


def outer_product_mean_projections(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, proj_a_weight,
                                   proj_a_bias, proj_b_weight, proj_b_bias):
    """The first half of the Outer Product Mean: masked projections a, b (B, S, N, c) in msa_repr's
    dtype, and the mask as exact counts (B, S, N) in float32 (float64 for float64 inputs)."""
    B, S, N, D = msa_repr.shape
    dtype = msa_repr.dtype
    if msa_mask is None:
        msa_mask = torch.ones(B, S, N, dtype=dtype, device=msa_repr.device)
    mask_x = msa_mask.to(dtype)[..., None]  # (B, S, N, 1)
    x = F.layer_norm(msa_repr, (D,), layer_norm_weight, layer_norm_bias, LAYER_NORM_EPS)
    a = F.linear(x, proj_a_weight, proj_a_bias) * mask_x
    b = F.linear(x, proj_b_weight, proj_b_bias) * mask_x
    return a, b, msa_mask.to(_count_dtype(dtype))


def outer_product_mean_rows(a_rows, b, counts_rows, counts, out_proj_weight, out_proj_bias, normalization="count_i",
                            count_eps=COUNT_EPS):
    """The second half, for a block of output rows i: a_rows (B, S, n, c) and counts_rows (B, S, n) are
    those rows of a and of the counts; b (B, S, N, c) and counts (B, S, N) are whole.
    Returns out[:, rows] (B, n, N, pair_dim)."""
    B, S, n, c = a_rows.shape
    N = b.shape[2]
    dtype = a_rows.dtype
    outer = torch.einsum("bsip,bsjq->bijpq", a_rows, b).reshape(B, n, N, c * c)
    if normalization == "count_i":
        den = counts_rows.sum(1).clamp(min=1)  # (B, n): depends on i only
        return F.linear(outer / den[:, :, None, None].to(dtype), out_proj_weight, out_proj_bias)
    norm = torch.einsum("bsi,bsj->bij", counts_rows, counts)  # (B, n, N)
    if normalization == "count_ij_after":
        out = F.linear(outer, out_proj_weight, out_proj_bias)
        return out / (count_eps + norm)[..., None].to(dtype)
    return F.linear(outer / norm.clamp(min=1)[..., None].to(dtype), out_proj_weight, out_proj_bias)


def msa_row_attention_reference(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    query_weight: torch.Tensor,
    query_bias: torch.Tensor,
    key_weight: torch.Tensor,
    key_bias: torch.Tensor,
    value_weight: torch.Tensor,
    value_bias: torch.Tensor,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor,
    pair_bias_weight: torch.Tensor,
    pair_bias_bias: torch.Tensor,
    num_heads: int,
    dropout: float = 0.0,
    training: bool = False,
    pair_norm_weight: torch.Tensor | None = None,
    pair_norm_bias: torch.Tensor | None = None,
    mask_mode: str = "replace",
) -> torch.Tensor:
    """MSA row attention with pair bias, written as the definition.

    msa_repr (B, S, N, D); pair_repr (B, N, N, P); msa_mask (B, S, N) or None; the q/k/v/gate weights
    (H, D) and out weight (D, H) for an inner width H = num_heads * head_dim, every bias (out width,) or None;
    pair_bias weight (num_heads, P); pair_norm_weight and pair_norm_bias (P,), when given, a LayerNorm of the
    pair before its projection. mask_mode: a masked key's logit is -1e9 in the forward either way; "replace"
    (the seed module) gives it no gradient, "add" passes it on as the models' float32 `logit + inf * (mask - 1)`
    does (which rounds to -1e9). Returns (B, S, N, D) in msa_repr's dtype. Materializes the (B, S, h, N, N)
    logits: use it for reference and small shapes only.
    """
    if pair_norm_weight is not None:
        pair_repr = F.layer_norm(pair_repr, pair_repr.shape[-1:], pair_norm_weight, pair_norm_bias, LAYER_NORM_EPS)
    bias = F.linear(pair_repr, pair_bias_weight, pair_bias_bias).permute(0, 3, 1, 2)  # (B, h, N, N)
    return msa_row_attention_with_bias(msa_repr, bias, msa_mask, layer_norm_weight, layer_norm_bias, query_weight,
                                       query_bias, key_weight, key_bias, value_weight, value_bias, gate_weight,
                                       gate_bias, out_proj_weight, out_proj_bias, num_heads, dropout, training,
                                       mask_mode)


def msa_row_attention_with_bias(msa_repr, bias, msa_mask, layer_norm_weight, layer_norm_bias, query_weight,
                                query_bias, key_weight, key_bias, value_weight, value_bias, gate_weight, gate_bias,
                                out_proj_weight, out_proj_bias, num_heads, dropout=0.0, training=False,
                                mask_mode="replace"):
    """Row attention given the pair bias (B, h, N, N) already projected: the MSA rows are independent
    of each other given it, so any block of rows s can be evaluated alone. layer_norm_weight None: no LayerNorm
    (attention with pair bias takes its input normalized)."""
    B, S, N, D = msa_repr.shape
    h = num_heads
    H = query_weight.shape[0]  # the inner width num_heads * head_dim
    d = H // h
    dtype = msa_repr.dtype
    x = msa_repr if layer_norm_weight is None else F.layer_norm(msa_repr, (D,), layer_norm_weight, layer_norm_bias,
                                                                LAYER_NORM_EPS)

    def heads(t: torch.Tensor) -> torch.Tensor:  # (B, S, N, H) -> (B, S, h, N, d)
        return t.reshape(B, S, N, h, d).permute(0, 1, 3, 2, 4)

    q = heads(F.linear(x, query_weight, query_bias))
    k = heads(F.linear(x, key_weight, key_bias))
    v = heads(F.linear(x, value_weight, value_bias))
    g = torch.sigmoid(heads(F.linear(x, gate_weight, gate_bias)))

    logit = torch.einsum("bshid,bshjd->bshij", q, k) / math.sqrt(d) + bias[:, None]
    if msa_mask is not None:
        fill = max(MASK_LOGIT, torch.finfo(dtype).min)  # -1e9 overflows float16
        masked = msa_mask[:, :, None, None, :] == 0
        if mask_mode == "add":  # the value -1e9, the gradient of the logit itself
            logit = torch.where(masked, fill + (logit - logit.detach()), logit)
        else:
            logit = logit.masked_fill(masked, fill)
    p = F.dropout(torch.softmax(logit, dim=-1), dropout, training)
    o = g * torch.einsum("bshij,bshjd->bshid", p, v)  # (B, S, h, N, d)
    o = o.permute(0, 1, 3, 2, 4).reshape(B, S, N, H)
    return F.linear(o, out_proj_weight, out_proj_bias)


def attention_tile_reference(q, k, v, bias, mask, mask_mode="replace"):
    """One key tile of the attention core, as ring attention takes it: queries q (B, S, N, h, d) against the tile's
    keys k and values v (B, S, N, h, d), the bias's tile (B, h, N, N) or None and the keys' mask (B, S, N) or None
    (masked keys as in `msa_row_attention_with_bias`). Returns (o (B, S, N, h, d): the softmax over the tile's keys
    times v, un-gated, in q's dtype; lse (B, S, N, h): the natural log of the sum of exp(logit) over those keys, in
    float64, which holds -1e9 + log N). Tiles merge as lse = logsumexp_t lse_t, o = sum_t exp(lse_t - lse) o_t."""
    logit = torch.einsum("bsihd,bsjhd->bshij", q, k) / math.sqrt(q.shape[-1])
    if bias is not None:
        logit = logit + bias[:, None]
    if mask is not None:
        fill = max(MASK_LOGIT, torch.finfo(q.dtype).min)
        masked = mask[:, :, None, None, :] == 0
        logit = torch.where(masked, fill + (logit - logit.detach()), logit) if mask_mode == "add" else (
            logit.masked_fill(masked, fill))
    lse = torch.logsumexp(logit.double(), -1)
    o = torch.einsum("bshij,bsjhd->bsihd", torch.softmax(logit, -1), v)
    return o, lse.transpose(2, 3)


def attention_pair_bias_reference(single_repr, pair_repr, mask, query_weight, query_bias, key_weight, value_weight,
                                  gate_weight, out_weight, pair_norm_weight, pair_norm_bias, pair_weight, *,
                                  num_heads: int) -> torch.Tensor:
    """Attention with pair bias over the single representation (AF3 Algorithm 24, Boltz-2's form): q = s Wq + bq,
    k = s Wk, v = s Wv, g = sigmoid(s Wg), the bias LN(z) Wz, softmax(q k / sqrt(d) + bias) v gated by g, then Wo.

    single_repr (B, N, c_s), already normalized (the models' LayerNorm or AdaLN comes before); pair_repr (B, N, N,
    c_z), or, where pair_weight is None, the bias itself (B, N, N, h) projected once (the diffusion transformer's);
    mask (B, N) over the keys, or None: a masked key's logit is -1e9 with the gradient of the logit, as the models'
    float32 `logit - inf * (1 - mask)` for any row with a key unmasked (a row whose keys are all masked averages v
    over all keys); the q, k, v and gate weights (H, c_s) for H = num_heads * head_dim, query_bias (H,) or None;
    out_weight (c_s, H); pair_norm_weight, pair_norm_bias (c_z,) or None; pair_weight (h, c_z). Returns (B, N, c_s)
    in single_repr's dtype."""
    if pair_weight is None:
        bias = pair_repr.permute(0, 3, 1, 2)
    else:
        if pair_norm_weight is not None:
            pair_repr = F.layer_norm(pair_repr, pair_repr.shape[-1:], pair_norm_weight, pair_norm_bias,
                                     LAYER_NORM_EPS)
        bias = F.linear(pair_repr, pair_weight).permute(0, 3, 1, 2)  # (B, h, N, N)
    out = msa_row_attention_with_bias(single_repr[:, None], bias, None if mask is None else mask[:, None], None, None,
                                      query_weight, query_bias, key_weight, None, value_weight, None, gate_weight, None,
                                      out_weight, None, num_heads, mask_mode="add")
    return out[:, 0]


PAIR_MASK_MODES = ("relative", "add")  # pair-weighted averaging: how the mask term meets the logits (see below)
PAIR_MASK_INF = 1e6  # Boltz's `inf`: a masked pair's weight logit gets (1 - mask) * -PAIR_MASK_INF added


def pair_weighted_averaging_reference(
    msa_repr: torch.Tensor,
    pair_repr: torch.Tensor,
    pair_mask: torch.Tensor | None,
    norm_m_weight: torch.Tensor,
    norm_m_bias: torch.Tensor,
    norm_z_weight: torch.Tensor,
    norm_z_bias: torch.Tensor,
    proj_m_weight: torch.Tensor,
    proj_g_weight: torch.Tensor,
    proj_z_weight: torch.Tensor,
    proj_o_weight: torch.Tensor,
    num_heads: int,
    inf: float = PAIR_MASK_INF,
    mask_mode: str = "relative",
) -> torch.Tensor:
    """Pair-weighted averaging (AF3's Algorithm 10 in Boltz's form), written as the definition.

    msa_repr (B, S, N, c_m); pair_repr (B, N, N, c_z); pair_mask (B, N, N) 0/1 or None (all ones);
    proj_m_weight, proj_g_weight (h*c, c_m); proj_z_weight (h, c_z); proj_o_weight (c_m, h*c); no biases.
    Returns (B, S, N, c_m) in msa_repr's dtype:

        v = heads(proj_m(LN_m(m))), g = sigmoid(heads(proj_g(LN_m(m))))       (B, S, N, h, c)
        w = softmax_j(proj_z(LN_z(z))[b, i, j, h] + (1 - mask[b, i, j]) * -inf)  (B, h, N, N)
        out = proj_o(merge_heads(g * sum_j w[b, h, i, j] v[b, s, j, h]))

    mask_mode "relative": the sum in exact arithmetic (a row of i whose pairs are all masked: the softmax of its
    logits); "add": in float32, as the models compute it (such a row: the softmax of the logits rounded to
    inf's float32 spacing, uniform for inf = 1e9).
    """
    B, S, N, _ = msa_repr.shape
    h = num_heads
    m = F.layer_norm(msa_repr, (msa_repr.shape[-1],), norm_m_weight, norm_m_bias, LAYER_NORM_EPS)
    z = F.layer_norm(pair_repr, (pair_repr.shape[-1],), norm_z_weight, norm_z_bias, LAYER_NORM_EPS)
    v = F.linear(m, proj_m_weight).reshape(B, S, N, h, -1).permute(0, 3, 1, 2, 4)  # (B, h, S, N, c)
    logits = F.linear(z, proj_z_weight).permute(0, 3, 1, 2)  # (B, h, N, N)
    if pair_mask is not None and mask_mode == "add":  # a masked pair's logit - inf rounded to float32, as the models
        # compute it (their other logits stay as they are)
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (16-bit logits: float32, as the models)
        rounded = (logits.float() - inf).to(x.dtype)
        added = x + (rounded - x).detach()  # that value, the gradient of the logit itself
        w = torch.softmax(torch.where((pair_mask == 0)[:, None], added, x), dim=-1).to(logits.dtype)
    else:
        if pair_mask is not None:
            # (1 - mask) * -inf, less what every pair of row i has in common (a constant of the row, which the
            # softmax ignores): a row whose pairs are all masked keeps its logits' precision
            masked = 1 - pair_mask.to(logits.dtype)
            logits = logits - inf * (masked - masked.amin(-1, keepdim=True))[:, None]
        w = torch.softmax(logits, dim=-1)
    g = torch.sigmoid(F.linear(m, proj_g_weight))
    o = torch.einsum("bhij,bhsjd->bhsid", w, v).permute(0, 2, 3, 1, 4).reshape(B, S, N, -1)
    return F.linear(g * o, proj_o_weight)


TRIANGLE_MIN_INF = 1e9  # from this `inf` on, float32 rounds logit - inf to -inf for |logit| < 32: a masked key's term


def triangle_attention_reference(pair_repr, pair_mask, layer_norm_weight, layer_norm_bias, linear_weight,
                                 query_weight, key_weight, value_weight, gate_weight, gate_bias, out_weight, out_bias,
                                 num_heads, starting=True, inf=TRIANGLE_MIN_INF, transpose_bias=False):
    """Triangle attention around the starting node (AF2 Algorithm 13) or the ending node (14), written as the models
    compute it: z (B, N, N, c) (ending node: z and the mask transposed first, the output transposed back), x = LN(z),
    q, k, v, g = heads of x's projections (no q/k/v biases), the triangle bias linear(x)[b, j, k, h] shared by every
    row i (with transpose_bias, OpenFold3's flag: linear(x)[b, k, j, h]), and inf * (mask[b, i, k] - 1) added to the
    logits of row i. For inf >= TRIANGLE_MIN_INF the mask term is
    the value -1e9 with the gradient of the logit (row attention's "add" mode: what float32 arithmetic gives the
    models; exact elsewhere); below it, inf * (mask - 1) is added in the input's dtype. Returns (B, N, N, c)."""
    if not starting:
        pair_repr = pair_repr.transpose(1, 2)
        pair_mask = None if pair_mask is None else pair_mask.transpose(1, 2)
    weights = (layer_norm_weight, layer_norm_bias, query_weight, None, key_weight, None, value_weight, None,
               gate_weight, gate_bias, out_weight, out_bias)
    if inf >= TRIANGLE_MIN_INF or pair_mask is None:
        bias_source = pair_repr.transpose(1, 2) if transpose_bias else pair_repr
        out = msa_row_attention_reference(pair_repr, bias_source, pair_mask, *weights, linear_weight, None,
                                          num_heads=num_heads, pair_norm_weight=layer_norm_weight,
                                          pair_norm_bias=layer_norm_bias, mask_mode="add")
    else:  # the mask term as a bias of its own row i: rows of one residue i at a time are rows of row attention
        x = F.layer_norm(pair_repr, pair_repr.shape[-1:], layer_norm_weight, layer_norm_bias, LAYER_NORM_EPS)
        bias = F.linear(x, linear_weight).permute(0, 3, 1, 2)  # (B, h, N, N)
        bias = bias.transpose(2, 3) if transpose_bias else bias
        term = inf * (pair_mask.to(pair_repr.dtype) - 1)  # (B, I, K)
        rows = [msa_row_attention_with_bias(pair_repr[:, i:i + 1], bias + term[:, None, i:i + 1, :], None, *weights,
                                            num_heads) for i in range(pair_repr.shape[1])]
        out = torch.cat(rows, dim=1) if rows else pair_repr.new_empty(pair_repr.shape[:3] + (out_weight.shape[0],))
    return out if starting else out.transpose(1, 2)


def triangle_multiplication_reference(pair_repr, pair_mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias,
                                      g_in_weight, g_in_bias, norm_out_weight, norm_out_bias, p_out_weight, p_out_bias,
                                      g_out_weight, g_out_bias, outgoing=True):
    """The triangle multiplicative update, outgoing (AF2 Algorithm 11, AF3 12) or incoming (12, 13), in Boltz-2's
    and AF3's form (OpenFold's separate a and b projections stacked): z (B, N, N, c_z), x = LN_in(z); a and b (the
    halves of p_in(x) * sigmoid(g_in(x)), c channels each) times the mask (B, N, N) or None; outgoing
    t[b, i, j] = sum_k a[b, i, k] b[b, j, k], incoming sum_k a[b, k, i] b[b, k, j]; out = p_out(LN_out(t)) *
    sigmoid(g_out(x)). Weights: p_in, g_in (2c, c_z); p_out (c_z, c); g_out (c_z, c_z); biases (or None) of their
    output widths; LayerNorms of eps 1e-5. Every product in the input's dtype. Returns (B, N, N, c_z)."""
    x = F.layer_norm(pair_repr, pair_repr.shape[-1:], norm_in_weight, norm_in_bias, LAYER_NORM_EPS)
    ab = F.linear(x, p_in_weight, p_in_bias) * torch.sigmoid(F.linear(x, g_in_weight, g_in_bias))
    if pair_mask is not None:
        ab = ab * pair_mask.to(ab.dtype)[..., None]
    a, b = ab.chunk(2, dim=-1)
    t = torch.einsum("bikc,bjkc->bijc" if outgoing else "bkic,bkjc->bijc", a, b)
    t = F.layer_norm(t, t.shape[-1:], norm_out_weight, norm_out_bias, LAYER_NORM_EPS)
    return F.linear(t, p_out_weight, p_out_bias) * torch.sigmoid(F.linear(x, g_out_weight, g_out_bias))


def msa_column_attention_reference(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, query_weight, key_weight,
                                   value_weight, gate_weight, gate_bias, out_weight, out_bias, num_heads,
                                   inf=TRIANGLE_MIN_INF):
    """MSA column attention (AF2 Algorithm 8) as OpenFold computes it: the MSA (B, S, N, D) and its mask transposed,
    attention over the S rows within each residue's column with no pair bias, inf * (mask - 1) added to a masked row's
    logits (for inf >= TRIANGLE_MIN_INF the value -1e9 with the gradient of the logit, as in triangle attention), gated;
    q, k and v without biases. Returns (B, S, N, D)."""
    x = msa_repr.transpose(1, 2)  # (B, N, S, D): a residue's column as a row
    mask = None if msa_mask is None else msa_mask.transpose(1, 2)
    bias = x.new_zeros(x.shape[0], num_heads, x.shape[2], x.shape[2])
    weights = (layer_norm_weight, layer_norm_bias, query_weight, None, key_weight, None, value_weight, None,
               gate_weight, gate_bias, out_weight, out_bias)
    if inf >= TRIANGLE_MIN_INF or mask is None:
        out = msa_row_attention_with_bias(x, bias, mask, *weights, num_heads, mask_mode="add")
    else:  # the mask term as a bias of its own column: one residue's column at a time
        term = inf * (mask.to(x.dtype) - 1)  # (B, N, S)
        cols = [msa_row_attention_with_bias(x[:, i:i + 1], bias + term[:, None, i:i + 1, :], None, *weights, num_heads)
                for i in range(x.shape[1])]
        out = torch.cat(cols, dim=1) if cols else x.new_empty(x.shape[:3] + (out_weight.shape[0],))
    return out.transpose(1, 2)


ACTIVATIONS = ("swiglu", "relu")  # the transition's: silu(a) * b (AF3 Algorithm 11), relu(a) (AF2 Algorithms 9, 15)


def transition_reference(x, mask, layer_norm_weight, layer_norm_bias, a_weight, a_bias, b_weight, b_bias, out_weight,
                         out_bias, activation="swiglu"):
    """The transition, as the models compute it: y = LN(x) (eps 1e-5); h = silu(a(y)) * b(y) ("swiglu") or relu(a(y))
    ("relu", b_weight and b_bias None); out = o(h) times the mask (x's leading shape, or None) as a column. x (..., D);
    a, b (H, D) with biases (H,) or None; o (C, H) with its bias (C,) or None. Every product in x's dtype. Returns
    (..., C)."""
    y = F.layer_norm(x, x.shape[-1:], layer_norm_weight, layer_norm_bias, LAYER_NORM_EPS)
    a = F.linear(y, a_weight, a_bias)
    h = F.silu(a) * F.linear(y, b_weight, b_bias) if activation == "swiglu" else F.relu(a)
    out = F.linear(h, out_weight, out_bias)
    return out if mask is None else out * mask.to(out.dtype)[..., None]


GLOBAL_COUNT_EPS = 1e-10  # OpenFold's MSAColumnGlobalAttention default (its model config passes 1e-8)


def msa_column_global_attention_reference(msa_repr, msa_mask, layer_norm_weight, layer_norm_bias, query_weight,
                                          query_bias, key_weight, key_bias, value_weight, value_bias, gate_weight,
                                          gate_bias, out_weight, out_bias, num_heads, inf=1e9, eps=GLOBAL_COUNT_EPS):
    """MSA global column attention (AF2 Algorithm 19, the extra-MSA stack's) as OpenFold computes it: in each residue's
    column, one query a head from the masked mean of the LayerNorm'd rows, q = W_q mean + b_q scaled by d**-0.5; one
    key and one value a row shared by the heads (width d); inf * (mask - 1) added to a masked row's logit (for inf >=
    TRIANGLE_MIN_INF the value -1e9 with the logit's gradient, as in triangle attention); each row's output its own
    sigmoid gate times its column's attention result, then W_o. msa_repr (B, S, N, D); msa_mask (B, S, N)
    or None; query_weight, gate_weight (h*d, D); key_weight, value_weight (d, D); out_weight (D, h*d); every bias of its
    output's width, or None. Returns (B, S, N, D)."""
    x = msa_repr.transpose(1, 2)  # (B, N, S, D): a residue's column as a row
    B, N, S, _ = x.shape
    mask = x.new_ones(B, N, S) if msa_mask is None else msa_mask.transpose(1, 2).to(x.dtype)
    m = F.layer_norm(x, x.shape[-1:], layer_norm_weight, layer_norm_bias, LAYER_NORM_EPS)
    q = torch.sum(m * mask[..., None], dim=-2) / (torch.sum(mask, dim=-1)[..., None] + eps)  # (B, N, D)
    q = F.linear(q, query_weight, query_bias)
    d = q.shape[-1] // num_heads
    q = (q * d ** -0.5).view(B, N, num_heads, d)
    k = F.linear(m, key_weight, key_bias)  # (B, N, S, d)
    v = F.linear(m, value_weight, value_bias)
    a = torch.matmul(q, k.transpose(-1, -2))  # (B, N, h, S)
    if inf >= TRIANGLE_MIN_INF:  # the value -1e9 with the logit's gradient, as float32 rounds logit - inf
        a = torch.where(mask[..., None, :] == 0, max(MASK_LOGIT, torch.finfo(a.dtype).min) + (a - a.detach()), a)
    else:
        a = a + (inf * (mask - 1))[..., None, :]
    o = torch.matmul(torch.softmax(a, dim=-1), v)  # (B, N, h, d)
    g = torch.sigmoid(F.linear(m, gate_weight, gate_bias)).view(B, N, S, num_heads, d)
    out = F.linear((o[:, :, None] * g).reshape(B, N, S, num_heads * d), out_weight, out_bias)
    return out.transpose(1, 2)
