"""The float32 paths' matrix products (`evofuse.stages.matmul`): three TF32 products against float64 at awkward shapes,
strided and transposed operands, a shared right operand, batches past one launch, alpha, empty sizes; 16-bit
operands and the "fast" precision through cuBLAS; the custom op's registration and its traced call."""

import pytest
import torch

from evofuse.stages import matmul as mm

from .conftest import DEVICE


def _check(out, a, b, alpha=1.0):
    exact = alpha * (a.double() @ b.double())
    assert out.shape == exact.shape and out.dtype == a.dtype
    assert out.is_contiguous()
    err = (out.double() - exact).abs().max() / exact.abs().max().clamp_min(1e-30)
    assert err <= 1e-5, err  # (float32's contract; three TF32 products keep ~1e-7)


@pytest.mark.parametrize("lead, M, K, N", [((), 17, 97, 33), ((3,), 1, 40, 70), ((2, 2), 33, 1, 17), ((), 1, 5, 1)])
def test_against_float64(lead, M, K, N):
    g = torch.Generator().manual_seed(M * K + N)
    a, b = torch.randn(*lead, M, K, generator=g).to(DEVICE), torch.randn(*lead, K, N, generator=g).to(DEVICE)
    _check(mm.matmul(a, b), a, b)
    _check(mm.matmul(a, b, alpha=0.25), a, b, 0.25)


def test_strided_transposed_and_shared_operands():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 40, 30, generator=g).to(DEVICE).transpose(1, 2)  # (4, 30, 40), M strided
    b_shared = torch.randn(40, 50, generator=g).to(DEVICE)[:, ::2]  # (40, 25), N stride 2
    b_t = torch.randn(4, 25, 40, generator=g).to(DEVICE).mT  # (4, 40, 25), K fastest
    _check(mm.matmul(a, b_shared), a, b_shared)
    _check(mm.matmul(a, b_t), a, b_t)


def test_batches_past_one_launch_and_into_a_buffer(monkeypatch):
    """More batch elements than one launch's grid takes (MAX_BATCH made 3: launches of 3, 3 and 1), written into a
    given buffer's strided view."""
    monkeypatch.setattr(mm, "MAX_BATCH", 3)
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(7, 9, 11, generator=g).to(DEVICE), torch.randn(7, 11, 5, generator=g).to(DEVICE)
    _check(mm.matmul(a, b), a, b)
    buffer = torch.full((7, 9, 8), float("nan"), device=DEVICE)
    out = mm.matmul_into(a, b, buffer[..., :5])
    torch.testing.assert_close(out, (a.double() @ b.double()).float(), rtol=1e-6, atol=1e-6)
    assert buffer[..., 5:].isnan().all()


def test_empty_sizes():
    a, b = torch.randn(2, 20, 0, device=DEVICE), torch.randn(2, 0, 3, device=DEVICE)
    assert torch.equal(mm.matmul(a, b), torch.zeros(2, 20, 3, device=DEVICE))
    assert mm.matmul(torch.randn(0, 4, device=DEVICE), torch.randn(4, 3, device=DEVICE)).shape == (0, 3)


@pytest.mark.parametrize("dtype, precision", [(torch.float16, "default"), (torch.float32, "fast")])
def test_cublas_where_not_float32_default(dtype, precision, monkeypatch):
    """16-bit operands and the "fast" precision take torch.matmul (the Triton kernel is not launched)."""
    monkeypatch.setattr(mm, "matmul_impl", lambda *args: pytest.fail("the Triton path was taken"))
    assert not mm.uses_tensor_cores(dtype, precision)
    a, b = torch.randn(5, 6, device=DEVICE).to(dtype), torch.randn(6, 7, device=DEVICE).to(dtype)
    torch.testing.assert_close(mm.matmul(a, b, precision, alpha=2.0), 2.0 * torch.matmul(a, b))
    torch.testing.assert_close(mm.linear(a, b.t(), None, precision), torch.nn.functional.linear(a, b.t()))


def test_linear_with_bias():
    g = torch.Generator().manual_seed(3)
    x, w, bias = (torch.randn(*s, generator=g).to(DEVICE) for s in ((2, 5, 6), (9, 6), (9,)))
    out = mm.linear(x, w, bias)
    exact = torch.nn.functional.linear(x.double(), w.double(), bias.double())
    assert out.shape == (2, 5, 9)
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-6)


@pytest.mark.no_poison
def test_opcheck_and_traced_call(monkeypatch):
    """`evofuse::matmul` passes opcheck; traced (torch.compile through AOTAutograd) `matmul` calls it."""
    a, b = torch.randn(3, 5, 6, device=DEVICE), torch.randn(3, 6, 4, device=DEVICE)
    torch.library.opcheck(mm.matmul_op, (a, b, 0.5))
    calls = []
    real = mm.matmul_op

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(mm, "matmul_op", counted)
    got = torch.compile(lambda x, y: mm.matmul(x, y), backend="aot_eager", fullgraph=True)(a, b)
    assert calls
    _check(got, a, b)
