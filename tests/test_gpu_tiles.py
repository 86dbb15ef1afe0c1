"""Every operation with tiles a GPU takes (each kernel's first fitting tile, its default where autotuning is off, and
its last, chosen by the predicates as on a GPU), run here in Triton's interpreter, whose own tiles are otherwise the
only ones the CPU tiers run: the forward and every gradient against float64. A tile the GPU takes that computes
something else fails here, before a GPU run."""

import copy
import warnings
from dataclasses import replace

import pytest
import torch

from evofuse.numerics import rel_error
from evofuse.operations import OPERATIONS

from .conftest import DEVICE
from .helpers import rebuild_kernels
from .test_gpu_training import MODEL_CASES, _model_inputs

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the GPU runs its own tiles (tests/test_gpu.py sweeps them)")


def _case(op):
    """The operation's first suite case cut to B 1 and N 20 (S 3; the pair stack's S = N), its widths kept: the
    tiles are chosen by them."""
    from evofuse.suite import make_inputs, make_module

    first = OPERATIONS[op].cases[0]
    case = replace(first, B=1, N=20, S=20 if first.S == first.N else 3)
    return make_module(case, seed=1, impl="triton"), make_inputs(case, DEVICE, torch.float32, seed=2)


def _offer(which: str, monkeypatch) -> None:
    """Every kernel takes the first or the last tile a GPU's autotuner is offered (the predicates as on a GPU): the
    first is the GPU's default where autotuning is off; the last, the smallest or the fallback where none fits."""
    import sys

    import evofuse._runtime as runtime

    real = runtime.tuning_candidates

    def offered(*args, **kwargs):
        kept = real(*args, **kwargs)
        return kept[:1] if which == "first" else kept[-1:]
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    for module in list(sys.modules.values()):  # (each module binds the name at its import)
        if module.__name__.startswith("evofuse") and getattr(module, "tuning_candidates", None) is real:
            monkeypatch.setattr(module, "tuning_candidates", offered)


NARROW = [name for name in MODEL_CASES if "protenix" in name or "template" in name]  # (the last tiles' widths)


@pytest.mark.parametrize("name, which", [(name, "first") for name in [*sorted(OPERATIONS), *MODEL_CASES]]
                         + [(name, "last") for name in [*sorted(OPERATIONS), *NARROW]])
def test_gpu_tiles_compute_the_operation(name, which, monkeypatch):
    """The first tiles at each operation's first suite case and at each model's widths (`test_gpu_training.
    MODEL_CASES`); the last (small tiles: many programs, slow in the interpreter) at the suite's cases and the
    narrow pair stacks'."""

    mod, inputs = _case(name) if name in OPERATIONS else _model_inputs(name, S=3, N=20)
    exact = copy.deepcopy(mod).double()
    *xs, mask = [t.to(DEVICE) for t in inputs]
    want_in = [x.double().requires_grad_() for x in xs]
    want = exact(*want_in, mask, impl="torch")
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want.backward(grad)
    _offer(which, monkeypatch)
    rebuild_kernels()
    try:
        got_in = [x.clone().requires_grad_() for x in xs]
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="evofuse: no fused")  # (the kernels, not the reference)
            got = mod(*got_in, mask, impl="triton")
        got.backward(grad.float())
    finally:
        monkeypatch.undo()
        rebuild_kernels()
    assert rel_error(got.double(), want) <= 1e-5, "output"
    for k, (a, b) in enumerate(zip(got_in, want_in)):
        assert rel_error(a.grad.double(), b.grad) <= 1e-5, f"input {k}'s gradient"
    expected = {name: q.grad for name, q in exact.named_parameters()}
    for name, p in mod.named_parameters():
        sibling = expected[name[:-4] + "weight" if name.endswith("bias") else name].norm()
        if expected[name].norm() > 1e-6 * sibling:  # (a softmax-invariant bias's gradient is 0 in exact arithmetic)
            assert rel_error(p.grad.double(), expected[name]) <= 1e-5, f"{name}'s gradient"
