"""The benchmark's peers: other implementations of each operation (the models' kernel libraries, PyTorch's
attention paths, the models' own modules), each a builder of a callable taking the suite case's inputs. An
implementation that is not installed fails at its row, which keeps the reason. The lab's, beside the package:
`benchmarks/bench.py` runs `evofuse bench` with them."""

from __future__ import annotations

from functools import partial

import torch

from evofuse._timing import autocast_call, compiled_reduce_overhead, graphed_compiled, graphed_reference

# ---------------------------------------------------------------- peers: Outer Product Mean


def _opm_projections(mod, msa, mask):
    x = mod.layer_norm(msa)
    m = mask.to(x.dtype)[..., None]
    return mod.proj_a(x) * m, mod.proj_b(x) * m


def _opm_folded_einsum(mod, msa, mask):
    """einsum("bsic,bsjd,pcd->bijp") with out_proj's weight as the third operand (seed normalization)."""
    a, b = _opm_projections(mod, msa, mask)
    c = mod.hidden_dim
    w = mod.out_proj.weight.view(-1, c, c)
    den = mask.sum(1).clamp(min=1).to(a.dtype)
    return torch.einsum("bsic,bsjd,pcd->bijp", a, b, w) / den[:, :, None, None] + mod.out_proj.bias


def _opm_chunked_eager(mod, msa, mask, chunk=64):
    """Eager over blocks of 64 residues i (seed normalization)."""
    a, b = _opm_projections(mod, msa, mask)
    B, S, N, c = a.shape
    den = mask.sum(1).clamp(min=1).to(a.dtype)
    out = torch.empty(B, N, N, mod.out_proj.out_features, dtype=a.dtype, device=a.device)
    for i0 in range(0, N, chunk):
        outer = torch.einsum("bsip,bsjq->bijpq", a[:, :, i0:i0 + chunk], b).reshape(B, -1, N, c * c)
        out[:, i0:i0 + chunk] = mod.out_proj(outer / den[:, i0:i0 + chunk, None, None])
    return out


# ---------------------------------------------------------------- peers: row attention


def _flex_peer():
    from torch.nn.attention.flex_attention import flex_attention

    # a fresh static-shape compile per case: with automatic dynamic shapes a second suite shape would
    # recompile flex_attention for symbolic sizes, several times slower
    flex = torch.compile(flex_attention, dynamic=False)

    def run(mod, msa, pair, mask):
        B, S, N, D = msa.shape
        h, d = mod.num_heads, mod.head_dim
        x = mod.layer_norm(msa)

        def heads(t):
            return t.view(B * S, N, h, d).transpose(1, 2)

        q, k, v = heads(mod.query(x)), heads(mod.key(x)), heads(mod.value(x))
        bias = mod.pair_bias(pair).permute(0, 3, 1, 2).contiguous()  # (B, h, N, N)
        keep = mask.reshape(B * S, N) != 0

        def score_mod(score, bs, hh, qi, kj):
            return torch.where(keep[bs, kj], score + bias[bs // S, hh, qi, kj], -1e9)

        o = flex(q, k, v, score_mod=score_mod)  # (B*S, h, N, d)
        o = o.transpose(1, 2).reshape(B, S, N, D) * torch.sigmoid(mod.gate(x))
        return mod.out_proj(o)

    return run


def _cueq_peer():
    """cuEquivariance's attention_pair_bias: the whole module, the MSA rows as its multiplicity."""
    from cuequivariance_torch import attention_pair_bias

    def run(mod, msa, pair, mask):
        B, S, N, D = msa.shape
        out = attention_pair_bias(
            msa.reshape(B * S, N, D), pair, mask.reshape(B * S, N), mod.num_heads,
            mod.layer_norm.weight, mod.layer_norm.bias, mod.query.weight, mod.query.bias, mod.key.weight,
            mod.value.weight, mod.gate.weight, mod.out_proj.weight, w_proj_z=mod.pair_bias.weight,
            b_proj_o=mod.out_proj.bias, b_proj_z=mod.pair_bias.bias, inf=1e9, b_proj_k=mod.key.bias,
            b_proj_v=mod.value.bias, b_proj_g=mod.gate.bias)
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(B, S, N, D)

    return run


def _sdpa_column_peer(mod, msa, mask):
    """Column attention on `torch.nn.functional.scaled_dot_product_attention` with the additive mask (1e9 (mask - 1)),
    the projections in eager PyTorch (the peer column attention's training target is set against)."""
    parts, h, d = mod._msa_att, mod.no_heads, mod.c_hidden
    mha = parts.mha
    x = parts.layer_norm_m(msa.transpose(1, 2))  # (B, N, S, D)
    B, N, S, _ = x.shape

    def heads(t):  # (B, N, S, h*d) -> (B*N, h, S, d)
        return t.reshape(B * N, S, h, d).transpose(1, 2)

    bias = 1e9 * (mask.transpose(1, 2).reshape(B * N, 1, 1, S).to(x.dtype) - 1)
    o = torch.nn.functional.scaled_dot_product_attention(heads(mha.linear_q(x)), heads(mha.linear_k(x)),
                                                         heads(mha.linear_v(x)), attn_mask=bias)
    o = o.transpose(1, 2).reshape(B, N, S, h * d) * torch.sigmoid(mha.linear_g(x))
    return mha.linear_o(o).transpose(1, 2)


# ---------------------------------------------------------------- peers: triangle attention


def _triangle_peer(core):
    """Triangle attention with its core from a peer, the projections in eager PyTorch around it, as Boltz and
    Protenix call their kernels: core(q, k, v (B, I, h, J, d) views, bias (B, h, J, K), mask (B, I, K) float 0/1)
    returns the heads' outputs (B, I, h, J, d)."""

    def run(mod, z, mask):
        B, N, _, c = z.shape
        h, d, mha = mod.no_heads, mod.c_hidden, mod.mha
        x = mod.layer_norm(z)

        def heads(t):  # (B, I, J, h*d) -> (B, I, h, J, d)
            return t.view(B, N, N, h, d).transpose(2, 3)

        q, k, v = heads(mha.linear_q(x)), heads(mha.linear_k(x)), heads(mha.linear_v(x))
        o = core(q, k, v, mod.linear(x).permute(0, 3, 1, 2), mask)
        o = o.transpose(2, 3).reshape(B, N, N, h * d) * torch.sigmoid(mha.linear_g(x))
        return mha.linear_o(o)

    return run


def _cueq_triangle_peer():
    """cuEquivariance's triangle_attention (Boltz-2's `use_kernels=True` and Protenix's default path)."""
    from cuequivariance_torch import triangle_attention

    return _triangle_peer(lambda q, k, v, bias, mask: triangle_attention(
        q, k, v, bias[:, None], mask=mask.bool()[:, :, None, None, :], scale=q.shape[-1] ** -0.5))


def _trifast_peer():
    """trifast's triangle_attention (Triton; heads first, its mask True where a key is masked)."""
    from trifast import triangle_attention

    def core(q, k, v, bias, mask):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, h, I, J, d)
        return triangle_attention(q, k, v, bias, mask == 0).transpose(1, 2)

    return _triangle_peer(core)


def _row_attention_stand_in(mod, z, mask):
    """The module's starting-node triangle attention as row attention computes it (z's rows as MSA rows, z as their
    pair, the LayerNorm applied twice: to the rows and, fused, to the bias's pair): what the triangle operation's
    single LayerNorm must beat."""
    from evofuse.functional import msa_row_attention

    ln, mha = mod.layer_norm, mod.mha
    return msa_row_attention(
        z, z, mask, ln.weight, ln.bias, mha.linear_q.weight, None, mha.linear_k.weight, None, mha.linear_v.weight,
        None, mha.linear_g.weight, mha.linear_g.bias, mha.linear_o.weight, mha.linear_o.bias, mod.linear.weight,
        None, num_heads=mod.no_heads, pair_norm_weight=ln.weight, pair_norm_bias=ln.bias)


def cueq_trimul_peer():
    """cuEquivariance's triangle_multiplicative_update (Boltz-2's `use_kernels=True`, Protenix's default)."""
    from cuequivariance_torch import triangle_multiplicative_update

    def run(mod, z, mask):
        return triangle_multiplicative_update(
            z, direction="outgoing" if mod.outgoing else "incoming", mask=mask, norm_in_weight=mod.norm_in.weight,
            norm_in_bias=mod.norm_in.bias, p_in_weight=mod.p_in.weight, g_in_weight=mod.g_in.weight,
            norm_out_weight=mod.norm_out.weight, norm_out_bias=mod.norm_out.bias, p_out_weight=mod.p_out.weight,
            g_out_weight=mod.g_out.weight, eps=1e-5)

    return run


# ---------------------------------------------------------------- peers: pair-weighted averaging


def _boltz_peer(mod):
    """Boltz's own PairWeightedAveraging (boltz 2.2.1) holding the same weights, as Boltz runs it: float32
    parameters under bfloat16 autocast (its float32 mask term makes a bfloat16 module fail)."""
    from boltz.model.layers.pair_averaging import PairWeightedAveraging

    boltz = PairWeightedAveraging(mod.c_m, mod.c_z, mod.c_h, mod.num_heads, mod.inf)
    boltz.load_state_dict(mod.state_dict())
    return autocast_call(boltz.to(device=mod.norm_m.weight.device, dtype=torch.float32))


# ---------------------------------------------------------------- peers: attention with pair bias


def _boltz_attention_peer(mod):
    """Boltz-2's own AttentionPairBias (boltz 2.2.1) holding the same weights, as its Pairformer runs it: float32, with
    autocast off (the single track's), its logits and their softmax in float32."""
    from boltz.model.layers.attentionv2 import AttentionPairBias

    boltz = AttentionPairBias(mod.c_s, mod.proj_z[0].normalized_shape[0], mod.num_heads)
    boltz.load_state_dict(mod.state_dict())
    boltz = boltz.to(device=mod.proj_q.weight.device, dtype=torch.float32)

    def run(s, z, mask):
        s = s.float()
        with torch.autocast(s.device.type, enabled=False):
            return boltz(s, z.float(), mask.float(), s)

    return run


# ---------------------------------------------------------------- each operation's peers


# (name, dtype of the module, builder(mod) -> callable(*inputs)) of each operation's peers beyond eager PyTorch and
# torch.compile of its reference (the models' own modules compute the reference's function in eager PyTorch)
PEERS: dict[str, list[tuple[str, str, object]]] = {
    "opm": [("folded einsum bf16", "bfloat16", lambda mod: partial(_opm_folded_einsum, mod)),
            ("chunked eager bf16", "bfloat16", lambda mod: partial(_opm_chunked_eager, mod))],
    "att": [("FlexAttention bf16", "bfloat16", lambda mod: partial(_flex_peer(), mod)),
            ("cuEquivariance bf16", "bfloat16", lambda mod: partial(_cueq_peer(), mod))],
    "pwa": [("Boltz module autocast bf16", "float32", _boltz_peer),
            ("eager bf16 CUDA graph", "bfloat16", graphed_reference),
            ("torch.compile bf16 reduce-overhead", "bfloat16", compiled_reduce_overhead),
            ("torch.compile bf16 CUDA graph", "bfloat16", graphed_compiled)],
    "tri": [("cuEquivariance bf16", "bfloat16", lambda mod: partial(_cueq_triangle_peer(), mod)),
            ("trifast bf16", "bfloat16", lambda mod: partial(_trifast_peer(), mod)),
            ("row attention stand-in bf16", "bfloat16", lambda mod: partial(_row_attention_stand_in, mod))],
    "trimul": [("cuEquivariance bf16", "bfloat16", lambda mod: partial(cueq_trimul_peer(), mod))],
    "col": [("SDPA bf16", "bfloat16", lambda mod: partial(_sdpa_column_peer, mod))],
    "gcol": [("torch.compile bf16 reduce-overhead", "bfloat16", compiled_reduce_overhead)],
    "trans": [("torch.compile bf16 reduce-overhead", "bfloat16", compiled_reduce_overhead)],
    "apb": [("Boltz module fp32", "float32", _boltz_attention_peer)],
}
