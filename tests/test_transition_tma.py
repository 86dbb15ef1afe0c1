"""The transition's backward through tensor descriptors (`ops/transition/backward_tma.py`, taken for many 16-bit rows
on a device with TMA; here at any rows): every gradient against float64 beside PyTorch's own 16-bit path, each tile
of its table, the calls it takes, a base it cannot address, non-finite values, and its op under opcheck."""

import pytest
import torch

from evofuse import Transition
from evofuse.ops.transition import backward_tma

from .conftest import DEVICE
from .contract import check_gradients, check_nonfinite
from .helpers import randomize, rebuild_kernels

DTYPES_16 = [torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])  # (the interpreter's bf16 dot)


@pytest.fixture
def any_rows(monkeypatch):
    """The pass taken at the tests' few rows, and a record of its calls."""
    monkeypatch.setattr(backward_tma, "MIN_ROWS", 1)
    calls = []
    real = backward_tma.transition_backward_rows

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(backward_tma, "transition_backward_rows", counted)
    return calls


def _module(dim=32, hidden=64, activation="swiglu", bias=False, seed=0):
    mod = randomize(Transition(dim, hidden, activation=activation, bias=bias), seed)
    with torch.no_grad():  # (a LayerNorm weight about 1, as trained ones are)
        mod.norm.weight.add_(1)
    return mod


def _inputs(lead, dim, seed):
    g = torch.Generator().manual_seed(seed)
    x, mask = torch.randn(*lead, dim, generator=g), (torch.rand(lead, generator=g) > 0.2).float()
    mask.view(-1, lead[-1])[0] = 0  # (a fully masked row of rows)
    return x, mask


@pytest.mark.parametrize("dtype", DTYPES_16, ids=str)
@pytest.mark.parametrize("activation, bias, lead", [("swiglu", False, (2, 37)), ("swiglu", True, (3, 17)),
                                                     ("relu", True, (1, 97)), ("swiglu", False, (1, 1))])
def test_every_gradient_within_the_contract(activation, bias, lead, dtype, any_rows):
    """The output and each gradient, together and alone (each branch of the backward), at row counts no tile divides
    (N 1, 17, 97 too) with a fully masked row of rows: within the 16-bit contract of float64 (twice PyTorch's own
    16-bit error); the backward went through the pass."""
    x, mask = _inputs(lead, 32, seed=1)
    check_gradients(_module(activation=activation, bias=bias, seed=2), (x, mask), dtype, DEVICE, 1, alone=True)
    assert any_rows and all(shape[1] == 32 for shape in any_rows)


def test_every_tile_computes_the_gradients(monkeypatch, any_rows):
    """Each tile of the table (on the GPU; the interpreter's own in Triton's interpreter), forced in turn: every
    gradient within the contract at rows and hidden channels past one tile (200 rows, 128 hidden)."""
    x, mask = _inputs((2, 100), 32, seed=3)
    tiles = backward_tma.CONFIGS if DEVICE == "cuda" else [backward_tma.INTERPRETER_CONFIG]
    for config in tiles:
        monkeypatch.setattr(backward_tma, "_prune", lambda *args, config=config, **kwargs: [config])
        rebuild_kernels()
        check_gradients(_module(hidden=128, bias=True, seed=4), (x, mask), DTYPES_16[-1], DEVICE, 1)
    rebuild_kernels()
    assert len(any_rows) == len(tiles)


def _call(M=64, D=32, C=32, H=64, dtype=torch.float16, glu=True):
    """(x, in_weight, grad, out_weight, glu) as the backward passes them to `takes`."""
    return (torch.randn(M, D, device=DEVICE, dtype=dtype), torch.randn((2 if glu else 1) * H, D, device=DEVICE,
            dtype=dtype), torch.randn(M, C, device=DEVICE, dtype=dtype),
            torch.randn(C, H, device=DEVICE, dtype=dtype), glu)


def test_takes_only_the_calls_it_can_address(monkeypatch):
    """16-bit rows, D and C powers of two from 16 to 128, a tile that divides H, every operand with unit stride last
    and 16-byte aligned rows; fewer than MIN_ROWS rows go to the pointer path."""
    takes = backward_tma.takes
    assert not takes(*_call())  # (fewer than MIN_ROWS rows)
    monkeypatch.setattr(backward_tma, "MIN_ROWS", 1)
    assert takes(*_call()) and takes(*_call(glu=False)) and takes(*_call(D=128, C=16, H=128))
    assert not takes(*_call(dtype=torch.float32))
    assert not any(takes(*_call(D=D)) for D in (8, 24, 256)) and not takes(*_call(C=48))
    assert not takes(*_call(H=40))  # (no tile divides H)
    x, w, g, wo, glu = _call()
    assert not takes(x, w, g[:1].expand(64, 32), wo, glu)  # (a broadcast gradient)
    assert not takes(x.t().contiguous().t(), w, g, wo, glu)  # (channels strided)


def test_a_base_it_cannot_address_takes_the_pointer_path(monkeypatch):
    """x a view 2 bytes into its storage (strides addressable, the base not): the same gradients, by the pointer
    kernel and the LayerNorm's pass, as an aligned copy through the descriptors."""
    monkeypatch.setattr(backward_tma, "MIN_ROWS", 1)
    mod = _module(bias=True, seed=5).to(DEVICE, torch.float16)
    x, _, grad, _, _ = _call(M=40)
    offset = torch.empty(40 * 32 + 1, device=DEVICE, dtype=torch.float16)[1:].view(40, 32)
    offset.copy_(x)
    assert backward_tma.takes(offset, mod.fc1.weight, grad, mod.fc3.weight, True)
    w_in = torch.cat([mod.fc1.weight, mod.fc2.weight]).detach()
    args = (mod.norm.weight.detach(), mod.norm.bias.detach(), w_in, torch.cat([mod.fc1.bias, mod.fc2.bias]).detach(),
            grad, None, mod.fc3.weight.detach(), True)
    for got, want in zip(backward_tma.transition_backward_rows(offset, *args),
                         backward_tma.transition_backward_rows(x, *args)):
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target, value", [("input0", float("nan")), ("input0", float("inf")),
                                           ("fc1.weight", float("nan")), ("fc3.weight", float("-inf")),
                                           ("norm.weight", float("nan"))])
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (the interpreter's NumPy on NaN and Inf)
def test_nonfinite_shows_as_in_the_reference(target, value, any_rows):
    """A non-finite value in x or a parameter: NaN and Inf exactly where PyTorch's 16-bit path has them, in the
    output and every gradient (rows past the last, which a tile reads as zeros, add nothing to the sums)."""
    x, mask = _inputs((1, 21), 32, seed=6)
    mod = _module(bias=True, seed=7).half()
    index = (0, 3, 2) if target == "input0" else (1,) * mod.get_parameter(target).dim()
    check_nonfinite(mod, (x.half(), mask), DEVICE, 1, target, index, value)
    assert any_rows


@pytest.mark.parametrize("masked, bias", [(True, False), (False, True)])
def test_opcheck(masked, bias):
    """`evofuse::transition_backward_rows` under torch.library's opcheck (schema, fake, AOT dispatch)."""
    x, w_in, grad, w_out, glu = _call(M=24)
    mask = (torch.rand(24, device=DEVICE) > 0.3).half() if masked else None
    b_in = torch.randn(w_in.shape[0], device=DEVICE).half() if bias else None
    ln = torch.randn(32, device=DEVICE).half()
    torch.library.opcheck(backward_tma.transition_backward_rows_op, (x, ln, ln, w_in, b_in, grad, mask, w_out, glu))


@pytest.mark.no_poison
def test_traced_backward_dispatches_the_pass(any_rows):
    """torch.compile (AOTAutograd, fake tensors: no base to check) takes the pass from strides and shapes alone,
    through `evofuse::transition_backward_rows`; its gradients are the eager call's."""
    mod = _module(bias=True, seed=8).to(DEVICE, torch.float16)
    x, mask = (t.to(DEVICE) for t in _inputs((2, 19), 32, seed=9))

    def step(fn):
        leaf = x.half().clone().requires_grad_()
        mod.zero_grad()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn(leaf, mask).float().square().sum().backward()
        return [leaf.grad] + [p.grad.clone() for p in mod.parameters()], {e.name for e in prof.events()}

    def fused(x, mask):
        return mod(x, mask, impl="triton")

    eager, _ = step(fused)
    traced, names = step(torch.compile(fused, backend="aot_eager", fullgraph=True))
    assert "evofuse::transition_backward_rows" in names, sorted(n for n in names if n.startswith("evofuse"))
    for got, want in zip(traced, eager):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_the_pass_at_the_pair_transitions_width_matches_the_pointer_path(monkeypatch):
    """The pair transition's widths (c 128, hidden 512, SwiGLU, no biases, masked) at 70000 bf16 rows, past MIN_ROWS,
    its first call autotuned (each tile's timing runs leave the LayerNorm's sums as they found them): every gradient
    of the pass within the 16-bit contract of float64, as close as the pointer path's."""
    from evofuse.numerics import rel_error

    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    rebuild_kernels()
    mod = _module(dim=128, hidden=512, seed=10).to("cuda")
    x, mask = (t.to("cuda") for t in _inputs((7, 10000), 128, seed=11))
    assert backward_tma.takes(x.view(-1, 128).bfloat16(), torch.empty(1024, 128, device="cuda").bfloat16(),
                              x.view(-1, 128).bfloat16(), torch.empty(128, 512, device="cuda").bfloat16(), True)

    def gradients(model, dtype):
        leaf = x.to(dtype).requires_grad_()
        model.zero_grad()
        model(leaf, mask, impl="triton" if dtype != torch.float64 else "torch").float().square().sum().backward()
        return [leaf.grad.double()] + [p.grad.double() for p in model.parameters()]

    exact = gradients(mod.double(), torch.float64)
    through_pass = gradients(mod.bfloat16(), torch.bfloat16)
    monkeypatch.setattr(backward_tma, "MIN_ROWS", 1 << 62)
    through_pointers = gradients(mod, torch.bfloat16)
    rebuild_kernels()
    for got, pointer, want in zip(through_pass, through_pointers, exact):
        assert rel_error(got, want) <= 2 * rel_error(pointer, want) + 1e-3
