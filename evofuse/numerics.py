"""The numerics contract, as code: the error measure and the bound for a path."""

from __future__ import annotations

import torch

FP32_DEFAULT_BOUND = 1e-5
FP32_FAST_BOUND = 5e-3
FP32_ALLCLOSE = {"atol": 1e-4, "rtol": 1e-4}


def rel_error(out: torch.Tensor, ref64: torch.Tensor) -> float:
    """||out - ref64|| / ||ref64|| in float64 over the finite entries; inf unless out's NaN are exactly ref64's and
    its infinities exactly ref64's (same places, same signs)."""
    ref64 = ref64.detach().to(torch.float64)
    out64 = out.detach().to(ref64.device, torch.float64)
    if out64.shape != ref64.shape:
        return float("inf")
    finite = torch.isfinite(ref64)
    if not torch.equal(out64.isnan(), ref64.isnan()) or not torch.equal(out64[~finite].nan_to_num(0.0),
                                                                          ref64[~finite].nan_to_num(0.0)):
        return float("inf")
    num = (out64[finite] - ref64[finite]).norm().item()
    den = ref64[finite].norm().item()
    return num / den if den > 0 else num


def bound(dtype: torch.dtype, precision: str = "default", lowp_ref_error: float | None = None) -> float:
    """The largest rel_error the contract allows for outputs of `dtype` at `precision`.

    16-bit: 2 x (the error of the PyTorch reference run in that dtype) + 1e-3.
    """
    if dtype in (torch.float32, torch.float64):
        return FP32_DEFAULT_BOUND if precision == "default" else FP32_FAST_BOUND
    if lowp_ref_error is None:
        raise ValueError("16-bit bounds need the error of the reference run in that dtype")
    return 2 * lowp_ref_error + 1e-3
