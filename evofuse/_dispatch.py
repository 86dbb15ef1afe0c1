"""Choosing the path for a call: the Triton kernels or the PyTorch reference."""

from __future__ import annotations

import importlib.util
import os
import warnings

import torch

from ._runtime import interpreting

IMPLS = ("auto", "triton", "torch")
_warned: set[str] = set()


# looked up once at import (finding the package imports nothing): torch.compile cannot trace find_spec
_TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    return _TRITON_AVAILABLE


def resolve_impl(impl: str | None, *tensors: torch.Tensor) -> str:
    """Returns "triton" or "torch" for a call on `tensors`.

    `impl` (per call or per module) wins over the EVOFUSE_IMPL environment variable; both default to
    "auto": Triton for CUDA tensors when Triton is installed, else the reference. "triton" on CPU
    tensors is allowed only under TRITON_INTERPRET=1 (Triton's interpreter, as CI runs it).
    """
    choice = impl if impl is not None else os.environ.get("EVOFUSE_IMPL", "auto")
    if choice not in IMPLS:
        raise ValueError(f"impl / EVOFUSE_IMPL must be one of {IMPLS}, got {choice!r}")
    if choice == "torch":
        return "torch"
    on_cuda = all(t.is_cuda for t in tensors)
    if choice == "auto":
        return "triton" if on_cuda and triton_available() else "torch"
    if not triton_available():
        raise RuntimeError("impl='triton' was asked for but triton is not installed")
    if not on_cuda and not interpreting():
        raise RuntimeError("impl='triton' on CPU tensors needs TRITON_INTERPRET=1 (Triton's interpreter)")
    return "triton"


def warn_once(key: str, message: str) -> None:
    """One warning per distinct fallback reason per process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
