"""Test set-up. Without CUDA the Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1, set before
any kernel is built). Every tensor allocated with torch.empty starts as NaN, so that an output element a
kernel fails to write shows as NaN instead of passing as whatever memory held."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # each kernel's first fitting config (tests/test_gpu.py runs every config, and the suite autotuned)
    os.environ.setdefault("EVOFUSE_AUTOTUNE", "0")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FULL = os.environ.get("EVOFUSE_FULL_TESTS", "0") not in ("", "0")
# Tests whose spawned gloo workers run the kernels in Triton's interpreter: CPU machines only, as gloo cannot pass
# CUDA tensors between them, and the GPU machine's Triton interpreter fails on loop bounds taken from arguments.
SPAWNED_INTERPRETER = pytest.mark.skipif(DEVICE != "cpu", reason="gloo workers in Triton's interpreter: CPU only")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_full = pytest.mark.skip(reason="full tier: set EVOFUSE_FULL_TESTS=1")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "full" in item.keywords and not FULL:
            item.add_marker(skip_full)


@pytest.fixture
def fused_kernels(monkeypatch):
    """The patched modules take the fused kernels (on CPU tensors, in Triton's interpreter) at the tests' small shapes
    too (the crossovers of `integrations._crossover` and the transitions' `HIDDEN_SHARE`: otherwise their original
    modules run)."""
    from evofuse.integrations import _crossover
    from evofuse.integrations._adapters import FusedTransition

    monkeypatch.setenv("EVOFUSE_IMPL", "triton")
    monkeypatch.setattr(_crossover, "CROSSOVERS", dict.fromkeys(_crossover.CROSSOVERS, (0, 0)))
    monkeypatch.setattr(FusedTransition, "HIDDEN_SHARE", 0)


_EMPTY = torch.empty
_EMPTY_LIKE = torch.empty_like


def _poisoned(t):
    if t.is_floating_point():
        with torch.no_grad():  # also a leaf made with requires_grad=True (Protenix's CUDA path makes one)
            t.fill_(float("nan"))
    return t


@pytest.fixture(autouse=True)
def poison_empty(monkeypatch, request):
    """torch.empty and torch.empty_like return NaN-filled floating tensors (what "empty" allows)."""
    if "no_poison" in request.keywords:
        yield
        return
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poisoned(_EMPTY(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poisoned(_EMPTY_LIKE(*a, **k)))
    yield


@pytest.fixture(autouse=True)
def no_env_impl(monkeypatch):
    monkeypatch.delenv("EVOFUSE_IMPL", raising=False)


@pytest.fixture(autouse=True)
def seeded_rng():
    """Every test draws the same random inputs whether it runs alone or in the whole suite."""
    torch.manual_seed(0)
