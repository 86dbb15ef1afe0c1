"""`evofuse.integrations._replay`: a module's repeated inference calls replayed from a CUDA graph. On the CPU: the
arguments' layout and a call's tensors swapped back in, and CPU calls running as they are. On a GPU: replays equal
to eager calls while the moving input changes, a conditioning tensor changed in place read anew, one moved to other
memory run eagerly and captured again, training and gradient calls never captured, and a forward that cannot be
captured left eager with a warning."""

import gc
import warnings
import weakref

import pytest
import torch

import evofuse
from evofuse.integrations._replay import Replayed, _held, _same, layout, rebuilt

from .conftest import DEVICE


def test_layout_names_shapes_strides_dtypes_and_values():
    x = torch.zeros(2, 3)
    tensors = []
    got = layout(((x, 4), {"c": x.t(), "n": None}), tensors)
    assert tensors[0] is x and tensors[1].shape == (3, 2) and len(tensors) == 2
    assert got != layout(((x, 5), {"c": x.t(), "n": None}), [])  # another value
    assert got != layout(((x, 4), {"c": x.t().contiguous(), "n": None}), [])  # other strides
    assert got != layout(((x.double(), 4), {"c": x.t(), "n": None}), [])  # another dtype
    assert got == layout(((torch.ones(2, 3), 4), {"c": torch.ones(2, 3).t(), "n": None}), [])  # values do not count
    unhashable = {1}
    assert layout({"u": {1: unhashable}}, []) == layout({"u": {1: unhashable}}, [])
    assert layout({"u": {1: unhashable}}, []) != layout({"u": {1: {1}}}, [])  # (another object)


def test_rebuilt_puts_the_tensors_back_in_place():
    x, y = torch.zeros(1), torch.ones(1)
    value = ((x, 2), {"a": [x, "s"], "b": y})
    tensors = []
    layout(value, tensors)
    swapped = [t + 10 for t in tensors]
    got = rebuilt(value, iter(swapped))
    assert got[0][0] is swapped[0] and got[0][1] == 2 and got[1]["a"][0] is swapped[1] and got[1]["a"][1] == "s"
    assert got[1]["b"] is swapped[2] and isinstance(got[1]["a"], list) and isinstance(got[0], tuple)


def test_a_held_tensor_is_itself_while_it_lives():
    t = torch.zeros(3)
    held = _held(t)
    assert _same(held, t) and not _same(held, torch.zeros(3)) and not _same(held, t[1:])
    del t
    gc.collect()
    assert held[0]() is None


class Conditioned(torch.nn.Module):
    """A diffusion network's shape of call: a moving input x and a dict of conditioning tensors, an evofuse
    transition inside."""

    def __init__(self, c=32):
        super().__init__()
        self.transition = evofuse.Transition(c, 2 * c)
        self.proj = torch.nn.Linear(c, c)

    def forward(self, x, times, cond, scale=1):
        h = self.proj(x) * times[:, None, None] + cond["s"]
        return scale * (h + self.transition(h)) * cond["mask"][..., None]


def _inputs(seed, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 24, 32, generator=g).to(device), torch.rand(2, generator=g).to(device)


def test_cpu_calls_run_as_they_are():
    module = Conditioned().eval()
    replayed = Replayed(module.forward, module)
    cond = {"s": torch.randn(2, 24, 32), "mask": torch.ones(2, 24)}
    with torch.no_grad():
        for seed in range(3):
            x, t = _inputs(seed, "cpu")
            assert torch.equal(replayed(x, t, cond), module(x, t, cond))
    assert not replayed.graphs and not replayed.broken


@pytest.mark.gpu
@pytest.mark.parametrize("autocast", [False, True])
def test_replays_equal_eager_calls(autocast):
    """Under bf16 autocast too (the weights' casts made inside the graph, as the models' float32 weights are)."""
    torch.manual_seed(0)
    module = Conditioned().cuda().eval()
    replayed = Replayed(module.forward, module)
    cond = {"s": torch.randn(2, 24, 32, device="cuda"), "mask": (torch.rand(2, 24, device="cuda") > 0.2).float()}
    tol = dict(rtol=2e-2, atol=1e-2) if autocast else dict(rtol=1e-5, atol=1e-6)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for seed in range(5):
            x, t = _inputs(seed)
            want = module(x, t, cond, scale=2)
            got = replayed(x, t, cond, scale=2)
            assert torch.allclose(got, want, **tol), seed
            assert len(replayed.graphs) == (seed >= 1)
        (graph,) = replayed.graphs.values()
        cond["s"].mul_(-1)  # (changed in place: the graph reads it anew)
        x, t = _inputs(9)
        assert torch.allclose(replayed(x, t, cond, scale=2), module(x, t, cond, scale=2), **tol)
        assert next(iter(replayed.graphs.values())) is graph
        dropped = weakref.ref(cond["s"])
        cond = {"s": cond["s"].clone(), "mask": cond["mask"]}  # (moved: eager, then captured again)
        assert dropped() is None  # (the graph does not keep the tensors it reads alive)
        for seed in (10, 11, 12):
            x, t = _inputs(seed)
            assert torch.allclose(replayed(x, t, cond, scale=2), module(x, t, cond, scale=2), **tol)
        (again,) = replayed.graphs.values()
        assert again is not graph
        module.proj.weight.data = module.proj.weight.data.clone()  # (a parameter in new memory: not replayed)
        x, t = _inputs(12)
        assert torch.allclose(replayed(x, t, cond, scale=2), module(x, t, cond, scale=2), **tol)
        assert list(replayed.graphs.values()) == [again]  # (its layout's graph: none yet)
        x, t = _inputs(13)
        other = replayed(x, t, cond, scale=3)  # (another value: another layout, eager)
        assert torch.allclose(other, module(x, t, cond, scale=3), **tol) and len(replayed.graphs) == 1
    module.train()
    x, t = _inputs(14)
    out = replayed(x, t, cond)
    assert out.requires_grad and len(replayed.graphs) == 1  # (training: never captured)


@pytest.mark.gpu
def test_alternating_layouts_each_keep_a_graph():
    """A sampler alternating two chunk layouts (here two values of an option) replays a graph for each."""
    torch.manual_seed(0)
    module = Conditioned().cuda().eval()
    replayed = Replayed(module.forward, module)
    cond = {"s": torch.randn(2, 24, 32, device="cuda"), "mask": torch.ones(2, 24, device="cuda")}
    with torch.no_grad():
        for seed in range(8):
            x, t = _inputs(seed)
            scale = 2 + seed % 2
            torch.testing.assert_close(replayed(x, t, cond, scale=scale), module(x, t, cond, scale=scale))
        assert len(replayed.graphs) == 2 and not replayed.seen


@pytest.mark.gpu
def test_a_forward_that_cannot_be_captured_runs_eagerly():
    class Synchronizing(torch.nn.Module):
        def forward(self, x):
            return x * float(x.abs().max())  # (a host synchronization: no capture)

    module = Synchronizing().eval()
    replayed = Replayed(module.forward, module)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [replayed(torch.full((4,), float(k + 1), device="cuda")) for k in range(3)]
    assert replayed.broken and any("runs eagerly" in str(w.message) for w in caught)
    assert [o.tolist() for o in outs] == [[1.0] * 4, [4.0] * 4, [9.0] * 4]
