"""The model blocks `benchmarks/models.py` times, by name (`FAMILIES`): each builder takes (S, N) (and a stack's
`layers` and `checkpointing`) and returns (block, inputs, run, modules, variants): the model's own block at its
published sizes, its inputs (CPU tensors), `run(block, *inputs)` as the model calls it, the modules evofuse replaces
(path -> their call from the block's inputs) and the block's other paths (label -> (which block, its call)). The model
packages go in without their dependency stacks (benchmarks/models.py's docstring)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def _boltz(S, N):
    from boltz.model.modules.trunkv2 import MSALayer

    block = MSALayer(msa_s=64, token_z=128, msa_dropout=0.0, z_dropout=0.0, pairwise_head_width=32,
                     pairwise_num_heads=8)
    m, z = torch.randn(1, S, N, 64), torch.randn(1, N, N, 128)
    msa_mask, token_mask = (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N)

    def run(b, m, z, msa_mask, token_mask):
        z_out, m_out = b(z, m, token_mask, msa_mask, chunk_heads_pwa=False, chunk_size_outer_product=None)
        return z_out, m_out

    modules = {"pair_weighted_averaging": lambda b, m, z, msa_mask, token_mask: b(m, z, token_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, token_mask: b(m, msa_mask),
               "msa_transition": lambda b, m, z, msa_mask, token_mask: b(m)}
    return block, (m, z, msa_mask, token_mask), run, modules, {}


def _tri_modules():
    """The pair stack's two triangle attentions, its outgoing triangle multiplication and its pair transition as a
    block calls them, z and its mask the block's inputs 1 and 2 (the ending node as the models' ending-node modules
    take it: their own transposition inside)."""
    def call(b, s, z, mask, *_):
        return b(z, mask=mask)

    return {"tri_att_start": call, "tri_att_end": call, "tri_mul_out": call}


def _pair_transition(path):
    """A Pairformer's pair transition, `path`, as its block calls it (z alone)."""
    return {path: lambda b, s, z, *_: b(z)}


def _boltz_pairformer(S, N):
    """Boltz-2's PairformerLayer (token_s 384, token_z 128, 4 pair heads x 32, v2); its cuEquivariance path is
    `use_kernels=True` (triangle multiplication and attention); patched, evofuse's modules ignore the switches."""
    from boltz.model.layers.pairformer import PairformerLayer

    block = PairformerLayer(384, 128, num_heads=16, dropout=0.0, pairwise_head_width=32, pairwise_num_heads=4, v2=True)
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    inputs = (s, z, mask[:, :, None] * mask[:, None, :], mask)

    def run(b, s, z, pair_mask, mask, **kernels):
        return b(s, z, mask, pair_mask, **kernels)

    modules = _tri_modules() | _pair_transition("transition_z") | {
        "attention": lambda b, s, z, pair_mask, mask: b(s=s, z=z, mask=mask, k_in=s),  # (AF3 Algorithm 24)
        "transition_s": lambda b, s, *_: b(s)}
    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, use_kernels=True))}
    return block, inputs, run, modules, variants


def _boltz_diffusion_layer(S, N):
    """A layer of Boltz-2's token transformer in its diffusion module (dim 2 x token_s = 768, 16 heads, conditioned on
    s of the same width; the pair bias projected once a prediction, (1, N, N, 16) in float32 as the module passes it),
    one sample: called 24 times a diffusion step, 200 steps a prediction."""
    from boltz.model.modules.transformersv2 import DiffusionTransformerLayer

    block = DiffusionTransformerLayer(heads=16, dim=768, dim_single_cond=768)
    inputs = (torch.randn(1, N, 768), torch.randn(1, N, 768), torch.randn(1, N, N, 16), torch.ones(1, N))

    def run(b, a, s, bias, mask):
        return b(a, s, bias, mask, multiplicity=1)

    modules = {"pair_bias_attn": lambda b, a, s, bias, mask: b(s=a, z=bias, mask=mask, k_in=a, multiplicity=1)}
    return block, inputs, run, modules, {}


def _boltz_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of Boltz-2's PairformerLayers (its PairformerModule; `checkpointing`: the model's activation
    checkpointing of each layer in training, as its training configuration sets it; in eval mode its triangle
    attention chunked as the model's inference chunks it) at N residues: the whole stack's step time and peak memory,
    unpatched, with its cuEquivariance path and patched."""
    from boltz.model.layers.pairformer import PairformerModule

    block = PairformerModule(384, 128, num_blocks=layers, num_heads=16, dropout=0.0, pairwise_head_width=32,
                             pairwise_num_heads=4, v2=True, activation_checkpointing=checkpointing)
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    inputs = (s, z, mask[:, :, None] * mask[:, None, :], mask)

    def run(b, s, z, pair_mask, mask, **kernels):
        return b(s, z, mask, pair_mask, **kernels)

    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, use_kernels=True))}
    return block, inputs, run, {}, variants


def _protenix_pairformer(S, N):
    """Protenix's PairformerBlock (c_s 384, c_z 128, 4 pair heads x 32); its cuEquivariance path is
    `triangle_attention=triangle_multiplicative="cuequivariance"`."""
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import PairformerBlock

    block = PairformerBlock(n_heads=16, c_z=128, c_s=384, c_hidden_mul=128, c_hidden_pair_att=32, no_heads_pair=4,
                            dropout=0.0)
    inputs = (torch.randn(N, 384), torch.randn(N, N, 128), torch.ones(N, N))

    def run(b, s, z, pair_mask, kernels="torch"):
        return b(s, z, pair_mask, triangle_multiplicative=kernels, triangle_attention=kernels)

    modules = _tri_modules() | _pair_transition("pair_transition") | {
        "attention_pair_bias": lambda b, s, z, *_: b(a=s, s=None, z=z), "single_transition": lambda b, s, *_: b(s)}
    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, kernels="cuequivariance"))}
    return block, inputs, run, modules, variants


def _protenix_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of Protenix's PairformerBlocks (its PairformerStack; `checkpointing`: one block a checkpoint) at N
    residues, called as its model calls it: in inference (no gradients) with `inplace_safe` and chunk_size 128 (the
    model picks its chunk by N from its inference settings), in training with neither."""
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import PairformerStack

    block = PairformerStack(n_blocks=layers, n_heads=16, c_z=128, c_s=384, dropout=0.0,
                            blocks_per_ckpt=1 if checkpointing else None)
    inputs = (torch.randn(N, 384), torch.randn(N, N, 128), torch.ones(N, N))

    def run(b, s, z, pair_mask, kernels="torch"):
        inference = not torch.is_grad_enabled()
        return b(s, z, pair_mask, triangle_multiplicative=kernels, triangle_attention=kernels, inplace_safe=inference,
                 chunk_size=128 if inference else None)

    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, kernels="cuequivariance"))}
    return block, inputs, run, {}, variants


# OpenFold3's Pairformer widths: c_s 384, c_z 128, 16 single heads x 24, 4 pair heads x 32, SwiGLU transitions
OPENFOLD3_PAIRFORMER = dict(c_s=384, c_z=128, c_hidden_pair_bias=24, no_heads_pair_bias=16, c_hidden_mul=128,
                            c_hidden_pair_att=32, no_heads_pair=4, transition_type="swiglu", transition_n=4,
                            pair_dropout=0.0, fuse_projection_weights=False, inf=1e9)


def _openfold3_inputs(N):
    """(s, z, pair_mask, mask) of one chain of N tokens at OpenFold3's widths."""
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    return s, z, mask[:, :, None] * mask[:, None, :], mask


def _openfold3_run(b, s, z, pair_mask, mask, cueq=False):
    """An OpenFold3 Pairformer block or stack called as its model calls it: in inference (no gradients) with
    `inplace_safe` and its own Triton triangle kernels (its eval settings), in training with neither; `cueq`: its
    cuEquivariance path (`use_cueq_triangle_kernels=True`)."""
    inference = not torch.is_grad_enabled()
    return b(s, z, mask, pair_mask, inplace_safe=inference, use_cueq_triangle_kernels=cueq,
             use_triton_triangle_kernels=inference and not cueq)


OPENFOLD3_VARIANTS = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: _openfold3_run(b, *x, cueq=True))}


def _openfold3_pairformer(S, N):
    """OpenFold3's PairFormerBlock at the model's widths, called as its stack calls it (`_openfold3_run`), and its six
    patched modules."""
    from openfold3.core.model.latent.pairformer import PairFormerBlock

    def pair(b, s, z, pair_mask, mask):
        return b(z, mask=pair_mask)
    modules = {"pair_stack.tri_att_start": pair, "pair_stack.tri_att_end": pair, "pair_stack.tri_mul_out": pair,
               "pair_stack.pair_transition": pair,
               "attn_pair_bias": lambda b, s, z, pair_mask, mask: b(a=s, z=z, mask=mask),
               "single_transition": lambda b, s, z, pair_mask, mask: b(s, mask=mask)}
    return PairFormerBlock(**OPENFOLD3_PAIRFORMER), _openfold3_inputs(N), _openfold3_run, modules, OPENFOLD3_VARIANTS


def _openfold3_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of OpenFold3's PairFormerBlocks (its PairFormerStack at the model's widths; `checkpointing`: one block
    a checkpoint) at N residues, called as its model calls it (`_openfold3_run`)."""
    from openfold3.core.model.latent.pairformer import PairFormerStack

    block = PairFormerStack(**OPENFOLD3_PAIRFORMER, no_blocks=layers, blocks_per_ckpt=1 if checkpointing else None,
                            use_reentrant=False)
    return block, _openfold3_inputs(N), _openfold3_run, {}, OPENFOLD3_VARIANTS


def _openfold3_evoformer(S, N):
    """OpenFold3's AF2-style EvoformerBlock (S 512, c_m 256, c_z 128, 8 MSA heads x 32, 4 pair heads x 32, column
    attention); its cuEquivariance path is `use_cueq_triangle_kernels=True`."""
    from openfold3.core.model.latent.evoformer import EvoformerBlock

    block = EvoformerBlock(c_m=256, c_z=128, c_hidden_msa_att=32, c_hidden_opm=32, c_hidden_mul=128,
                           c_hidden_pair_att=32, no_heads_msa=8, no_heads_pair=4, transition_type="relu",
                           transition_n=4, msa_dropout=0.0, pair_dropout=0.0, no_column_attention=False,
                           opm_first=False, fuse_projection_weights=False, inf=1e9, eps=1e-8)
    S = min(S, 512)
    m, z = torch.randn(1, S, N, 256), torch.randn(1, N, N, 128)
    inputs = (m, z, (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N))

    def run(b, m, z, msa_mask, pair_mask, **kernels):
        return b(m, z, msa_mask, pair_mask, chunk_size=None, use_lma=False, inplace_safe=False, **kernels)

    modules = {"msa_att_row": lambda b, m, z, msa_mask, pair_mask: b(m, z=z, mask=msa_mask),
               "msa_att_col": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "pair_stack.tri_att_start": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask),
               "pair_stack.tri_mul_out": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask),
               "msa_transition": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "pair_stack.pair_transition": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask)}
    variants = {"unpatched cuEquivariance": ("unpatched",
                                             lambda b, *x: run(b, *x, use_cueq_triangle_kernels=True))}
    return block, inputs, run, modules, variants


def _protenix(S, N):
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import MSABlock

    block = MSABlock(c_m=64, c_z=128, c_hidden=32, msa_dropout=0.0, pair_dropout=0.0, msa_chunk_size=S,
                     msa_max_size=S)
    m, z, pair_mask = torch.randn(S, N, 64), torch.randn(N, N, 128), torch.ones(N, N)
    modules = {"msa_stack.msa_pair_weighted_averaging": lambda b, m, z, mask: b(m, z),
               "outer_product_mean_msa": lambda b, m, z, mask: b(m), "msa_stack.transition_m": lambda b, m, z, mask: b(m)}
    return block, (m, z, pair_mask), lambda b, m, z, mask: b(m.clone(), z, mask), modules, {}


def _openfold3(S, N):
    from openfold3.core.model.latent.msa_module import MSAModuleBlock

    block = MSAModuleBlock(c_m=64, c_z=128, c_hidden_msa_att=8, c_hidden_opm=32, c_hidden_mul=128,
                           c_hidden_pair_att=32, no_heads_msa=8, no_heads_pair=4, transition_type="swiglu",
                           transition_n=4, msa_dropout=0.0, pair_dropout=0.0, opm_first=True,
                           fuse_projection_weights=False, inf=1e9, eps=1e-8)
    m, z = torch.randn(1, S, N, 64), torch.randn(1, N, N, 128)
    msa_mask, pair_mask = (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N)
    modules = {"msa_att_row": lambda b, m, z, msa_mask, pair_mask: b(m, z=z, mask=pair_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask)}
    return block, (m, z, msa_mask, pair_mask), lambda b, *x: b(*x), modules, {}


def _openfold(S, N):
    """OpenFold (AlphaFold 2) is not on the package index in a usable form: its modules come from the small
    `openfold` package of the tests, which follows OpenFold's public module code; AF2's Evoformer sizes, the MSA half
    of a block (row and column attention, the MSA transition, the Outer Product Mean)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "openfold_modules"))
    from openfold.model.evoformer import MSATransition
    from openfold.model.msa import MSAColumnAttention, MSARowAttentionWithPairBias
    from openfold.model.outer_product_mean import OuterProductMean

    class EvoformerMSAPart(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.msa_att_row = MSARowAttentionWithPairBias(256, 128, c_hidden=32, no_heads=8)
            self.msa_att_col = MSAColumnAttention(256, c_hidden=32, no_heads=8)
            self.msa_transition = MSATransition(256, 4)
            self.outer_product_mean = OuterProductMean(256, 128, c_hidden=32)

        def forward(self, m, z, msa_mask):
            m = m + self.msa_att_row(m, z=z, mask=msa_mask)
            m = m + self.msa_att_col(m, mask=msa_mask)
            m = m + self.msa_transition(m, mask=msa_mask)
            return m, z + self.outer_product_mean(m, mask=msa_mask)

    m, z = torch.randn(1, S, N, 256), torch.randn(1, N, N, 128)
    msa_mask = (torch.rand(1, S, N) > 0.1).float()
    modules = {"msa_att_row": lambda b, m, z, msa_mask: b(m, z=z, mask=msa_mask),
               "msa_att_col": lambda b, m, z, msa_mask: b(m, mask=msa_mask),
               "msa_transition": lambda b, m, z, msa_mask: b(m, mask=msa_mask),
               "outer_product_mean": lambda b, m, z, msa_mask: b(m, mask=msa_mask)}
    return EvoformerMSAPart(), (m, z, msa_mask), lambda b, *x: b(*x), modules, {}


# name -> (the integration that patches it, the block's builder)
FAMILIES = {"boltz": ("boltz", _boltz), "protenix": ("protenix", _protenix), "openfold3": ("openfold3", _openfold3),
            "openfold": ("openfold", _openfold), "boltz-pairformer": ("boltz", _boltz_pairformer),
            "protenix-pairformer": ("protenix", _protenix_pairformer),
            "boltz-diffusion-layer": ("boltz", _boltz_diffusion_layer),
            "boltz-pairformer-stack": ("boltz", _boltz_pairformer_stack),
            "protenix-pairformer-stack": ("protenix", _protenix_pairformer_stack),
            "openfold3-pairformer": ("openfold3", _openfold3_pairformer),
            "openfold3-pairformer-stack": ("openfold3", _openfold3_pairformer_stack),
            "openfold3-evoformer": ("openfold3", _openfold3_evoformer)}
