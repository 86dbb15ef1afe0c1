"""Test set-up. Without CUDA the Triton kernels run in Triton's interpreter: TRITON_INTERPRET must be
set before any kernel is defined, which happens on first use (evofuse.ops is imported lazily)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # correctness tests launch each kernel's default config; the suite-shape tests turn autotuning on
    os.environ.setdefault("EVOFUSE_AUTOTUNE", "0")

import evofuse.ops._common as common  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def poison_outputs():
    """Every kernel output buffer starts as NaN, so unwritten elements fail the comparison. (The row
    attention kernel writes over its own queries instead: an element it skipped keeps a query value,
    which the comparison with the reference catches the same way.)"""
    common.POISON_OUTPUTS = True
    yield
    common.POISON_OUTPUTS = False


@pytest.fixture(autouse=True)
def no_env_impl(monkeypatch):
    monkeypatch.delenv("EVOFUSE_IMPL", raising=False)


@pytest.fixture(autouse=True)
def seeded_rng():
    """Every test draws the same random inputs whether it runs alone or in the whole suite."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def fresh_replays():
    """No test replays a call recorded by another (tests change the launchers' module settings, such as
    the single-launch limits, which replay keys do not hold)."""
    from evofuse.functional import clear_replays

    clear_replays()
