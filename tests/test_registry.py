"""The registry, `evofuse.operations.OPERATIONS`, is the one place the suite, `evofuse check`, the benchmark's case
selection and grid and the contract's gradient check read an operation from: a toy operation registered there alone (no other
file knows it) is seen by each."""

import torch
import torch.nn.functional as F
from torch import nn

from evofuse.operations import OPERATIONS, Case, Operation

from .conftest import DEVICE
from .contract import check_gradients


def _norm_projection_reference(x, mask, norm_weight, norm_bias, weight, bias):
    """The toy's definition: a LayerNorm, then a linear, times the row mask."""
    y = F.linear(F.layer_norm(x, x.shape[-1:], norm_weight, norm_bias), weight, bias)
    return y * mask[..., None].to(y.dtype)


class _NormProjection(nn.Module):
    """The toy operation's module, with the options every evofuse module takes (it has no kernels of its own)."""

    def __init__(self, c: int, width: int, precision: str = "default", impl: str | None = None):
        super().__init__()
        self.layer_norm, self.proj = nn.LayerNorm(c), nn.Linear(c, width)
        self.precision, self.impl = precision, impl

    def forward(self, x, mask, impl=None):
        return _norm_projection_reference(x, mask, self.layer_norm.weight, self.layer_norm.bias, self.proj.weight,
                                          self.proj.bias)


TOY = Operation(
    "toy", lambda c, **kw: _NormProjection(c.D, c.width, **kw), "layer_norm",
    ("layer_norm.weight", "layer_norm.bias", "proj.weight", "proj.bias"), _norm_projection_reference, lambda c: {},
    "msa", "residue", lambda c: 2.0 * c.B * c.S * c.N * c.D * c.width, lambda c: 0.0,
    (Case("toy-seed", "toy", 2, 3, 5, 8, 0, 6), Case("toy-wide", "toy", 1, 4, 9, 16, 0, 32)),
    ((1, 2, 7, 8, 0, 4), (3, 1, 1, 16, 0, 8)))


def test_a_toy_operation_registered_alone_is_seen_everywhere(monkeypatch, capsys):
    from evofuse.bench import _select
    from evofuse.check import run_check
    from evofuse.grid import _cases
    from evofuse.suite import find_case, make_inputs, make_module, seed_cases, suite_cases

    monkeypatch.setitem(OPERATIONS, "toy", TOY)
    assert [c.name for c in suite_cases() if c.op == "toy"] == ["toy-seed", "toy-wide"]
    assert find_case("toy-seed") in seed_cases()
    assert [c.name for c in _select("toy")] == ["toy-seed", "toy-wide"]
    assert [c.name for c in _cases("toy")] == ["toy-1x2x7x8x0x4", "toy-3x1x1x16x0x8"]
    assert "toy-1x2x7x8x0x4" in [c.name for c in _cases()]

    assert run_check(2, ["float32"], ["toy-seed", "toy-wide"], "torch", "default") == 0
    assert "2 passed, 0 failed" in capsys.readouterr().out

    case = find_case("toy-seed")
    mod = make_module(case, seed=3)
    x, mask = make_inputs(case, "cpu", torch.float32, seed=4)
    assert mask[:, :, case.N // 2].eq(0).all()  # (its declared fully masked residue)
    torch.testing.assert_close(mod(x, mask), TOY.reference_call(case)(x, mask, *TOY.module_params(mod)))
    check_gradients(mod, (x, mask), torch.float32, DEVICE)
