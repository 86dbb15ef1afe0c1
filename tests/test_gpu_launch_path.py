"""The launch path a GPU takes with EVOFUSE_AUTOTUNE=0 (each kernel's first pruned config, real tile
sizes), exercised in Triton's interpreter by making the launchers believe they are not interpreting.
CI has no GPU: this is where the config and pruning plumbing is checked before a device run."""

import copy

import pytest
import torch

import evofuse.ops._common as common
import evofuse.ops.layer_norm_linear as lnl
import evofuse.ops.outer_product_mean as opm
import evofuse.ops.row_attention as ra

from .conftest import DEVICE
from .helpers import assert_contract, att_module, compare, grads, opm_module, random_mask

pytestmark = pytest.mark.skipif(DEVICE == "cuda", reason="the GPU runs this path for real in test_gpu.py")


@pytest.fixture(autouse=True)
def gpu_launch_path(monkeypatch):
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "0")
    monkeypatch.setattr(common, "interpreting", lambda: False)
    monkeypatch.setattr(lnl, "interpreting", lambda: False)
    monkeypatch.setattr(opm, "SMALL_MAX_N", 0)  # these small shapes would take the single-launch kernels
    monkeypatch.setattr(ra, "SMALL_MAX_N", 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("normalization", ["seed", "af2"])
def test_opm_default_config(dtype, normalization):
    mod = opm_module(16, 9, 32, seed=1, normalization=normalization)
    x = torch.randn(1, 3, 6, 16)
    mask = random_mask(1, 3, 6, "rows", 1)
    out = copy.deepcopy(mod).to(dtype)(x.to(dtype), mask, impl="triton")
    exact = copy.deepcopy(mod).double()(x.double(), mask, impl="torch")
    lowp = copy.deepcopy(mod).to(dtype)(x.to(dtype), mask, impl="torch")
    assert_contract(out, exact, dtype, lowp_ref=None if dtype == torch.float32 else lowp)


def test_attention_default_configs_forward_and_backward():
    mod = att_module(32, 4, 2, seed=2)
    inputs = (torch.randn(1, 2, 5, 32), torch.randn(1, 5, 5, 4), random_mask(1, 2, 5, "rows", 2))
    out, got = grads(mod, inputs, "triton")
    exact_out, exact = grads(copy.deepcopy(mod).double(), (inputs[0].double(), inputs[1].double(), inputs[2]), "torch")
    assert_contract(out, exact_out, torch.float32)
    compare(got, exact, torch.float32)


@pytest.mark.parametrize("c", [8, 32])
def test_opm_backward_kernels_default_configs(c):
    """float16 gradients through the backward's outer-product and dX kernels at their default tiles."""
    mod = opm_module(16, 9, c, seed=3, normalization="af2").half()
    inputs = (torch.randn(1, 3, 6, 16).half(), random_mask(1, 3, 6, "rows", 1))
    _, got = grads(copy.deepcopy(mod), inputs, "triton")
    _, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    _, exact = grads(copy.deepcopy(mod).double(), (inputs[0].double(), inputs[1]), "torch")
    compare(got, exact, torch.float16, lowp)
