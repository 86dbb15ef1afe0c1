"""`ops.partial_sums.sum_partials`: fixed-order row sums of float32 partial-sum buffers, rounded once, several
buffers a launch (Triton's interpreter on CPU; the kernel's GPU runs are the backwards' tests in test_gpu)."""

import pytest
import torch

from evofuse.ops.partial_sums import MAX_BUFFERS, sum_partials

from .conftest import DEVICE

# (K, M): one row (a cast), short and long columns, sizes off every block
SHAPES = [(1, 37), (17, 5), (97, 131), (300, 16), (1, 1), (3, 1100)]


def _expected(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return p.double().sum(0).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sums_every_buffer_of_a_launch_and_beyond(dtype):
    """Six buffers (two launches), two with rows strided past their columns: each equals the float64 sum rounded
    to the dtype (float32: within its sum's rounding; 16-bit: the nearest value or its neighbour)."""
    parts = [torch.randn(k, m, device=DEVICE) for k, m in SHAPES]
    parts[2] = torch.randn(40, 70, device=DEVICE)[:33, 3:63]  # row stride 70, past the first element
    parts[3] = torch.randn(300, 24, device=DEVICE)[:, :16]  # row stride 24
    assert len(parts) > MAX_BUFFERS and not parts[2].is_contiguous() and not parts[3].is_contiguous()
    outs = sum_partials(parts, dtype)
    for p, out in zip(parts, outs):
        assert out.shape == (p.shape[1],) and out.dtype == dtype
        exact = p.double().sum(0)
        if dtype == torch.float32:
            torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-5 * p.shape[0] ** 0.5)
        else:
            ulp = torch.finfo(dtype).eps * exact.abs().clamp(min=1e-3)
            assert ((out.double() - exact).abs() <= ulp).all()


def test_fixed_order():
    """Two calls on the same buffers give the same bits; a K = 0 buffer sums to 0, an M = 0 one to nothing."""
    parts = [torch.randn(513, 40, device=DEVICE) * 1e3, torch.randn(2, 2048, device=DEVICE),
             torch.empty(0, 7, device=DEVICE), torch.empty(5, 0, device=DEVICE)]
    first = sum_partials(parts, torch.float32)
    second = sum_partials(parts, torch.float32)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert torch.equal(first[2], torch.zeros(7, device=DEVICE)) and first[3].shape == (0,)


def test_refuses_what_it_cannot_read():
    with pytest.raises(ValueError):
        sum_partials([torch.randn(4, 3, device=DEVICE).t()], torch.float32)  # column stride 4
    with pytest.raises(ValueError):
        sum_partials([torch.randn(4, 3, device=DEVICE, dtype=torch.float64)], torch.float32)
