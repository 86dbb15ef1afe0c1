"""evofuse inside OpenFold3 (openfold3 0.5.0, installed without its dependencies: `pip install --no-deps
openfold3==0.5.0 gemmi ml_collections biotite`): OpenFold3's own MSA module block, patched, against the
unpatched one."""

import importlib.util

import pytest
import torch

from .conftest import DEVICE
from .helpers import (
    assert_autocast_like_original,
    assert_left_unpatched,
    assert_patched_block_matches,
    assert_small_calls_run_the_original,
    randomize,
)

pytestmark = [pytest.mark.usefixtures("fused_kernels"), pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("openfold3", "gemmi", "ml_collections", "biotite")),
    reason="openfold3 0.5.0 (pip install --no-deps openfold3==0.5.0 gemmi ml_collections biotite) is not installed")]
S, N, C_M, C_Z = 5, 7, 16, 16


def _block(eps=1e-8, fuse=False):
    from openfold3.core.model.latent.msa_module import MSAModuleBlock

    torch.manual_seed(0)
    block = MSAModuleBlock(c_m=C_M, c_z=C_Z, c_hidden_msa_att=8, c_hidden_opm=8, c_hidden_mul=8, c_hidden_pair_att=8,
                           no_heads_msa=2, no_heads_pair=2, transition_type="swiglu", transition_n=2, msa_dropout=0.0,
                           pair_dropout=0.0, opm_first=True, fuse_projection_weights=fuse, inf=1e9, eps=eps)
    return randomize(block, 1).to(DEVICE)


def _inputs():
    """m, z, the MSA mask and a pair mask with a padding residue (its pairs all masked: OpenFold3's float32
    logit - 1e9 weighs every j alike there, and so does evofuse's additive mask mode)."""
    g = torch.Generator().manual_seed(2)
    m, z = torch.randn(1, S, N, C_M, generator=g), torch.randn(1, N, N, C_Z, generator=g)
    msa_mask = (torch.rand(1, S, N, generator=g) > 0.2).float()
    pair_mask = (torch.rand(1, N, N, generator=g) > 0.2).float()
    pair_mask[..., 0] = 1
    pair_mask[:, N - 1] = 0
    return [t.to(DEVICE) for t in (m, z, msa_mask, pair_mask)]


def _call(block, m, z, msa_mask, pair_mask):
    return block(m, z, msa_mask, pair_mask, chunk_size=None, use_lma=False, inplace_safe=False)


# (the ending node is called on the transposed pair with OpenFold3's transpose_bias)
PATCHED = ["msa_att_row", "msa_transition", "outer_product_mean", "pair_stack.pair_transition",
           "pair_stack.tri_att_end", "pair_stack.tri_att_start", "pair_stack.tri_mul_in", "pair_stack.tri_mul_out"]


@pytest.mark.parametrize("eps, fuse", [(1e-8, False), (1e-3, False), (1e-8, True)])
def test_patched_msa_module_block_matches_openfold3(eps, fuse):
    """The MSA module block (fuse: its triangle multiplications in OpenFold3's fused form, linear_ab_p and
    linear_ab_g)."""
    from evofuse.integrations import openfold3 as integration

    assert_patched_block_matches(integration, _block(eps, fuse), _inputs(), PATCHED, _call)


def test_patched_evoformer_block_matches_openfold3():
    """OpenFold3's AF2-style EvoformerBlock: row attention with pair bias (its q, k, v without biases, the pair's
    LayerNorm fused), column attention, the Outer Product Mean and the pair stack's triangle modules patched; a fully
    masked MSA row included."""
    from openfold3.core.model.latent.evoformer import EvoformerBlock

    from evofuse.integrations import openfold3 as integration

    torch.manual_seed(0)
    original = randomize(EvoformerBlock(
        c_m=C_M, c_z=C_Z, c_hidden_msa_att=8, c_hidden_opm=8, c_hidden_mul=8, c_hidden_pair_att=8, no_heads_msa=2,
        no_heads_pair=2, transition_type="relu", transition_n=2, msa_dropout=0.0, pair_dropout=0.0,
        no_column_attention=False, opm_first=False, fuse_projection_weights=False, inf=1e9, eps=1e-8), 1).to(DEVICE)
    m, z, msa_mask, pair_mask = _inputs()
    msa_mask[:, 1] = 0  # a padding row: OpenFold3's gradient flows through its -1e9 logits
    assert_patched_block_matches(integration, original, (m, z, msa_mask, pair_mask), ["msa_att_col", *PATCHED], _call)


class _GlobalColumnAttention(torch.nn.Module):
    """OpenFold3's MSAColumnGlobalAttention (AF2 Algorithm 19: its extra-MSA stack's, with OpenFold's initialization:
    gate and output biases) in a residual update of m."""

    def __init__(self):
        super().__init__()
        from openfold3.core.model.layers.msa import MSAColumnGlobalAttention

        self.msa_att_col = MSAColumnGlobalAttention(C_M, 4, 4, inf=1e9, eps=1e-8)

    def forward(self, m, z, msa_mask, pair_mask, **kwargs):
        return m + self.msa_att_col(m, mask=msa_mask, chunk_size=None, use_lma=False), z


def test_patched_global_column_attention_matches_openfold3():
    from evofuse.integrations import openfold3 as integration

    torch.manual_seed(0)
    m, z, msa_mask, pair_mask = _inputs()
    msa_mask[:, :, 3] = 0  # a residue with no rows
    block = randomize(_GlobalColumnAttention(), 1).to(DEVICE)
    assert_patched_block_matches(integration, block, (m, z, msa_mask, pair_mask), ["msa_att_col"], _call)
    assert_autocast_like_original(integration, block, {"msa_att_col": (m, msa_mask)}, DEVICE)


def test_projections_with_biases_are_left_with_a_warning():
    from ml_collections import ConfigDict
    from openfold3.core.model.layers.msa import MSAPairWeightedAveraging

    from evofuse.integrations import openfold3 as integration

    with_bias = {name: {"bias": True, "init": "default"} for name in ("linear_z", "linear_v", "linear_g", "linear_o")}
    module = MSAPairWeightedAveraging(16, 8, 16, 2, linear_init_params=ConfigDict(with_bias))
    assert_left_unpatched(integration, module, "0 (MSAPairWeightedAveraging) left unpatched: projections with biases")


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as OpenFold3's linear layers do."""
    from evofuse.integrations import openfold3 as integration

    m, z, msa_mask, pair_mask = _inputs()
    assert_autocast_like_original(integration, _block(), {"msa_att_row": (m, z, pair_mask),
                                                          "outer_product_mean": (m, msa_mask),
                                                          "pair_stack.tri_att_start": (z, pair_mask),
                                                          "pair_stack.tri_mul_in": (z, pair_mask)}, DEVICE)


def _pairformer_block():
    """OpenFold3's PairFormerBlock, its inputs (a padding token masked) and its call."""
    from openfold3.core.model.latent.pairformer import PairFormerBlock

    torch.manual_seed(0)
    original = randomize(PairFormerBlock(
        c_s=C_M, c_z=C_Z, c_hidden_pair_bias=8, no_heads_pair_bias=2, c_hidden_mul=8, c_hidden_pair_att=8,
        no_heads_pair=2, transition_type="swiglu", transition_n=2, pair_dropout=0.0, fuse_projection_weights=False,
        inf=1e9), 1).to(DEVICE)
    g = torch.Generator().manual_seed(3)
    s, z = torch.randn(1, N, C_M, generator=g), torch.randn(1, N, N, C_Z, generator=g)
    single_mask = torch.ones(1, N)
    single_mask[:, -1] = 0
    pair_mask = single_mask[:, :, None] * single_mask[:, None, :]
    return (original, [t.to(DEVICE) for t in (s, z, single_mask, pair_mask)],
            lambda block, *x: block(*x, chunk_size=None, use_lma=False, inplace_safe=False))


def test_patched_pairformer_block_matches_openfold3():
    """OpenFold3's PairFormerBlock: its single track's attention with pair bias (one row of N tokens, both
    LayerNorms fused, a padding token masked), the pair stack's triangle modules and both transitions patched."""
    from evofuse.integrations import openfold3 as integration

    original, inputs, call = _pairformer_block()
    assert_patched_block_matches(
        integration, original, inputs,
        ["attn_pair_bias", "pair_stack.pair_transition", "pair_stack.tri_att_end", "pair_stack.tri_att_start",
         "pair_stack.tri_mul_in", "pair_stack.tri_mul_out", "single_transition"], call)


def test_small_pairformer_block_runs_openfold3_modules():
    """Below the crossovers the patched PairFormerBlock's modules are OpenFold3's own, with and without gradients."""
    from evofuse.integrations import openfold3 as integration

    assert_small_calls_run_the_original(integration, *_pairformer_block())


@pytest.mark.parametrize("shared_pair", [False, True])
def test_patched_diffusion_transformer_block_matches_openfold3(shared_pair):
    """OpenFold3's DiffusionTransformerBlock: its attention with pair bias after the adaptive LayerNorm, gated by s,
    computed by evofuse (a padding token masked); a pair shared by two samples (one leading dimension fewer) gives its
    bias once to both: a training step as the original's."""
    from openfold3.core.model.layers.diffusion_transformer import DiffusionTransformerBlock

    from evofuse.integrations import openfold3 as integration

    torch.manual_seed(0)
    original = randomize(DiffusionTransformerBlock(c_a=C_M, c_s=8, c_z=C_Z, c_hidden=8, no_heads=2, n_transition=2,
                                                   n_query=None, n_key=None, inf=1e9), 1).to(DEVICE)
    g = torch.Generator().manual_seed(3)
    a, s = torch.randn(1, 2, N, C_M, generator=g), torch.randn(1, 2, N, 8, generator=g)
    z = torch.randn(1, 1 if shared_pair else 2, N, N, C_Z, generator=g)
    if shared_pair:
        z = z[:, 0]
    mask = torch.ones(1, 2, N)
    mask[..., -1] = 0
    assert_patched_block_matches(integration, original, [t.to(DEVICE) for t in (a, z, s, mask)],
                                 ["attention_pair_bias"],
                                 lambda block, a, z, s, mask: block(a=a, s=s, z=z, mask=mask))
