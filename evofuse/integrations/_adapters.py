"""Replacement modules shared by several model families.

`FusedOpenFoldOuterProductMean` stands in for the Outer Product Mean of OpenFold (AF2), OpenFold3 and Protenix,
which share one definition: submodules `layer_norm`, `linear_1`, `linear_2` (biases optional) and `linear_out`,
the outer products through linear_out, then divided by eps + the rows where residues i and j both are
("count_ij_after"); called as `opm(m, mask=None, chunk_size=None, inplace_safe=False)`.

`FusedOpenFoldRowAttention` stands in for OpenFold's (and OpenFold3's) MSARowAttentionWithPairBias: submodules
`layer_norm_m`, `layer_norm_z`, `linear_z` and `mha` (an Attention with `linear_q`, `linear_k`, `linear_v`,
`linear_g`, `linear_o`; inner width no_heads x c_hidden); the MSA mask as an additive `inf * (mask - 1)` on the
keys; called as `att(m, z, mask, chunk_size, ...)` with the kernel switches as keywords.

`FusedOpenFoldTriangleAttention` stands in for OpenFold's (and OpenFold3's) TriangleAttention, starting or ending
node: submodules `layer_norm`, `linear` (the triangle bias) and `mha`; called as `tri(x, mask, chunk_size, ...)`.
Protenix's is the same; OpenFold3's names the bias projection `linear_z` and takes `transpose_bias` (its
integration's subclass).

`FusedOpenFoldColumnAttention` stands in for OpenFold's and OpenFold3's MSAColumnAttention: submodule `_msa_att` (an
MSAAttention without pair bias: `layer_norm_m`, `mha`); called as `att(m, mask, chunk_size, ...)`.

`FusedOpenFoldTriangleMultiplication` stands in for OpenFold's, OpenFold3's and Protenix's
TriangleMultiplicativeUpdate (outgoing or incoming by `_outgoing`): submodules `layer_norm_in`, `linear_a_p`,
`linear_a_g`, `linear_b_p`, `linear_b_g` (OpenFold3's fused form: `linear_ab_p`, `linear_ab_g`), `layer_norm_out`,
`linear_z`, `linear_g`; called as `tri_mul(z, mask, inplace_safe=False, _add_with_inplace=False, ...)` (with both
set it returns z + the update, as the models' in-place inference path does).

`FusedTransition` stands in for a transition (LayerNorm, then a SwiGLU or ReLU MLP): Boltz's as it is, the other
families' through subclasses that name their parts.

The triangle operations and the transitions run the module they replaced on calls below its crossover
(`_crossover`), where the original's call costs less host time.
"""

from __future__ import annotations

import torch
from torch import nn

from .._runtime import memory_bytes
from ..front.common import autocast_dtype
from ..functional import msa_column_attention as col
from ..functional import msa_column_global_attention as gcol
from ..functional import msa_row_attention as row
from ..functional import outer_product_mean as opm
from ..functional import transition
from ..functional import triangle_attention as tri
from ..functional import triangle_multiplication as trimul
from ..reference import TRIANGLE_MIN_INF
from ..stages.attention.core import MAX_HEAD_DIM
from ..stages.layer_norm_linear import joined_bias
from ._crossover import RunsOriginal, rows_of
from ._patching import check_layer_norm, check_linears, check_outer_product_mean


class FusedOpenFoldOuterProductMean(nn.Module):
    """An OpenFold-style OuterProductMean computed by `evofuse.outer_product_mean`; holds the original's
    submodules (the same Parameters under the same names). Under `torch.autocast` it computes in the autocast
    dtype, as the original's linear layers do; `chunk_size` and `inplace_safe` are accepted and not needed."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_m, self.c_z, self.c_hidden, self.eps = original.c_m, original.c_z, original.c_hidden, original.eps
        for name in ("layer_norm", "linear_1", "linear_2", "linear_out"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        reason = check_linears(module.linear_1, module.linear_2, module.linear_out)
        if reason:
            return reason
        return check_outer_product_mean(module.c_hidden, module.eps) or check_layer_norm(module.layer_norm)

    def compute_dtype(self, m: torch.Tensor) -> torch.dtype:
        return autocast_dtype(m)

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None,
                inplace_safe: bool = False) -> torch.Tensor:
        """m (*, S, N, c_m), mask (*, S, N) or None -> (*, N, N, c_z), in the dtype the original returns: the
        autocast dtype under autocast (its counts come from an autocast einsum), else m's promoted with the
        mask's."""
        dtype = self.compute_dtype(m)
        with torch.autocast(m.device.type, enabled=False):
            out = opm(m.to(dtype), mask, **opm.form.weights(
                layer_norm=self.layer_norm, proj_a=self.linear_1, proj_b=self.linear_2, out_proj=self.linear_out),
                normalization="count_ij_after", count_eps=self.eps)
        if torch.is_autocast_enabled(m.device.type) or mask is None or not mask.is_floating_point():
            return out
        return out.to(torch.promote_types(out.dtype, mask.dtype))


class FusedOpenFoldRowAttention(nn.Module):
    """An OpenFold-style MSARowAttentionWithPairBias computed by `evofuse.msa_row_attention` (the pair's LayerNorm
    fused into its projection); holds the original's submodules under their names. The chunking and kernel
    switches of OpenFold's call (`chunk_size`, `use_memory_efficient_kernel`, `use_deepspeed_evo_attention`,
    `use_lma`, `use_flash`, ...) are accepted and not needed."""

    # from inf = 1e9, float32 rounds logit - inf to -inf for every |logit| < 32: a fully masked row's weights are
    # uniform, as with evofuse's replaced -1e9
    MIN_INF = 1e9

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads = original.c_in, original.c_hidden, original.no_heads
        self.pair_bias, self.c_z, self.inf = original.pair_bias, original.c_z, original.inf
        for name in ("layer_norm_m", "layer_norm_z", "linear_z", "mha"):
            setattr(self, name, getattr(original, name))

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        mha = module.mha
        if not module.pair_bias or mha.linear_g is None:
            return "attention without pair bias or gating"
        if module.inf < FusedOpenFoldRowAttention.MIN_INF:
            return f"inf {module.inf} (fused: masked keys as -1e9, equal for inf >= 1e9)"
        reason = check_linears(mha.linear_q, mha.linear_k, mha.linear_v, mha.linear_g, mha.linear_o, module.linear_z)
        if reason:
            return reason
        if module.c_hidden > MAX_HEAD_DIM:
            return f"head width {module.c_hidden} (fused: up to {MAX_HEAD_DIM})"
        return check_layer_norm(module.layer_norm_m) or check_layer_norm(module.layer_norm_z)

    def forward(self, m: torch.Tensor, z: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                chunk_size: int | None = None, **kwargs) -> torch.Tensor:
        """m (*, S, N, c_m), z (*, N, N, c_z), mask (*, S, N) or None -> (*, S, N, c_m) in the compute dtype."""
        dtype = autocast_dtype(m)
        mha = self.mha
        with torch.autocast(m.device.type, enabled=False):
            return row(m.to(dtype), z.to(dtype), mask, **row.form.weights(
                layer_norm=self.layer_norm_m, query=mha.linear_q, key=mha.linear_k, value=mha.linear_v,
                gate=mha.linear_g, out_proj=mha.linear_o, pair_bias=self.linear_z, pair_norm=self.layer_norm_z),
                num_heads=self.no_heads, mask_mode="add")


class FusedOpenFoldTriangleAttention(RunsOriginal, nn.Module):
    """An OpenFold-style TriangleAttention (starting or ending node) computed by `evofuse.triangle_attention`; holds
    the original's submodules (`layer_norm`, the triangle bias's projection, `mha`) under their names. The chunking
    and kernel switches of OpenFold's call are accepted and not needed. BIAS names the bias projection: OpenFold's,
    Boltz's and Protenix's `linear`, OpenFold3's `linear_z`. A pair below the crossover runs the original."""

    BIAS = "linear"
    OPERATION = "triangle_attention"

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads = original.c_in, original.c_hidden, original.no_heads
        self.starting, self.inf = original.starting, original.inf
        for name in ("layer_norm", self.BIAS, "mha"):
            setattr(self, name, getattr(original, name))
        self.keep(original)

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        mha, bias = module.mha, getattr(module, cls.BIAS)
        if mha.linear_g is None:
            return "attention without gating"
        if module.inf < TRIANGLE_MIN_INF:
            return f"inf {module.inf} (fused: masked keys as -1e9, equal for inf >= {TRIANGLE_MIN_INF:g})"
        reason = check_linears(mha.linear_q, mha.linear_k, mha.linear_v, mha.linear_g, mha.linear_o, bias)
        if reason:
            return reason
        if any(linear.bias is not None for linear in (mha.linear_q, mha.linear_k, mha.linear_v, bias)):
            return "q, k, v or triangle bias projections with biases"
        if module.c_hidden > MAX_HEAD_DIM:
            return f"head width {module.c_hidden} (fused: up to {MAX_HEAD_DIM})"
        return check_layer_norm(module.layer_norm)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None,
                **kwargs) -> torch.Tensor:
        """x (*, N, N, c_in), mask (*, N, N) or None -> (*, N, N, c_in) in the compute dtype."""
        if self.small(rows_of(x), x):
            return self.original(x, mask=mask, chunk_size=chunk_size, **kwargs)
        return self.attend(x, mask)

    def attend(self, x: torch.Tensor, mask: torch.Tensor | None, transpose_bias: bool = False) -> torch.Tensor:
        dtype = autocast_dtype(x)
        mha = self.mha
        with torch.autocast(x.device.type, enabled=False):
            return tri(x.to(dtype), mask, **tri.form.weights(
                layer_norm=self.layer_norm, linear=getattr(self, self.BIAS), query=mha.linear_q, key=mha.linear_k,
                value=mha.linear_v, gate=mha.linear_g, out=mha.linear_o),
                num_heads=self.no_heads, starting=self.starting, transpose_bias=transpose_bias, inf=self.inf)


class FusedOpenFoldColumnAttention(nn.Module):
    """An OpenFold-style MSAColumnAttention computed by `evofuse.msa_column_attention`; holds the original's `_msa_att`
    (its parameters under their names). The chunking and kernel switches of the models' calls are accepted and not
    needed."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_m, self.c_hidden, self.no_heads, self.inf = original.c_m, original.c_hidden, original.no_heads, original.inf
        self._msa_att = original._msa_att

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        mha = module._msa_att.mha
        if mha.linear_g is None:
            return "attention without gating"
        if module.inf < TRIANGLE_MIN_INF:
            return f"inf {module.inf} (fused: masked keys as -1e9, equal for inf >= {TRIANGLE_MIN_INF:g})"
        reason = check_linears(mha.linear_q, mha.linear_k, mha.linear_v, mha.linear_g, mha.linear_o)
        if reason:
            return reason
        if any(linear.bias is not None for linear in (mha.linear_q, mha.linear_k, mha.linear_v)):
            return "q, k or v projections with biases"
        if module.c_hidden > MAX_HEAD_DIM:
            return f"head width {module.c_hidden} (fused: up to {MAX_HEAD_DIM})"
        return check_layer_norm(module._msa_att.layer_norm_m)

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None,
                **kwargs) -> torch.Tensor:
        """m (*, S, N, c_m), mask (*, S, N) or None -> (*, S, N, c_m) in the compute dtype."""
        dtype = autocast_dtype(m)
        ln, mha = self._msa_att.layer_norm_m, self._msa_att.mha
        with torch.autocast(m.device.type, enabled=False):
            return col(m.to(dtype), mask, **col.form.weights(
                layer_norm=ln, query=mha.linear_q, key=mha.linear_k, value=mha.linear_v, gate=mha.linear_g,
                out=mha.linear_o), num_heads=self.no_heads, inf=self.inf)


class FusedOpenFoldGlobalColumnAttention(nn.Module):
    """An OpenFold-style MSAColumnGlobalAttention (the extra-MSA stack's) computed by
    `evofuse.msa_column_global_attention`; holds the original's `layer_norm_m` and `global_attention` (its parameters
    under their names). The chunking and kernel switches of the models' calls are accepted and not needed."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads = original.c_in, original.c_hidden, original.no_heads
        self.inf, self.eps = original.inf, original.eps
        self.layer_norm_m = original.layer_norm_m
        self.global_attention = original.global_attention

    @staticmethod
    def unsupported_reason(module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        att = module.global_attention
        if not module.eps > 0:
            return f"eps {module.eps} (fused: > 0)"
        return (check_linears(att.linear_q, att.linear_k, att.linear_v, att.linear_g, att.linear_o)
                or check_layer_norm(module.layer_norm_m))

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size: int | None = None,
                **kwargs) -> torch.Tensor:
        """m (*, S, N, c_in), mask (*, S, N) or None -> (*, S, N, c_in) in the compute dtype."""
        dtype = autocast_dtype(m)
        att = self.global_attention
        with torch.autocast(m.device.type, enabled=False):
            return gcol(m.to(dtype), mask, **gcol.form.weights(
                layer_norm=self.layer_norm_m, query=att.linear_q, key=att.linear_k, value=att.linear_v,
                gate=att.linear_g, out=att.linear_o), num_heads=self.no_heads, inf=self.inf, eps=self.eps)


class FusedOpenFoldTriangleMultiplication(RunsOriginal, nn.Module):
    """An OpenFold-style TriangleMultiplicativeUpdate computed by `evofuse.triangle_multiplication`; holds the
    original's submodules under their names (a's and b's projections stacked on each call: autograd hands each its
    gradient). The models' kernel switches and chunk sizes are accepted and not needed. A pair below the crossover
    runs the original."""

    OPERATION = "triangle_multiplication"

    def __init__(self, original: nn.Module):
        super().__init__()
        self.c_z, self.c_hidden, self._outgoing = original.c_z, original.c_hidden, original._outgoing
        names = self._names(original)
        for name, child in original.named_children():  # (in the original's order: its state_dict's)
            if name in names:
                setattr(self, name, child)
        self.keep(original)

    @staticmethod
    def _projections(module: nn.Module) -> tuple[str, ...]:
        """The input projections' names: p then g (OpenFold3's fused form), or a's p, b's p, a's g, b's g."""
        if hasattr(module, "linear_ab_p"):
            return "linear_ab_p", "linear_ab_g"
        return "linear_a_p", "linear_b_p", "linear_a_g", "linear_b_g"

    @classmethod
    def _names(cls, module: nn.Module) -> tuple[str, ...]:
        return ("layer_norm_in", *cls._projections(module), "layer_norm_out", "linear_z", "linear_g")

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        linears = [getattr(module, name) for name in cls._names(module) if name.startswith("linear")]
        return check_linears(*linears) or check_layer_norm(module.layer_norm_in) or check_layer_norm(
            module.layer_norm_out)

    def compute_dtype(self, z: torch.Tensor) -> torch.dtype:
        return autocast_dtype(z)

    def _stacked(self, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
        layers = [getattr(self, name) for name in names]
        if len(layers) == 1:
            return layers[0].weight, layers[0].bias
        weights = [layer.weight for layer in layers]
        return torch.cat(weights), joined_bias([layer.bias for layer in layers], weights)

    def forward(self, z: torch.Tensor, mask: torch.Tensor | None = None, inplace_safe: bool = False,
                _add_with_inplace: bool = False, **kwargs) -> torch.Tensor:
        """z (*, N, N, c_z), mask (*, N, N) or None -> the update (*, N, N, c_z) in the compute dtype (with
        inplace_safe and _add_with_inplace: z with it added in place, as the original's inference path adds it)."""
        if self.small(rows_of(z), z):
            return self.original(z, mask=mask, inplace_safe=inplace_safe, _add_with_inplace=_add_with_inplace, **kwargs)
        projections = self._projections(self)
        half = len(projections) // 2
        p_in, p_bias = self._stacked(projections[:half])
        g_in, g_bias = self._stacked(projections[half:])
        dtype = self.compute_dtype(z)
        with torch.autocast(z.device.type, enabled=False):
            out = trimul(z.to(dtype), mask, **trimul.form.weights(
                norm_in=self.layer_norm_in, p_in=(p_in, p_bias), g_in=(g_in, g_bias), norm_out=self.layer_norm_out,
                p_out=self.linear_z, g_out=self.linear_g), outgoing=self._outgoing)
        out = out.to(autocast_dtype(z))  # (the model's dtype where the family computes in another: a no-op otherwise)
        return z.add_(out) if inplace_safe and _add_with_inplace else out


class FusedTransition(RunsOriginal, nn.Module):
    """A transition (LayerNorm, then a two-layer MLP) computed by `evofuse.transition`; holds the original's submodules
    under their names. A family's subclass names its parts (`PARTS`: the LayerNorm, a, b or None, the output linear,
    as paths from the module), its `ACTIVATION`, and whether its call takes a mask (`MASKED`: OpenFold's and
    OpenFold3's `t(x, mask, chunk_size, ...)`; Boltz's `t(x, chunk_size)` and Protenix's `t(x)` take none). Chunk
    sizes are accepted and not needed: an inference call holds the hidden rows in blocks. This class is Boltz's."""

    PARTS: tuple[str, str, str | None, str] = ("norm", "fc1", "fc2", "fc3")
    ACTIVATION = "swiglu"
    MASKED = False
    OPERATION = "transition"
    # on a CUDA device, calls whose original would hold its hidden rows (a, b and their product in the compute dtype)
    # in at most this share of the device's memory run the original too: the fused call is not faster there, and
    # past it what it saves is the original's memory
    HIDDEN_SHARE = 1 / 64

    def __init__(self, original: nn.Module):
        super().__init__()
        for name, value in vars(original).items():  # (the original's sizes: c_in, n, hidden, ...)
            if not name.startswith("_") and name != "training" and isinstance(value, (int, float, str)):
                setattr(self, name, value)
        for name, child in original.named_children():  # (in the original's order: its state_dict's)
            setattr(self, name, child)
        self.keep(original)
        self._hidden = self._parts(self)[1].out_features

    @classmethod
    def _parts(cls, module: nn.Module) -> list[nn.Module | None]:
        return [None if path is None else module.get_submodule(path) for path in cls.PARTS]

    @classmethod
    def unsupported_reason(cls, module: nn.Module) -> str | None:
        """Why `module` cannot be replaced (None if it can)."""
        norm, *linears = cls._parts(module)
        return check_linears(*(linear for linear in linears if linear is not None)) or check_layer_norm(norm)

    def _runs_original(self, x: torch.Tensor, dtype: torch.dtype) -> bool:
        """Whether a call on x runs the original module: rows below the crossover, or on a CUDA device hidden rows
        (the hidden width's channels, three tensors of them in `dtype`) within HIDDEN_SHARE of its memory."""
        rows = rows_of(x)
        return self.small(rows, x) or (x.is_cuda and self.small_hidden(rows, self._hidden, dtype,
                                                                        memory_bytes(x.device)))

    @classmethod
    def small_hidden(cls, rows: int, hidden: int, dtype: torch.dtype, device_bytes: int) -> bool:
        """Whether the original's hidden rows (a, b and their product: `rows` x `hidden` in `dtype`, three of them)
        take at most HIDDEN_SHARE of a device of `device_bytes`."""
        return 3 * rows * hidden * dtype.itemsize <= cls.HIDDEN_SHARE * device_bytes

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """x (*, c) (and mask (*) or None where `MASKED`) -> (*, c_out) in the compute dtype; the original module's
        call where `_runs_original` (checked first: the original's calls are small, so their host time counts)."""
        dtype = autocast_dtype(x)
        if self._runs_original(x, dtype):
            return self.original(x, *args, **kwargs)
        norm, a, b, out = self._parts(self)
        mask = (args[0] if args else kwargs.get("mask")) if self.MASKED else None
        with torch.autocast(x.device.type, enabled=False):
            y = transition(x.to(dtype), mask, **transition.form.weights(layer_norm=norm, a=a, b=b, out=out),
                           activation=self.ACTIVATION)
        if not self.MASKED:
            return y
        # (the models multiply by the mask, or by ones of x's dtype, which promotes a 16-bit output under autocast)
        return y.to(torch.promote_types(y.dtype, (x if mask is None else mask).dtype))
