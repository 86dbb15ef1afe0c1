"""MSA global column attention: its declaration, read top-down: the functional form (its `Form`, which the front
door reads, and its documented signature), the module (the models' parameter names) and its registry entry
(`OPERATION`: the suite's cases, the arithmetic). The kernels and the custom op are `op`, beside this file."""

from __future__ import annotations

import torch
from torch import nn

from ... import reference as ref
from ..._dispatch import triton_available
from ...front.common import columns
from ...front.declaration import Case, Operation
from ...front.door import POSITIVE, Form, front
from ...front.parts import check_options
from ...reference import GLOBAL_COUNT_EPS

if triton_available():  # the kernels (without Triton every call takes the reference)
    from ...stages.layer_norm_linear import joined_bias
    from . import op
else:
    op = joined_bias = None


def _global_heads(args: dict, sizes: dict) -> None:
    H, d, num_heads = sizes["H"], sizes["d"], args["num_heads"]
    if not isinstance(num_heads, int) or num_heads < 1 or H != num_heads * d:
        raise ValueError(f"num_heads must be a positive integer with num_heads * {d} (the key's width) = {H} (the "
                         f"query's), got {num_heads!r}")


def _global_attention(a, train):
    projections = [a.gate_weight, a.query_weight, a.key_weight, a.value_weight]
    proj_weight = torch.cat(projections)  # (the op projects every row's gate, query, key and value at once)
    proj_bias = joined_bias([a.gate_bias, None, a.key_bias, a.value_bias], projections)  # (q's after the mean)
    return op.msa_column_global_attention(
        *columns(a.msa_repr, a.msa_mask), a.layer_norm_weight, a.layer_norm_bias, proj_weight, proj_bias, a.query_bias,
        a.out_weight, a.out_bias, a.num_heads, float(a.inf), float(a.eps), a.precision, train)[0].transpose(1, 2)


MSA_COLUMN_GLOBAL_ATTENTION = Form(
    "global column attention", "msa", ("msa_repr", "msa_mask"),
    dict(layer_norm_weight="D", layer_norm_bias="D", query_weight="H D", query_bias="H", key_weight="d D",
         key_bias="d", value_weight="d D", value_bias="d", gate_weight="H D", gate_bias="H", out_weight="D H",
         out_bias="D"),
    ref.msa_column_global_attention_reference, _global_attention,
    optional=("query_bias", "key_bias", "value_bias", "gate_bias", "out_bias"), rules={"eps": POSITIVE},
    checked=_global_heads, supports=lambda a: "float64" if a.dtype == torch.float64 else None)


@front(MSA_COLUMN_GLOBAL_ATTENTION)
def msa_column_global_attention(
    msa_repr: torch.Tensor,
    msa_mask: torch.Tensor | None,
    layer_norm_weight: torch.Tensor,
    layer_norm_bias: torch.Tensor,
    query_weight: torch.Tensor,
    query_bias: torch.Tensor | None,
    key_weight: torch.Tensor,
    key_bias: torch.Tensor | None,
    value_weight: torch.Tensor,
    value_bias: torch.Tensor | None,
    gate_weight: torch.Tensor,
    gate_bias: torch.Tensor | None,
    out_weight: torch.Tensor,
    out_bias: torch.Tensor | None,
    *,
    num_heads: int,
    inf: float = 1e9,
    eps: float = ref.GLOBAL_COUNT_EPS,
    precision: str = "default",
    impl: str | None = None,
) -> torch.Tensor:
    """MSA global column attention (AF2 Algorithm 19, the extra-MSA stack's): in each residue's column one query a
    head from the masked mean of the rows, keys and values shared by the heads, each row's output gated
    (`evofuse.reference.msa_column_global_attention_reference` is the definition).

    Args:
        msa_repr: (B, S, N, D) float16, bfloat16, float32 or float64, any strides; any leading dimensions in place
            of B, as for `outer_product_mean`.
        msa_mask: (B, S, N) 0/1 as bool, integer or floating, or None; a masked row s is left out of its column's mean
            and adds inf * (mask - 1) to its logit.
        layer_norm_weight, layer_norm_bias: (D,); query_weight, gate_weight: (h*d, D); key_weight, value_weight: (d, D);
            out_weight (D, h*d); each bias of its layer's output width, or None (OpenFold: the gate's and the
            output's alone).
        num_heads: h; inf: the mask's magnitude (1e9); eps: what the mean's count gets added (OpenFold's module 1e-10,
            its model config 1e-8).
        precision, impl: as for `outer_product_mean`.
    Returns:
        (B, S, N, D) in msa_repr's dtype; the parameters are cast to it.
    """


class _GlobalAttentionParts(nn.Module):
    """The projections of OpenFold's `GlobalAttention`, under its names: linear_q (h*d), linear_k and linear_v (one
    head's width d, shared by the heads), linear_g and linear_o."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, bias: bool):
        super().__init__()
        inner = c_hidden * no_heads
        self.linear_q = nn.Linear(c_in, inner, bias=False)
        self.linear_k = nn.Linear(c_in, c_hidden, bias=False)
        self.linear_v = nn.Linear(c_in, c_hidden, bias=False)
        self.linear_g = nn.Linear(c_in, inner, bias=bias)
        self.linear_o = nn.Linear(inner, c_in, bias=bias)


class MSAColumnGlobalAttention(nn.Module):
    """MSA global column attention (AF2 Algorithm 19, the extra-MSA stack's): (B, S, N, c_in) -> (B, S, N, c_in), one
    query a head and column from the masked mean of its rows. OpenFold's constructor and parameter names
    (`layer_norm_m`, `global_attention.linear_{q,k,v,g,o}`), so an OpenFold or OpenFold3 state_dict of the module loads
    unchanged.

    Args:
        c_in, c_hidden, no_heads: the MSA's width, a head's width and the heads; inf: the mask's magnitude (1e9); eps:
            what the mean's count gets added (OpenFold's default 1e-10; its model config 1e-8).
        gate_and_output_bias: whether linear_g and linear_o have biases (OpenFold's do).
        precision, impl: as for OuterProductMean.

    forward(m (B, S, N, c_in), mask (B, S, N) or None, chunk_size=None, ...) returns (B, S, N, c_in) in m's dtype (any
    leading dimensions in place of B); the models' chunking and kernel switches are accepted and change nothing.
    """

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, inf: float = 1e9, eps: float = GLOBAL_COUNT_EPS,
                 gate_and_output_bias: bool = True, precision: str = "default", impl: str | None = None):
        super().__init__()
        if not isinstance(no_heads, int) or no_heads < 1:
            raise ValueError(f"no_heads must be a positive integer, got {no_heads!r}")
        check_options(precision, impl)
        self.c_in, self.c_hidden, self.no_heads, self.inf, self.eps = c_in, c_hidden, no_heads, inf, eps
        self.layer_norm_m = nn.LayerNorm(c_in)
        self.global_attention = _GlobalAttentionParts(c_in, c_hidden, no_heads, gate_and_output_bias)
        self.precision = precision
        self.impl = impl

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None, *,
                impl: str | None = None, **switches) -> torch.Tensor:
        att = self.global_attention
        return msa_column_global_attention(
            m, mask, **MSA_COLUMN_GLOBAL_ATTENTION.weights(
                layer_norm=self.layer_norm_m, query=att.linear_q, key=att.linear_k, value=att.linear_v,
                gate=att.linear_g, out=att.linear_o),
            num_heads=self.no_heads, inf=self.inf, eps=self.eps, precision=self.precision,
            impl=impl if impl is not None else self.impl)


OPERATION = Operation(
    "gcol", lambda c, **kw: MSAColumnGlobalAttention(c.D, c.head, c.width, eps=1e-8, **kw), "layer_norm_m",
    ("layer_norm_m.weight", "layer_norm_m.bias",
     *(f"global_attention.linear_{name}.{kind}" for name in "qkvgo" for kind in ("weight", "bias"))),
    ref.msa_column_global_attention_reference, lambda c: {"numheads": c.width, "eps": 1e-8}, "msa", "residue",
    # (every row's gate, query, key, value and output; the columns' logits and sums)
    lambda c: 2.0 * c.B * (c.S * c.N * c.D * (3 * c.width * c.head + 2 * c.head) + 2 * c.N * c.S * c.width * c.head),
    lambda c: 0.0,
    (Case("gcol-seed", "gcol", 2, 8, 32, 64, 0, 4, 16),
     Case("gcol-af2-extra", "gcol", 1, 1024, 384, 64, 0, 8, 8),  # AF2's extra-MSA stack in training
     Case("gcol-af2-extra-5120", "gcol", 1, 5120, 384, 64, 0, 8, 8)))
