"""evofuse inside Protenix (protenix 2.0.0, installed without its dependencies: `pip install --no-deps
protenix==2.0.0 scipy optree rdkit`): Protenix's own MSA block, patched, against the unpatched one."""

import copy
import importlib.util
import os

import pytest
import torch

from .conftest import DEVICE
from .helpers import (
    assert_autocast_like_original,
    assert_left_unpatched,
    assert_patched_block_matches,
    assert_small_calls_run_the_original,
    randomize,
    rel_error,
)

pytestmark = [pytest.mark.usefixtures("fused_kernels"), pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("protenix", "optree", "rdkit", "scipy")),
    reason="protenix 2.0.0 (pip install --no-deps protenix==2.0.0 scipy optree rdkit) is not installed")]

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


def test_patched_msa_block_matches_protenix():
    from evofuse.integrations import protenix as integration

    assert_patched_block_matches(integration, _block(), _inputs(),
                                 ["msa_stack.msa_pair_weighted_averaging", "msa_stack.transition_m",
                                  "outer_product_mean_msa", "pair_stack.pair_transition", "pair_stack.tri_att_end",
                                  "pair_stack.tri_att_start", "pair_stack.tri_mul_in", "pair_stack.tri_mul_out"])


def _pairformer_block():
    """Protenix's PairformerBlock, its inputs (a padding token masked) and its call with Protenix's chunk size and
    kernel switch."""
    from protenix.model.modules.pairformer import PairformerBlock

    torch.manual_seed(0)
    block = randomize(PairformerBlock(n_heads=2, c_z=C_Z, c_s=C_M, c_hidden_mul=8, c_hidden_pair_att=8,
                                      no_heads_pair=2, dropout=0.0), 3).to(DEVICE)
    g = torch.Generator().manual_seed(4)
    s, z = torch.randn(N, C_M, generator=g), torch.randn(N, N, C_Z, generator=g)
    mask = torch.ones(N)
    mask[-1] = 0
    pair_mask = mask[:, None] * mask[None, :]
    return (block, [t.to(DEVICE) for t in (s, z, pair_mask)],
            lambda b, *x: b(*x, triangle_attention="torch", chunk_size=4))


def test_patched_pairformer_block_matches_protenix():
    """Protenix's PairformerBlock with its two triangle attentions, two triangle multiplications, two transitions and
    its single track's attention with pair bias patched: a training step as the original's."""
    from evofuse.integrations import protenix as integration

    block, inputs, call = _pairformer_block()
    assert_patched_block_matches(integration, block, inputs,
                                 ["attention_pair_bias", "pair_transition", "single_transition", "tri_att_end",
                                  "tri_att_start", "tri_mul_in", "tri_mul_out"], call)


def test_small_pairformer_block_runs_protenix_modules():
    """Below the crossovers the patched PairformerBlock's modules are Protenix's own, with and without gradients."""
    from evofuse.integrations import protenix as integration

    assert_small_calls_run_the_original(integration, *_pairformer_block())


def test_patched_pairformer_block_in_place_inference_matches_protenix():
    """Protenix's inference call (`inplace_safe=True`, eval, no gradients): the patched block adds its triangle
    multiplications' updates into z in place as the original does, with the original's outputs."""
    from protenix.model.modules.pairformer import PairformerBlock

    from evofuse.integrations import protenix as integration

    torch.manual_seed(0)
    block = randomize(PairformerBlock(n_heads=2, c_z=C_Z, c_s=C_M, c_hidden_mul=8, c_hidden_pair_att=8,
                                      no_heads_pair=2, dropout=0.0), 3).to(DEVICE).eval()
    g = torch.Generator().manual_seed(4)
    s, z = torch.randn(N, C_M, generator=g).to(DEVICE), torch.randn(N, N, C_Z, generator=g).to(DEVICE)
    pair_mask = torch.ones(N, N, device=DEVICE)
    pair_mask[-1] = pair_mask[:, -1] = 0
    patched = copy.deepcopy(block)
    integration.patch(patched)
    with torch.no_grad():
        expected = block(s.clone(), z.clone(), pair_mask, inplace_safe=True, chunk_size=4)
        got = patched(s.clone(), z.clone(), pair_mask, inplace_safe=True, chunk_size=4)
    for a, b in zip(got, expected):
        assert rel_error(a, b) <= 1e-5
    with torch.no_grad():  # (the sum in the caller's z: no pair-sized tensor beside it)
        assert patched.tri_mul_out(z, mask=pair_mask, inplace_safe=True, _add_with_inplace=True) is z


def test_unsupported_module_is_left_with_a_warning():
    from protenix.model.triangular.layers import OuterProductMean

    from evofuse.integrations import protenix as integration

    assert_left_unpatched(integration, OuterProductMean(8, 5, 12), "0 (OuterProductMean) left unpatched: c_hidden 12")


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute as Protenix's do (its Outer Product Mean in float32 under CUDA
    float16 autocast)."""
    from evofuse.integrations import protenix as integration

    m, z, pair_mask = _inputs()
    mask = (torch.rand(S, N, generator=torch.Generator().manual_seed(3)) > 0.2).float().to(DEVICE)
    assert_autocast_like_original(integration, _block(), {"msa_stack.msa_pair_weighted_averaging": (m, z),
                                                          "outer_product_mean_msa": (m, mask),
                                                          "pair_stack.tri_att_end": (z, pair_mask),
                                                          "pair_stack.tri_mul_out": (z, pair_mask)}, DEVICE)


def test_triangle_multiplication_under_float16_autocast_computes_in_float32(monkeypatch):
    """Under CUDA float16 autocast (Protenix's `is_fp16_enabled`, made true here: CPU autocast stands in) Protenix
    scales a and b and takes their product in float32; the replacement computes in float32 and returns the model's
    float16, within float16's rounding of the original's output, where a float16 product would overflow."""
    import protenix.model.triangular.triangular as triangular
    import protenix.model.utils as utils
    from protenix.model.triangular.triangular import TriangleMultiplicationOutgoing

    from evofuse.integrations import protenix as integration

    monkeypatch.setattr(utils, "is_fp16_enabled", lambda: True)
    monkeypatch.setattr(triangular, "is_fp16_enabled", lambda: True)
    block = torch.nn.Sequential(randomize(TriangleMultiplicationOutgoing(C_Z, 8), 5)).to(DEVICE)
    with torch.no_grad():  # a and b large: their float16 product over 40 k would pass 65504
        for name in ("linear_a_p", "linear_b_p"):
            getattr(block[0], name).weight.mul_(300.0)
    patched = copy.deepcopy(block)
    integration.patch(patched)
    g = torch.Generator().manual_seed(6)
    z = torch.randn(1, 40, 40, C_Z, generator=g).to(DEVICE)
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.float16):
        ours, theirs = patched(z), block(z)
    assert ours.dtype == theirs.dtype == torch.float16
    assert torch.isfinite(ours).all() and torch.isfinite(theirs).all()
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("local", [False, True])
def test_patched_diffusion_transformer_block_matches_protenix(local):
    """Protenix's DiffusionTransformerBlock: its conditioned attention with pair bias (adaptive LayerNorm of a by s,
    the output gated by s) computed by evofuse, the pair's bias from z: a training step as the original's. With
    local attention (the atom transformer's n_queries and n_keys, z in blocks) the original's forward runs."""
    from protenix.model.modules.transformer import DiffusionTransformerBlock

    from evofuse.integrations import protenix as integration

    torch.manual_seed(0)
    block = randomize(DiffusionTransformerBlock(n_heads=2, c_a=C_M, c_s=8, c_z=C_Z), 5).to(DEVICE)
    g = torch.Generator().manual_seed(6)
    N = 8
    a, s = torch.randn(2, N, C_M, generator=g), torch.randn(2, N, 8, generator=g)
    z = torch.randn(2, 2, 4, 8, C_Z, generator=g) if local else torch.randn(2, N, N, C_Z, generator=g)
    window = dict(n_queries=4, n_keys=8) if local else {}
    assert_patched_block_matches(integration, block, [t.to(DEVICE) for t in (a, s, z)], ["attention_pair_bias"],
                                 lambda b, *x: b(*x, **window))


def test_patched_diffusion_transformer_block_with_efficient_fusion_matches_protenix():
    """The diffusion module's inference setting `enable_efficient_fusion`: every block gets the pair normalized once
    (no scale, no offset) with its channels first, shared by the samples (a broadcast against a's two), and makes
    its bias from it; evofuse's bias from the same product, given to `attention_pair_bias` ready made."""
    from protenix.model.modules.transformer import DiffusionTransformerBlock

    from evofuse.integrations import protenix as integration

    torch.manual_seed(0)
    block = randomize(DiffusionTransformerBlock(n_heads=2, c_a=C_M, c_s=8, c_z=C_Z), 7).to(DEVICE)
    g = torch.Generator().manual_seed(8)
    N = 8
    a, s = torch.randn(2, N, C_M, generator=g), torch.randn(2, N, 8, generator=g)
    pair = torch.nn.functional.layer_norm(torch.randn(1, N, N, C_Z, generator=g), (C_Z,))
    z = pair.permute(0, 3, 1, 2).contiguous()  # (1, c_z, N, N), as the diffusion module hands it on
    assert_patched_block_matches(integration, block, [t.to(DEVICE) for t in (a, s, z)], ["attention_pair_bias"],
                                 lambda b, *x: b(*x, enable_efficient_fusion=True))
