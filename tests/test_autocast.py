"""The public modules and functional forms under `torch.autocast`, as torch's own layers: a float32 input computes
in autocast's dtype and returns it, the same values and gradients as the input cast by hand; float64 stays float64,
and an input already in autocast's dtype is not touched. Every operation, from the suite's seed cases."""

import pytest
import torch

from evofuse import Transition, TriangleMultiplication
from evofuse.suite import find_case, make_inputs, make_module, seed_cases

from .conftest import DEVICE
from .helpers import randomize

AUTOCAST_DTYPE = torch.float16  # (bfloat16 products are unreliable in Triton's interpreter)


def _step(mod, inputs, impl):
    """(output, every floating input's gradient, every parameter's gradient) of one training step."""
    mod.zero_grad()
    leaves = [t.detach().requires_grad_() if t.is_floating_point() and k < len(inputs) - 1 else t
              for k, t in enumerate(inputs)]
    out = mod(*leaves, impl=impl)
    out.float().square().sum().backward()
    return [out, *(t.grad for t in leaves if t.requires_grad), *(p.grad for p in mod.parameters())]


def _check_follows_autocast(mod, inputs, impl):
    """Under autocast a float32 call equals the call on inputs cast to autocast's dtype by hand, bit for bit: output
    (in autocast's dtype), the inputs' gradients (float32, as autograd casts them back) and the parameters'."""
    by_hand = _step(mod, [t.to(AUTOCAST_DTYPE) if k < len(inputs) - 1 else t for k, t in enumerate(inputs)], impl)
    with torch.autocast(torch.device(DEVICE).type, dtype=AUTOCAST_DTYPE):
        under = _step(mod, inputs, impl)
    assert under[0].dtype == AUTOCAST_DTYPE
    for k, (got, want) in enumerate(zip(under, by_hand, strict=True)):
        if k and k < len(inputs):  # (an input's gradient: in the input's float32)
            assert got.dtype == torch.float32
            got = got.to(AUTOCAST_DTYPE)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"tensor {k}: {m}")


@pytest.mark.parametrize("case", seed_cases(), ids=lambda c: c.op)
def test_modules_follow_autocast(case):
    """Every operation's module at its seed case, on the path of the device (the reference on the CPU)."""
    inputs = make_inputs(case, DEVICE, torch.float32, seed=2, fully_masked=False)  # (masks are not what is tested)
    _check_follows_autocast(make_module(case, seed=1).to(DEVICE), inputs, "torch" if DEVICE == "cpu" else "triton")


@pytest.mark.parametrize("op", ["trimul", "trans"])
def test_kernels_follow_autocast(op):
    """The kernels' path (Triton's interpreter on the CPU) at a small size: the cast is the front door's, before
    the op, so one operation of each front (pair, rows) stands for all."""
    g = torch.Generator().manual_seed(3)
    if op == "trimul":
        mod = randomize(TriangleMultiplication(8, 6, bias=True), 1).to(DEVICE)
        inputs = [torch.randn(1, 9, 9, 8, generator=g), (torch.rand(1, 9, 9, generator=g) > 0.2).float()]
    else:
        mod = randomize(Transition(8, 16, bias=True), 1).to(DEVICE)
        inputs = [torch.randn(2, 5, 8, generator=g), (torch.rand(2, 5, generator=g) > 0.2).float()]
    _check_follows_autocast(mod, [t.to(DEVICE) for t in inputs], "triton")


@pytest.mark.parametrize("dtype", [torch.float64, AUTOCAST_DTYPE])
def test_autocast_leaves_float64_and_its_own_dtype(dtype):
    """A float64 input computes in float64 under autocast (autocast leaves float64 alone); one already in autocast's
    dtype is passed as it is."""
    case = find_case("trimul-seed")
    mod = make_module(case, seed=1).to(DEVICE, dtype)
    pair, mask = make_inputs(case, DEVICE, dtype, seed=2)
    want = mod(pair, mask, impl="torch")
    with torch.autocast(torch.device(DEVICE).type, dtype=AUTOCAST_DTYPE):
        got = mod(pair, mask, impl="torch")
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.no_poison
def test_autocast_under_torch_compile():
    """torch.compile(fullgraph=True) traces the autocast front door (no graph break) and computes what the eager call
    does."""
    mod = randomize(Transition(8, 16, bias=True, impl="triton"), 1).to(DEVICE)
    x = torch.randn(2, 5, 8, device=DEVICE)
    compiled = torch.compile(mod, backend="aot_eager", fullgraph=True)
    with torch.autocast(torch.device(DEVICE).type, dtype=AUTOCAST_DTYPE):
        want, got = mod(x), compiled(x)
    assert got.dtype == AUTOCAST_DTYPE
    torch.testing.assert_close(got, want, rtol=0, atol=0)
