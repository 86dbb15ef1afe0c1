"""evofuse inside OpenFold (AlphaFold 2): its MSA row and column attention, Outer Product Mean and pair stack's
triangle modules, patched, against the unpatched modules. OpenFold is not on the package index in a usable form: the
modules are the small `openfold` package under tests/openfold_modules, which follows OpenFold's public module code."""

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from .conftest import DEVICE
from .helpers import (
    assert_autocast_like_original,
    assert_left_unpatched,
    assert_patched_block_matches,
    assert_small_calls_run_the_original,
    randomize,
)

S, N, C_M, C_Z = 5, 7, 16, 12


@pytest.fixture(autouse=True)
def openfold_modules(monkeypatch, fused_kernels):
    """The `openfold` package of the tests importable; the fused kernels taken (in the interpreter on CPU)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))
    yield
    for name in [n for n in sys.modules if n == "openfold" or n.startswith("openfold.")]:
        del sys.modules[name]


class EvoformerMSAPart(nn.Module):
    """The MSA half of an Evoformer block: row attention with pair bias, column attention, the MSA transition, then
    the Outer Product Mean."""

    def __init__(self):
        super().__init__()
        from openfold.model.evoformer import MSATransition
        from openfold.model.msa import MSAColumnAttention, MSARowAttentionWithPairBias
        from openfold.model.outer_product_mean import OuterProductMean

        self.msa_att_row = MSARowAttentionWithPairBias(C_M, C_Z, c_hidden=8, no_heads=3)  # inner 24, not 16
        self.msa_att_col = MSAColumnAttention(C_M, c_hidden=8, no_heads=2)
        self.msa_transition = MSATransition(C_M, 3)
        self.outer_product_mean = OuterProductMean(C_M, C_Z, c_hidden=8, eps=1e-3)

    def forward(self, m, z, msa_mask):
        m = m + self.msa_att_row(m, z=z, mask=msa_mask, chunk_size=None, use_memory_efficient_kernel=False,
                                 use_lma=False, inplace_safe=False)
        m = m + self.msa_att_col(m, mask=msa_mask, chunk_size=None, inplace_safe=False, use_lma=False)
        m = m + self.msa_transition(m, mask=msa_mask, chunk_size=None)
        return m, z + self.outer_product_mean(m, mask=msa_mask, chunk_size=None, inplace_safe=False)


def _inputs():
    """m, z and an MSA mask with a padding row (every residue masked)."""
    g = torch.Generator().manual_seed(2)
    m, z = torch.randn(2, S, N, C_M, generator=g), torch.randn(2, N, N, C_Z, generator=g)
    msa_mask = (torch.rand(2, S, N, generator=g) > 0.2).float()
    msa_mask[:, -1] = 0
    return [t.to(DEVICE) for t in (m, z, msa_mask)]


def test_patched_evoformer_msa_part_matches_openfold():
    from evofuse.integrations import openfold as integration

    torch.manual_seed(0)
    assert_patched_block_matches(integration, randomize(EvoformerMSAPart(), 1).to(DEVICE), _inputs(),
                                 ["msa_att_col", "msa_att_row", "msa_transition", "outer_product_mean"])


class ExtraMSAPart(nn.Module):
    """The MSA half of an extra-MSA block (AF2 Algorithm 18): row attention with pair bias, global column attention
    (OpenFold's model config: eps 1e-8) and the MSA transition."""

    def __init__(self):
        super().__init__()
        from openfold.model.evoformer import MSATransition
        from openfold.model.msa import MSAColumnGlobalAttention, MSARowAttentionWithPairBias

        self.msa_att_row = MSARowAttentionWithPairBias(C_M, C_Z, c_hidden=4, no_heads=4)
        self.msa_att_col = MSAColumnGlobalAttention(C_M, c_hidden=4, no_heads=4, inf=1e9, eps=1e-8)
        self.msa_transition = MSATransition(C_M, 2)

    def forward(self, m, z, msa_mask):
        m = m + self.msa_att_row(m, z=z, mask=msa_mask, chunk_size=None, use_lma=False)
        m = m + self.msa_att_col(m, mask=msa_mask, chunk_size=None, use_lma=False)
        return m + self.msa_transition(m, mask=msa_mask, chunk_size=None), z


def test_patched_extra_msa_part_matches_openfold():
    from evofuse.integrations import openfold as integration

    torch.manual_seed(0)
    m, z, msa_mask = _inputs()
    msa_mask[:, :, 2] = 0  # a residue with no rows: its column's mean over none, every key masked
    assert_patched_block_matches(integration, randomize(ExtraMSAPart(), 1).to(DEVICE), (m, z, msa_mask),
                                 ["msa_att_col", "msa_att_row", "msa_transition"])


def test_unsupported_module_is_left_with_a_warning():
    from openfold.model.msa import MSARowAttentionWithPairBias

    from evofuse.integrations import openfold as integration

    module = MSARowAttentionWithPairBias(C_M, C_Z, c_hidden=8, no_heads=2, inf=1e4)
    assert_left_unpatched(integration, module, "0 (MSARowAttentionWithPairBias) left unpatched: inf 10000.0")


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as OpenFold's linear layers do."""
    from evofuse.integrations import openfold as integration

    m, z, msa_mask = _inputs()
    msa_mask[:, -1] = 1
    assert_autocast_like_original(integration, randomize(EvoformerMSAPart(), 1).to(DEVICE), {
        "msa_att_row": (m, z, msa_mask), "msa_att_col": (m, msa_mask), "outer_product_mean": (m, msa_mask),
        "msa_transition": (m, msa_mask)}, DEVICE)
    assert_autocast_like_original(integration, randomize(ExtraMSAPart(), 1).to(DEVICE), {
        "msa_att_col": (m, msa_mask)}, DEVICE)


def test_patch_names_a_model_that_is_no_module():
    from evofuse.integrations import openfold as integration

    for call in (integration.patch, integration.unpatch):
        with pytest.raises(TypeError, match="model must be a torch.nn.Module, got dict"):
            call({})


class EvoformerPairPart(nn.Module):
    """An Evoformer block's pair stack but its transition: the triangle multiplications (outgoing, incoming, with
    OpenFold's biases), then the triangle attentions around the starting node and the ending node."""

    def __init__(self):
        super().__init__()
        from openfold.model.pair_transition import PairTransition
        from openfold.model.triangular_attention import TriangleAttentionEndingNode, TriangleAttentionStartingNode
        from openfold.model.triangular_multiplicative_update import (
            TriangleMultiplicationIncoming,
            TriangleMultiplicationOutgoing,
        )

        self.tri_mul_out = TriangleMultiplicationOutgoing(C_Z, 6)
        self.tri_mul_in = TriangleMultiplicationIncoming(C_Z, 6)
        self.tri_att_start = TriangleAttentionStartingNode(C_Z, 8, 3)
        self.tri_att_end = TriangleAttentionEndingNode(C_Z, 8, 3)
        self.pair_transition = PairTransition(C_Z, 2)

    def forward(self, z, z_update, pair_mask):
        """z and the update the MSA stack adds to it (the block step's second differentiable input)."""
        z = z + z_update
        z = z + self.tri_mul_out(z, mask=pair_mask, inplace_safe=False, _add_with_inplace=False)
        z = z + self.tri_mul_in(z, mask=pair_mask, inplace_safe=False, _add_with_inplace=False)
        z = z + self.tri_att_start(z, mask=pair_mask, chunk_size=None, use_memory_efficient_kernel=False,
                                   use_deepspeed_evo_attention=False, use_lma=False, inplace_safe=False)
        z = z + self.tri_att_end(z, mask=pair_mask, chunk_size=None, use_memory_efficient_kernel=False,
                                 use_deepspeed_evo_attention=False, use_lma=False, inplace_safe=False)
        return z + self.pair_transition(z, pair_mask, None)


def _pair_inputs():
    """z, an update to it and a pair mask with a padding residue (its row and column masked)."""
    g = torch.Generator().manual_seed(3)
    z, z_update = torch.randn(2, N, N, C_Z, generator=g), 0.3 * torch.randn(2, N, N, C_Z, generator=g)
    pair_mask = (torch.rand(2, N, N, generator=g) > 0.2).float()
    pair_mask[:, -1] = 0
    pair_mask[:, :, -1] = 0
    return [t.to(DEVICE) for t in (z, z_update, pair_mask)]


def test_patched_pair_stack_matches_openfold():
    """Both triangle multiplications, both triangle attentions and the pair transition patched: a training step
    (outputs, z's gradient, every parameter's) as OpenFold's."""
    from evofuse.integrations import openfold as integration

    torch.manual_seed(0)
    assert_patched_block_matches(integration, randomize(EvoformerPairPart(), 4).to(DEVICE), _pair_inputs(),
                                 ["pair_transition", "tri_att_end", "tri_att_start", "tri_mul_in", "tri_mul_out"])


def test_small_pair_stack_runs_openfold_modules():
    """Below the crossovers the patched pair stack's modules are OpenFold's own, with and without gradients."""
    from evofuse.integrations import openfold as integration

    torch.manual_seed(0)
    assert_small_calls_run_the_original(integration, randomize(EvoformerPairPart(), 4).to(DEVICE), _pair_inputs())


def test_triangle_attention_with_a_smaller_inf_is_left_with_a_warning():
    from openfold.model.triangular_attention import TriangleAttention

    from evofuse.integrations import openfold as integration

    assert_left_unpatched(integration, TriangleAttention(C_Z, 8, 2, inf=1e5),
                          "0 (TriangleAttention) left unpatched: inf 100000.0")


def test_patched_pair_stack_under_autocast():
    from evofuse.integrations import openfold as integration

    z, _, pair_mask = _pair_inputs()
    assert_autocast_like_original(integration, randomize(EvoformerPairPart(), 4).to(DEVICE), {
        "tri_att_start": (z, pair_mask), "tri_att_end": (z, pair_mask), "tri_mul_out": (z, pair_mask),
        "tri_mul_in": (z, pair_mask)}, DEVICE)
