"""Every operation at long sequences without a crash or a NaN (issue 79's lengths): each pair operation at N 4096 and
each MSA operation at S 8192 x N 2048, bf16, at the models' widths, a forward and a backward whose output and every
gradient are finite. The same cases run on the CPU at small sizes through the reference (the kernels' own checks are
the operations' contract tests), so that the GPU's cases are known to build and run."""

import pytest
import torch

from evofuse import (
    AttentionPairBias,
    MSAColumnAttention,
    MSAColumnGlobalAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)

from .conftest import DEVICE
from .helpers import randomize


def _pair_case(name, N, B=1):
    """(module, inputs, how many inputs take a gradient) of a pair operation at N residues (c_z 128)."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(B, N, N, 128, generator=g)
    mask = torch.rand(B, N, N, generator=g) > 0.05
    if name == "apb":
        return (randomize(AttentionPairBias(384, 128, 16), 2),
                (torch.randn(B, N, 384, generator=g), z, torch.rand(B, N, generator=g) > 0.05), 2)
    mod = {"tri-start": lambda: TriangleAttention(128, 32, 4, gate_and_output_bias=False),
           "tri-end": lambda: TriangleAttention(128, 32, 4, starting=False, gate_and_output_bias=False),
           "trimul-out": lambda: TriangleMultiplication(128),
           "trimul-in": lambda: TriangleMultiplication(128, outgoing=False),
           "trans": lambda: Transition(128, 512)}[name]()
    return randomize(mod, 2), (z, mask), 1


def _msa_case(name, S, N, B=1):
    """(module, inputs, how many inputs take a gradient) of an MSA operation at S rows of N residues (the AF3-family
    MSA module's c_m 64 and the AF2 extra-MSA stack's 64, c_z 128)."""
    g = torch.Generator().manual_seed(3)
    m = torch.randn(B, S, N, 64, generator=g)
    msa_mask = torch.rand(B, S, N, generator=g) > 0.05
    z = torch.randn(B, N, N, 128, generator=g)
    if name == "pwa":
        return (randomize(PairWeightedAveraging(64, 128, 32, 8), 4), (m, z, torch.rand(B, N, N, generator=g) > 0.05),
                2)
    if name == "att":
        return (randomize(MSARowAttentionWithPairBias(64, 128, 8, head_dim=8, qkv_bias=False, pair_layer_norm=True,
                                                      mask_mode="add"), 4), (m, z, msa_mask), 2)
    mod = {"opm": lambda: OuterProductMean(64, 128, 32, normalization="count_ij_after", projection_bias=False),
           "col": lambda: MSAColumnAttention(64, 8, 8),
           "gcol": lambda: MSAColumnGlobalAttention(64, 8, 8, eps=1e-8),
           "trans": lambda: Transition(64, 256)}[name]()
    return randomize(mod, 4), (m, msa_mask), 1


def _finite_step(mod, inputs, differentiable, device, dtype, impl="triton"):
    """A forward and a backward in `dtype` on `device` (`impl`: the fused path by default); the output and every
    gradient must be finite."""
    mod = mod.to(device, dtype)
    leaves = [t.to(device, dtype).requires_grad_() if k < differentiable else t.to(device)
              for k, t in enumerate(inputs)]
    out = mod(*leaves, impl=impl)
    out.backward(torch.randn_like(out))
    grads = {**{f"input{k}": leaves[k].grad for k in range(differentiable)},
             **{n: p.grad for n, p in mod.named_parameters()}}
    assert torch.isfinite(out).all(), "output"
    bad = [n for n, g in grads.items() if g is None or not torch.isfinite(g).all()]
    assert not bad, f"no finite gradient: {bad}"


PAIR_OPS = ["tri-start", "tri-end", "trimul-out", "trimul-in", "trans", "apb"]
MSA_OPS = ["opm", "att", "pwa", "col", "gcol", "trans"]


@pytest.mark.parametrize("name", PAIR_OPS)
def test_pair_steps_run_small(name):
    """The GPU's long pair cases at N 9."""
    _finite_step(*_pair_case(name, 9), DEVICE, torch.float32, "torch")


@pytest.mark.parametrize("name", MSA_OPS)
def test_msa_steps_run_small(name):
    """The GPU's long MSA cases at S 5 x N 7."""
    _finite_step(*_msa_case(name, 5, 7), DEVICE, torch.float32, "torch")


@pytest.mark.gpu
@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
@pytest.mark.parametrize("name", PAIR_OPS)
def test_pair_operations_at_n_4096(name):
    _finite_step(*_pair_case(name, 4096), "cuda", torch.bfloat16)
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.full
@pytest.mark.big
@pytest.mark.no_poison
@pytest.mark.parametrize("name", MSA_OPS)
def test_msa_operations_at_s_8192_n_2048(name):
    _finite_step(*_msa_case(name, 8192, 2048), "cuda", torch.bfloat16)
    torch.cuda.empty_cache()
