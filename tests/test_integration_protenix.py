"""evofuse inside Protenix (protenix 2.0.0, installed without its dependencies: `pip install --no-deps
protenix==2.0.0 scipy optree rdkit`): Protenix's own MSA block, patched, against the unpatched one."""

import copy
import importlib.util
import os
import warnings

import pytest
import torch

from evofuse.numerics import rel_error

from .conftest import DEVICE
from .helpers import randomize

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("protenix", "optree", "rdkit", "scipy")),
    reason="protenix 2.0.0 (pip install --no-deps protenix==2.0.0 scipy optree rdkit) is not installed")

os.environ.setdefault("LAYERNORM_TYPE", "torch")  # Protenix's own LayerNorm builds a CUDA extension otherwise
S, N, C_M, C_Z = 5, 7, 16, 16


def _block():
    from protenix.model.modules.pairformer import MSABlock

    torch.manual_seed(0)
    block = MSABlock(c_m=C_M, c_z=C_Z, c_hidden=8, msa_dropout=0.0, pair_dropout=0.0, msa_chunk_size=S,
                     msa_max_size=S)
    return randomize(block, 1).to(DEVICE)


def _inputs():
    g = torch.Generator().manual_seed(2)
    m, z = torch.randn(S, N, C_M, generator=g), torch.randn(N, N, C_Z, generator=g)
    pair_mask = torch.ones(N, N)
    return [t.to(DEVICE) for t in (m, z, pair_mask)]


def _step(block, inputs):
    m, z, pair_mask = [t.clone().requires_grad_(t.dim() == 3 and t.shape[-1] > N) for t in inputs]
    m_out, z_out = block(m, z, pair_mask)
    (z_out.square().sum() + m_out.square().sum()).backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
    return m_out.detach(), z_out.detach(), m.grad, z.grad, grads


@pytest.fixture(autouse=True)
def fused_kernels(monkeypatch):
    """The patched modules take the fused kernels: on CPU tensors, in Triton's interpreter."""
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")


def test_patched_msa_block_matches_protenix():
    from evofuse.integrations import protenix as integration

    original = _block()
    patched = copy.deepcopy(original)
    keys = list(original.state_dict())
    names = ["msa_stack.msa_pair_weighted_averaging", "outer_product_mean_msa"]
    assert sorted(integration.patch(patched)) == names
    assert list(patched.state_dict()) == keys  # the checkpoint's names, unchanged
    inputs = _inputs()
    expected, got = _step(original, inputs), _step(patched, inputs)
    for a, b in zip(got[:4], expected[:4]):
        assert rel_error(a, b) <= 1e-5
    assert got[4].keys() == expected[4].keys()
    for name, g in got[4].items():  # (layernorm_z.bias's gradient is 0: the softmax ignores a constant)
        sibling = expected[4][name[:-4] + "weight" if name.endswith("bias") else name].norm()
        assert rel_error(g, expected[4][name]) <= 1e-5 or g.norm() <= 1e-6 * sibling, name
    assert sorted(integration.unpatch(patched)) == names
    assert type(patched.outer_product_mean_msa) is type(original.outer_product_mean_msa)


def test_unsupported_module_is_left_with_a_warning():
    from protenix.model.triangular.layers import OuterProductMean

    from evofuse.integrations import protenix as integration

    holder = torch.nn.Sequential(OuterProductMean(8, 5, 12))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.patch(holder) == []
    assert any("0 (OuterProductMean) left unpatched: c_hidden 12" in str(w.message) for w in caught)
    assert type(holder[0]) is OuterProductMean


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute as Protenix's do (its Outer Product Mean in float32 under
    float16 autocast): within the contract's 16-bit bound of Protenix's own modules under the same autocast."""
    from evofuse.integrations import protenix as integration

    dtype = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # (the interpreter's bf16 products are not checked)
    block = _block()
    originals = {"pwa": block.msa_stack.msa_pair_weighted_averaging, "opm": block.outer_product_mean_msa}
    patched = copy.deepcopy(block)
    integration.patch(patched)
    fused = {"pwa": patched.msa_stack.msa_pair_weighted_averaging, "opm": patched.outer_product_mean_msa}
    m, z, _ = _inputs()
    mask = (torch.rand(S, N, generator=torch.Generator().manual_seed(3)) > 0.2).float().to(DEVICE)
    args = {"pwa": (m, z), "opm": (m, mask)}
    for key in ("pwa", "opm"):
        with torch.no_grad():
            exact = copy.deepcopy(originals[key]).double()(*(t.double() for t in args[key]))
            with torch.autocast(DEVICE, dtype=dtype):
                ours, theirs = fused[key](*args[key]), originals[key](*args[key])
        assert ours.dtype == theirs.dtype, key
        assert rel_error(ours, exact) <= 2 * rel_error(theirs, exact) + 1e-3, key
