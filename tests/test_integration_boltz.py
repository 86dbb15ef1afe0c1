"""evofuse inside Boltz (boltz 2.2.1, installed without its dependencies: `pip install --no-deps boltz==2.2.1`
with scipy and einops): Boltz's own MSA layer, patched, against the unpatched one."""

import copy
import importlib.util
import warnings

import pytest
import torch

from evofuse.numerics import rel_error

from .conftest import DEVICE
from .helpers import randomize

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("boltz") is None or importlib.util.find_spec("einops") is None,
    reason="boltz 2.2.1 (pip install --no-deps boltz==2.2.1 scipy einops==0.8.0) is not installed")


def _layer():
    from boltz.model.modules.trunkv2 import MSALayer

    torch.manual_seed(0)
    return randomize(MSALayer(msa_s=16, token_z=16, msa_dropout=0.0, z_dropout=0.0, pairwise_head_width=8,
                              pairwise_num_heads=2), 1).to(DEVICE)


def _inputs():
    g = torch.Generator().manual_seed(2)
    z, m = torch.randn(1, 7, 7, 16, generator=g), torch.randn(1, 3, 7, 16, generator=g)
    token_mask = (torch.rand(1, 7, 7, generator=g) > 0.2).float()
    msa_mask = (torch.rand(1, 3, 7, generator=g) > 0.2).float()
    return [t.to(DEVICE) for t in (z, m, token_mask, msa_mask)]


def _step(layer, inputs):
    z, m, token_mask, msa_mask = [t.clone().requires_grad_(t.dim() == 4) for t in inputs]
    z_out, m_out = layer(z, m, token_mask, msa_mask, chunk_heads_pwa=False, chunk_size_outer_product=None)
    (z_out.square().sum() + m_out.square().sum()).backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    return z_out.detach(), m_out.detach(), z.grad, m.grad, grads


@pytest.fixture(autouse=True)
def fused_kernels(monkeypatch):
    """The patched modules take the fused kernels: on CPU tensors, in Triton's interpreter."""
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")


def test_patched_msa_layer_matches_boltz():
    from evofuse.integrations import boltz as integration

    original = _layer()
    patched = copy.deepcopy(original)
    keys = list(original.state_dict())
    assert sorted(integration.patch(patched)) == ["outer_product_mean", "pair_weighted_averaging"]
    assert list(patched.state_dict()) == keys  # the checkpoint's names, unchanged
    inputs = _inputs()
    expected, got = _step(original, inputs), _step(patched, inputs)
    for a, b in zip(got[:4], expected[:4]):
        assert rel_error(a, b) <= 1e-5
    for name, g in got[4].items():  # (norm_z.bias's gradient is 0: the softmax ignores a constant)
        sibling = expected[4][name.replace("bias", "weight")].norm()
        assert rel_error(g, expected[4][name]) <= 1e-5 or g.norm() <= 1e-6 * sibling, name
    assert sorted(integration.unpatch(patched)) == ["outer_product_mean", "pair_weighted_averaging"]
    assert type(patched.outer_product_mean) is type(original.outer_product_mean)


def test_unsupported_module_is_left_with_a_warning():
    from boltz.model.layers.outer_product_mean import OuterProductMean

    from evofuse.integrations import boltz as integration

    holder = torch.nn.Sequential(OuterProductMean(8, 5, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.patch(holder) == []
    assert any("0 (OuterProductMean) left unpatched: c_hidden 5" in str(w.message) for w in caught)
    assert type(holder[0]) is OuterProductMean


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as Boltz's linear layers do: within the
    contract's 16-bit bound of Boltz's own modules under the same autocast (the whole layer's other parts take
    no CPU float16 autocast, so the two modules are compared alone)."""
    from evofuse.integrations import boltz as integration

    dtype = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # (the interpreter's bf16 products are not checked)
    layer = _layer()
    originals = {"pwa": layer.pair_weighted_averaging, "opm": layer.outer_product_mean}
    patched = copy.deepcopy(layer)
    integration.patch(patched)
    fused = {"pwa": patched.pair_weighted_averaging, "opm": patched.outer_product_mean}
    z, m, token_mask, msa_mask = _inputs()
    args = {"pwa": (m, z, token_mask), "opm": (m, msa_mask)}
    for key in ("pwa", "opm"):
        with torch.no_grad():
            exact = copy.deepcopy(originals[key]).double()(*(t.double() for t in args[key]))
            with torch.autocast(DEVICE, dtype=dtype):
                ours, theirs = fused[key](*args[key]), originals[key](*args[key])
        assert ours.dtype == theirs.dtype == dtype
        assert rel_error(ours, exact) <= 2 * rel_error(theirs, exact) + 1e-3, key
