"""The shared LayerNorm + gated linear kernel (`stages/layer_norm_glu.py`) against PyTorch in float64: h for each
activation, and with grad a's and b's gradients for h's, in rows and in channel planes, at the default tile and a
whole-row one; and its 16-bit forward through tensor descriptors (`stages/layer_norm_glu_tma.py`): which calls it
takes, and each of its tiles beside the pointer kernel."""

import pytest
import torch
import torch.nn.functional as F

from evofuse.numerics import rel_error
from evofuse.stages import layer_norm_glu, layer_norm_glu_tma

from .conftest import DEVICE
from .helpers import rebuild_kernels

ACTIVATIONS = {"swiglu": lambda a, b: F.silu(a) * b, "sigmoid": lambda a, b: a * torch.sigmoid(b),
               "relu": lambda a, b: F.relu(a)}


def _case(activation, bias, seed, M=37, D=24, H=20):
    g = torch.Generator().manual_seed(seed)
    K = H if activation == "relu" else 2 * H
    x = 2 + torch.randn(M, D, generator=g)
    lnw, lnb = 1 + 0.3 * torch.randn(D, generator=g), 0.3 * torch.randn(D, generator=g)
    w = torch.randn(K, D, generator=g) / D ** 0.5
    b = torch.randn(K, generator=g) if bias else None
    mask = (torch.rand(M, generator=g) > 0.2).float()
    dh = torch.randn(M, H, generator=g)
    return x, lnw, lnb, w, b, mask, dh


def _exact(activation, x, lnw, lnb, w, b, mask, dh):
    """h and [a, b]'s gradient for h's gradient dh, in float64 by autograd."""
    pre = F.linear(F.layer_norm(x, x.shape[-1:], lnw, lnb, 1e-5), w, b).detach().requires_grad_()
    H = dh.shape[1]
    a, b_half = (pre, None) if activation == "relu" else (pre[:, :H], pre[:, H:])
    h = ACTIVATIONS[activation](a, b_half) * mask[:, None]
    h.backward(dh)
    return h.detach(), pre.grad


@pytest.fixture(params=["default", "whole-row"])
def tile(request, monkeypatch):
    """The kernel at its default tile, or at a whole-row tile (its rows normalized once, then two blocks of 16
    outputs a program)."""
    if request.param == "whole-row":
        import triton

        config = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 32, "ROW_STEPS": 2}, num_warps=1, num_stages=1)
        if DEVICE != "cpu":
            config = next(c for c in layer_norm_glu.FLOAT32_ROW_CONFIGS if c.kwargs["BLOCK_D"] == 64)
        monkeypatch.setattr(layer_norm_glu, "_prune", lambda configs, named_args, **kwargs: [config])
    rebuild_kernels()
    yield request.param
    rebuild_kernels()


@pytest.mark.parametrize("activation, bias", [("swiglu", False), ("sigmoid", True), ("relu", True)])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_forward_and_grad(activation, bias, planes, tile):
    """h (with the pre-activations) and, with grad, [a, b]'s gradient, float32, rows or channel planes (the
    transition's and triangle multiplication's layouts): both within the float32 contract of float64."""
    x, lnw, lnb, w, b, mask, dh = _case(activation, bias, seed=3)
    h_exact, d_exact = _exact(activation, *(t if t is None else t.double() for t in (x, lnw, lnb, w, b, mask, dh)))
    M, H, K = x.shape[0], dh.shape[1], w.shape[0]
    on = [t if t is None else t.to(DEVICE) for t in (x, lnw, lnb, w, b, mask)]

    def out(width):  # (M, width): rows, or planes (width, M) transposed
        return torch.empty(width, M, device=DEVICE).t() if planes else torch.empty(M, width, device=DEVICE)

    h, pre = out(H), out(K)
    layer_norm_glu.layer_norm_glu(*on, h, activation, "default", pre)
    assert rel_error(h.cpu(), h_exact) <= 1e-5
    grad_h = out(H)
    grad_h.copy_(dh)
    d_pre = out(K)
    assert layer_norm_glu.layer_norm_glu(*on, grad_h, activation, "default", d_pre, grad=True) is d_pre
    assert rel_error(d_pre.cpu(), d_exact) <= 1e-5
    torch.testing.assert_close(grad_h.cpu(), dh)  # (read, not written)


def test_every_shape_is_offered_tiles_that_cover_it(monkeypatch):
    """The tiles a GPU's autotuner is offered (`candidates` outside the interpreter), for this kernel and for triangle
    multiplication's output kernel, at narrow and wide rows and outputs: never none, and a whole-row tile only where
    its BLOCK_D holds the row (a narrower one would leave channels out)."""
    import evofuse._runtime as runtime

    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    for M in (1, 49, 100_000):
        for D in (8, 16, 100, 128, 384):
            for H in (4, 16, 20, 256):
                for element_size in (2, 4):
                    for operands in (1, 2):
                        kept = layer_norm_glu.candidates(M, D, H, operands, element_size, whole_rows=True)
                        assert kept, (M, D, H, operands, element_size)
                        for config in kept:
                            steps, block_d = config.kwargs.get("ROW_STEPS", 1), config.kwargs["BLOCK_D"]
                            assert steps == 1 or block_d >= D, (M, D, H, operands, element_size, config)


@pytest.mark.parametrize("D, H", [(16, 128), (24, 20), (200, 16), (128, 64)])
def test_every_offered_tile_computes_the_rows(D, H, monkeypatch):
    """Each tile a GPU's autotuner is offered at narrow and wide rows and outputs, forced in turn (here in the
    interpreter): h and, with grad, [a, b]'s gradient within the float32 contract of float64."""
    import evofuse._runtime as runtime

    x, lnw, lnb, w, b, mask, dh = _case("swiglu", True, seed=5, M=37, D=D, H=H)
    h_exact, d_exact = _exact("swiglu", *(t.double() for t in (x, lnw, lnb, w, b, mask, dh)))
    on = [t.to(DEVICE) for t in (x, lnw, lnb, w, b, mask)]
    with monkeypatch.context() as gpu:
        gpu.setattr(runtime, "interpreting", lambda: False)
        offered = layer_norm_glu.candidates(37, D, H, 2, 4, whole_rows=True)
    for config in offered:
        monkeypatch.setattr(layer_norm_glu, "_prune", lambda *args, config=config, **kwargs: [config])
        rebuild_kernels()
        h, pre = torch.empty(37, H, device=DEVICE), torch.empty(37, 2 * H, device=DEVICE)
        layer_norm_glu.layer_norm_glu(*on, h, "swiglu", "default", pre)
        assert rel_error(h.cpu(), h_exact) <= 1e-5, config
        d_pre = torch.empty(37, 2 * H, device=DEVICE)
        layer_norm_glu.layer_norm_glu(*on, dh.to(DEVICE).clone(), "swiglu", "default", d_pre, grad=True)
        assert rel_error(d_pre.cpu(), d_exact) <= 1e-5, config
    rebuild_kernels()


def _half_case(activation, bias, dtype, M=72, D=32, H=40, seed=7):
    """A 16-bit call on DEVICE, and h in float64 from its rounded inputs."""
    x, lnw, lnb, w, b, mask, _ = _case(activation, bias, seed, M=M, D=D, H=H)
    on = [t if t is None else t.to(DEVICE, dtype) for t in (x, lnw, lnb, w, b, mask)]
    h_exact, _ = _exact(activation, *(t if t is None else t.double().cpu() for t in on), torch.zeros(M, H).double())
    return on, h_exact


def _h(M, H, dtype, planes):
    return (torch.empty(H, M, device=DEVICE, dtype=dtype).t() if planes
            else torch.empty(M, H, device=DEVICE, dtype=dtype))


@pytest.fixture
def any_rows(monkeypatch):
    """The descriptor pass taken at the tests' few rows."""
    monkeypatch.setattr(layer_norm_glu_tma, "MIN_ROWS", 1)


DTYPES_16 = [torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])  # (the interpreter's bf16 dot)


@pytest.mark.parametrize("dtype", DTYPES_16, ids=str)
@pytest.mark.parametrize("activation, bias", [("swiglu", False), ("sigmoid", True), ("relu", True)])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_descriptor_pass_computes_what_the_pointer_kernel_does(activation, bias, planes, dtype, any_rows):
    """The forward through tensor descriptors (taken for 16-bit aligned calls) at rows and channels that no tile
    divides (72 rows, 40 channels: the descriptors clip the last tiles), against the pointer kernel (taken where the
    pre-activations are asked for) and float64: as close to float64 as the pointer kernel is."""
    M, H = 72, 40
    on, h_exact = _half_case(activation, bias, dtype, M=M, H=H)
    h = _h(M, H, dtype, planes)
    assert layer_norm_glu_tma.takes(on[0], on[3], h, activation)
    assert layer_norm_glu.layer_norm_glu(*on, h, activation, "default") is h
    h_pointer = _h(M, H, dtype, planes)
    pre = torch.empty(M, on[3].shape[0], device=DEVICE, dtype=dtype)
    layer_norm_glu.layer_norm_glu(*on, h_pointer, activation, "default", pre)
    torch.testing.assert_close(h, h_pointer, rtol=1e-2, atol=1e-3)
    assert rel_error(h.cpu(), h_exact) <= 1.25 * rel_error(h_pointer.cpu(), h_exact) + 1e-4


def test_descriptor_pass_takes_only_the_calls_it_can_address(monkeypatch):
    """16-bit rows of a power-of-two width from 16 to 256, addressable by descriptors (unit stride last, 16-byte
    aligned strides and bases), rows or channel planes; every other call goes to the pointer kernel."""
    takes = layer_norm_glu_tma.takes
    x = torch.randn(64, 32, device=DEVICE).half()
    assert not takes(x, x, _h(64, 32, torch.float16, False), "swiglu")  # (fewer than MIN_ROWS rows)
    monkeypatch.setattr(layer_norm_glu_tma, "MIN_ROWS", 1)

    def call(M=64, D=32, H=16, dtype=torch.float16, planes=False):
        x = torch.randn(M, D, device=DEVICE).to(dtype)
        return x, torch.randn(2 * H, D, device=DEVICE).to(dtype), _h(M, H, dtype, planes)

    assert takes(*call(), "swiglu") and takes(*call(planes=True), "sigmoid") and takes(*call(D=256), "relu")
    assert not takes(*call(dtype=torch.float32), "swiglu")
    assert not any(takes(*call(D=D), "swiglu") for D in (8, 24, 512))
    x, w, h = call(D=64)
    assert takes(x[:, :32], w[:, :32], h, "swiglu")  # (rows 128 bytes apart: aligned)
    assert not takes(x[:, ::2], w[:, ::2], h, "swiglu")  # (channels strided)
    assert not takes(x.reshape(-1)[1:1 + 64 * 32].view(64, 32), w[:, :32], h, "swiglu")  # (base 2 bytes off)
    assert not takes(*call(M=17, planes=True), "sigmoid")  # (planes 34 bytes apart)
    assert not takes(*call(H=20), "swiglu")  # (h's rows 40 bytes apart)


def test_every_descriptor_tile_computes_the_rows(monkeypatch, any_rows):
    """Each tile of the descriptor pass's table, forced in turn (in the interpreter too), rows and channel planes at
    a row count and width no tile divides: as close to float64 as the pointer kernel."""
    M, D, H = 200, 64, 80
    for activation, planes in (("swiglu", False), ("sigmoid", True)):
        on, h_exact = _half_case(activation, True, torch.float16, M=M, D=D, H=H)
        h_pointer = _h(M, H, torch.float16, planes)
        layer_norm_glu.layer_norm_glu(*on, h_pointer, activation, "default",
                                      torch.empty(M, 2 * H, device=DEVICE, dtype=torch.float16))
        for config in layer_norm_glu_tma.CONFIGS:
            monkeypatch.setattr(layer_norm_glu_tma, "_prune", lambda *args, config=config, **kwargs: [config])
            rebuild_kernels()
            h = _h(M, H, torch.float16, planes)
            layer_norm_glu.layer_norm_glu(*on, h, activation, "default")
            assert rel_error(h.cpu(), h_exact) <= 1.25 * rel_error(h_pointer.cpu(), h_exact) + 1e-4, config
    rebuild_kernels()


def test_descriptor_pass_keeps_a_non_finite_row_to_itself(any_rows):
    """A row holding NaN or Inf gives a non-finite h row, and every other row of its tile stays what the pointer
    kernel gives (rows and channel planes)."""
    on, _ = _half_case("swiglu", True, torch.float16)
    (M, H), x = (72, 40), on[0].clone()
    x[3, 5], x[9, 0] = float("nan"), float("inf")
    for planes in (False, True):
        h, h_pointer = _h(M, H, torch.float16, planes), _h(M, H, torch.float16, planes)
        layer_norm_glu.layer_norm_glu(x, *on[1:], h, "swiglu", "default")
        layer_norm_glu.layer_norm_glu(x, *on[1:], h_pointer, "swiglu", "default",
                                      torch.empty(M, 2 * H, device=DEVICE, dtype=torch.float16))
        bad = torch.zeros(M, dtype=torch.bool, device=DEVICE)
        bad[[3, 9]] = True
        assert not torch.isfinite(h[bad]).any(dim=1).any()
        torch.testing.assert_close(h[~bad], h_pointer[~bad], rtol=1e-2, atol=1e-3)
