"""evofuse inside OpenFold (AlphaFold 2): its MSA row attention with pair bias and Outer Product Mean, patched,
against the unpatched modules. OpenFold is not on the package index in a usable form: the modules are the
small `openfold` package under tests/openfold_modules, which follows OpenFold's public module code."""

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from evofuse.numerics import rel_error

from .conftest import DEVICE
from .helpers import randomize

S, N, C_M, C_Z = 5, 7, 16, 12


@pytest.fixture(autouse=True)
def openfold_modules(monkeypatch):
    """The `openfold` package of the tests importable; the fused kernels taken (in the interpreter on CPU)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "openfold_modules"))
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")
    yield
    for name in [n for n in sys.modules if n == "openfold" or n.startswith("openfold.")]:
        del sys.modules[name]


class EvoformerMSAPart(nn.Module):
    """The MSA half of an Evoformer block: row attention with pair bias, then the Outer Product Mean."""

    def __init__(self):
        super().__init__()
        from openfold.model.msa import MSARowAttentionWithPairBias
        from openfold.model.outer_product_mean import OuterProductMean

        self.msa_att_row = MSARowAttentionWithPairBias(C_M, C_Z, c_hidden=8, no_heads=3)  # inner 24, not 16
        self.outer_product_mean = OuterProductMean(C_M, C_Z, c_hidden=8, eps=1e-3)

    def forward(self, m, z, msa_mask):
        m = m + self.msa_att_row(m, z=z, mask=msa_mask, chunk_size=None, use_memory_efficient_kernel=False,
                                 use_lma=False, inplace_safe=False)
        return m, z + self.outer_product_mean(m, mask=msa_mask, chunk_size=None, inplace_safe=False)


def _inputs():
    """m, z and an MSA mask with a padding row (every residue masked)."""
    g = torch.Generator().manual_seed(2)
    m, z = torch.randn(2, S, N, C_M, generator=g), torch.randn(2, N, N, C_Z, generator=g)
    msa_mask = (torch.rand(2, S, N, generator=g) > 0.2).float()
    msa_mask[:, -1] = 0
    return [t.to(DEVICE) for t in (m, z, msa_mask)]


def _step(block, inputs):
    m, z, msa_mask = [t.clone().requires_grad_(t.dim() == 4) for t in inputs]
    m_out, z_out = block(m, z, msa_mask)
    (z_out.square().sum() + m_out.square().sum()).backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
    return m_out.detach(), z_out.detach(), m.grad, z.grad, grads


def test_patched_evoformer_msa_part_matches_openfold():
    from evofuse.integrations import openfold as integration

    torch.manual_seed(0)
    original = randomize(EvoformerMSAPart(), 1).to(DEVICE)
    patched = copy.deepcopy(original)
    keys = list(original.state_dict())
    assert sorted(integration.patch(patched)) == ["msa_att_row", "outer_product_mean"]
    assert list(patched.state_dict()) == keys  # the checkpoint's names, unchanged
    inputs = _inputs()
    expected, got = _step(original, inputs), _step(patched, inputs)
    for a, b in zip(got[:4], expected[:4]):
        assert rel_error(a, b) <= 1e-5
    assert got[4].keys() == expected[4].keys()
    for name, g in got[4].items():  # (layer_norm_z.bias's gradient is 0: the softmax ignores a constant)
        sibling = expected[4][name[:-4] + "weight" if name.endswith("bias") else name].norm()
        assert rel_error(g, expected[4][name]) <= 1e-5 or g.norm() <= 1e-6 * sibling, name
    assert sorted(integration.unpatch(patched)) == ["msa_att_row", "outer_product_mean"]
    assert type(patched.msa_att_row) is type(original.msa_att_row)


def test_unsupported_module_is_left_with_a_warning():
    from openfold.model.msa import MSARowAttentionWithPairBias

    from evofuse.integrations import openfold as integration

    holder = nn.Sequential(MSARowAttentionWithPairBias(C_M, C_Z, c_hidden=8, no_heads=2, inf=1e4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.patch(holder) == []
    assert any("0 (MSARowAttentionWithPairBias) left unpatched: inf 10000.0" in str(w.message) for w in caught)


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as OpenFold's linear layers do: within
    the contract's 16-bit bound of OpenFold's own modules under the same autocast."""
    from evofuse.integrations import openfold as integration

    dtype = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # (the interpreter's bf16 products are not checked)
    block = randomize(EvoformerMSAPart(), 1).to(DEVICE)
    patched = copy.deepcopy(block)
    integration.patch(patched)
    m, z, msa_mask = _inputs()
    msa_mask[:, -1] = 1
    cases = {"att": (block.msa_att_row, patched.msa_att_row, (m, z, msa_mask)),
             "opm": (block.outer_product_mean, patched.outer_product_mean, (m, msa_mask))}
    for key, (theirs_mod, ours_mod, args) in cases.items():
        with torch.no_grad():
            exact = copy.deepcopy(theirs_mod).double()(*(t.double() for t in args))
            with torch.autocast(DEVICE, dtype=dtype):
                ours, theirs = ours_mod(*args), theirs_mod(*args)
        assert ours.dtype == theirs.dtype, key
        assert rel_error(ours, exact) <= 2 * rel_error(theirs, exact) + 1e-3, key
