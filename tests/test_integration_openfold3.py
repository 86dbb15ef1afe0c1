"""evofuse inside OpenFold3 (openfold3 0.5.0, installed without its dependencies: `pip install --no-deps
openfold3==0.5.0 gemmi ml_collections biotite`): OpenFold3's own MSA module block, patched, against the
unpatched one."""

import copy
import importlib.util
import warnings

import pytest
import torch

from evofuse.numerics import rel_error

from .conftest import DEVICE
from .helpers import randomize

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("openfold3", "gemmi", "ml_collections", "biotite")),
    reason="openfold3 0.5.0 (pip install --no-deps openfold3==0.5.0 gemmi ml_collections biotite) is not installed")
S, N, C_M, C_Z = 5, 7, 16, 16


def _block(eps=1e-8):
    from openfold3.core.model.latent.msa_module import MSAModuleBlock

    torch.manual_seed(0)
    block = MSAModuleBlock(c_m=C_M, c_z=C_Z, c_hidden_msa_att=8, c_hidden_opm=8, c_hidden_mul=8, c_hidden_pair_att=8,
                           no_heads_msa=2, no_heads_pair=2, transition_type="swiglu", transition_n=2, msa_dropout=0.0,
                           pair_dropout=0.0, opm_first=True, fuse_projection_weights=False, inf=1e9, eps=eps)
    return randomize(block, 1).to(DEVICE)


def _inputs():
    """m, z, the MSA mask and a pair mask with no fully masked row (OpenFold3's additive -1e9 makes such a row
    uniform in float32; evofuse keeps its logits: docs/NUMERICS.md)."""
    g = torch.Generator().manual_seed(2)
    m, z = torch.randn(1, S, N, C_M, generator=g), torch.randn(1, N, N, C_Z, generator=g)
    msa_mask = (torch.rand(1, S, N, generator=g) > 0.2).float()
    pair_mask = (torch.rand(1, N, N, generator=g) > 0.2).float()
    pair_mask[..., 0] = 1
    return [t.to(DEVICE) for t in (m, z, msa_mask, pair_mask)]


def _step(block, inputs):
    m, z, msa_mask, pair_mask = [t.clone().requires_grad_(t.dim() == 4) for t in inputs]
    m_out, z_out = block(m, z, msa_mask, pair_mask, chunk_size=None, use_lma=False, inplace_safe=False)
    (z_out.square().sum() + m_out.square().sum()).backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
    return m_out.detach(), z_out.detach(), m.grad, z.grad, grads


@pytest.fixture(autouse=True)
def fused_kernels(monkeypatch):
    """The patched modules take the fused kernels: on CPU tensors, in Triton's interpreter."""
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")


@pytest.mark.parametrize("eps", [1e-8, 1e-3])
def test_patched_msa_module_block_matches_openfold3(eps):
    from evofuse.integrations import openfold3 as integration

    original = _block(eps)
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
    assert type(patched.outer_product_mean) is type(original.outer_product_mean)


def test_patched_evoformer_block_matches_openfold3():
    """OpenFold3's AF2-style EvoformerBlock: row attention with pair bias (its q, k, v without biases, the pair's
    LayerNorm fused) and the Outer Product Mean patched; a fully masked MSA row included."""
    from openfold3.core.model.latent.evoformer import EvoformerBlock

    from evofuse.integrations import openfold3 as integration

    torch.manual_seed(0)
    original = randomize(EvoformerBlock(
        c_m=C_M, c_z=C_Z, c_hidden_msa_att=8, c_hidden_opm=8, c_hidden_mul=8, c_hidden_pair_att=8, no_heads_msa=2,
        no_heads_pair=2, transition_type="relu", transition_n=2, msa_dropout=0.0, pair_dropout=0.0,
        no_column_attention=False, opm_first=False, fuse_projection_weights=False, inf=1e9, eps=1e-8), 1).to(DEVICE)
    patched = copy.deepcopy(original)
    keys = list(original.state_dict())
    assert sorted(integration.patch(patched)) == ["msa_att_row", "outer_product_mean"]
    assert list(patched.state_dict()) == keys
    m, z, msa_mask, pair_mask = _inputs()
    msa_mask[:, 1] = 0  # a padding row: OpenFold3's gradient flows through its -1e9 logits
    expected, got = _step(original, (m, z, msa_mask, pair_mask)), _step(patched, (m, z, msa_mask, pair_mask))
    for a, b in zip(got[:4], expected[:4]):
        assert rel_error(a, b) <= 1e-5
    assert got[4].keys() == expected[4].keys()
    for name, g in got[4].items():  # (the pair LayerNorms' biases: gradient 0, the softmax ignores a constant)
        sibling = expected[4][name[:-4] + "weight" if name.endswith("bias") else name].norm()
        assert rel_error(g, expected[4][name]) <= 1e-5 or g.norm() <= 1e-6 * sibling, name


def test_projections_with_biases_are_left_with_a_warning():
    from openfold3.core.model.layers.msa import MSAPairWeightedAveraging

    from evofuse.integrations import openfold3 as integration

    with_bias = {name: {"bias": True, "init": "default"} for name in ("linear_z", "linear_v", "linear_g", "linear_o")}
    from ml_collections import ConfigDict

    holder = torch.nn.Sequential(MSAPairWeightedAveraging(16, 8, 16, 2, linear_init_params=ConfigDict(with_bias)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.patch(holder) == []
    assert any("0 (MSAPairWeightedAveraging) left unpatched: projections with biases" in str(w.message)
               for w in caught)
    assert type(holder[0]) is MSAPairWeightedAveraging


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as OpenFold3's linear layers do: within
    the contract's 16-bit bound of OpenFold3's own modules under the same autocast."""
    from evofuse.integrations import openfold3 as integration

    dtype = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # (the interpreter's bf16 products are not checked)
    block = _block()
    originals = {"pwa": block.msa_att_row, "opm": block.outer_product_mean}
    patched = copy.deepcopy(block)
    integration.patch(patched)
    fused = {"pwa": patched.msa_att_row, "opm": patched.outer_product_mean}
    m, z, msa_mask, pair_mask = _inputs()
    args = {"pwa": (m, z, pair_mask), "opm": (m, msa_mask)}
    for key in ("pwa", "opm"):
        with torch.no_grad():
            exact = copy.deepcopy(originals[key]).double()(*(t.double() for t in args[key]))
            with torch.autocast(DEVICE, dtype=dtype):
                ours, theirs = fused[key](*args[key]), originals[key](*args[key])
        assert ours.dtype == theirs.dtype, key
        assert rel_error(ours, exact) <= 2 * rel_error(theirs, exact) + 1e-3, key
