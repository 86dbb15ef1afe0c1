"""What the functional forms share (`evofuse/front/common.py`): the parameters cast to the input's dtype together
(float32 weights under autocast), the same values and gradients as cast one by one, in one cast each way; and the
shape checks, whose passed signatures are not parsed again, and the front door's, which checks a call signature once."""

import pytest
import torch

from evofuse.front import common as _common

from .conftest import DEVICE
from .helpers import randomize


def _aten_calls(run, name: str) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    with Counting():
        run()
    return calls.count(name)


def test_parameters_cast_together():
    """Values as `.to` gives them, vectors with unit stride, sizes that are multiples of 16 elements 16-aligned, a
    tensor past JOINED_CAST_MAX and one already in the dtype as they are cast alone or given; one cast forward and one
    backward for the joined ones, each parameter's gradient its own."""
    g = torch.Generator().manual_seed(0)
    big = torch.randn(_common.JOINED_CAST_MAX + 1, generator=g)
    given = torch.randn(3, 16, generator=g).half()
    params = [torch.randn(shape, generator=g).requires_grad_() for shape in ((5,), (4, 8), (16,), (7, 3))]
    tensors = [params[0], None, given, params[1], big, params[2], params[3], torch.randn(9, generator=g)[::2]]
    out = []
    assert _aten_calls(lambda: out.extend(_common.cast(tensors, torch.float16)), "_to_copy") == 2  # (joined; big)
    assert out[1] is None and out[2] is given
    for t, o in zip(tensors, out):
        if t is not None:
            assert o.dtype == torch.float16 and o.shape == t.shape and o.is_contiguous()
            torch.testing.assert_close(o, t.to(torch.float16), rtol=0, atol=0)
    assert out[3].storage_offset() % 16 == 0 and out[5].storage_offset() % 16 == 0  # (32 and 16 elements)
    assert out[4].untyped_storage().data_ptr() != out[3].untyped_storage().data_ptr()
    weights = [torch.randn(t.shape, generator=g).half() for t in params]
    loss = sum((o * w).sum() for o, w in zip((out[0], out[3], out[5], out[6]), weights))
    assert _aten_calls(loss.backward, "_to_copy") == 1
    for p, w in zip(params, weights):
        torch.testing.assert_close(p.grad, w.float(), rtol=0, atol=0)


@pytest.mark.parametrize("op", ["trimul", "att"])
def test_float32_parameters_on_16_bit_inputs(op, monkeypatch):
    """A module of float32 parameters on a float16 input (the models under autocast): the output and every gradient
    bit for bit as with each parameter cast alone."""
    from evofuse import MSARowAttentionWithPairBias, TriangleMultiplication

    if op == "trimul":
        mod = randomize(TriangleMultiplication(8, 6, bias=True), 1).to(DEVICE)
        inputs = [torch.randn(1, 9, 9, 8), (torch.rand(1, 9, 9) > 0.2).float()]
    else:
        mod = randomize(MSARowAttentionWithPairBias(8, 6, 2, qkv_bias=True, pair_layer_norm=True), 1).to(DEVICE)
        inputs = [torch.randn(1, 3, 9, 8), torch.randn(1, 9, 9, 6), (torch.rand(1, 3, 9) > 0.2).float()]
    inputs = [t.to(DEVICE, torch.float16).requires_grad_() if k < len(inputs) - 1 else t.to(DEVICE)
              for k, t in enumerate(inputs)]

    def run():
        mod.zero_grad()
        for t in inputs[:-1]:
            t.grad = None
        out = mod(*inputs, impl="triton")
        out.float().square().sum().backward()
        return [out, *(t.grad for t in inputs[:-1]), *(p.grad for p in mod.parameters())]

    joined = run()
    monkeypatch.setattr(_common, "JOINED_CAST_MAX", 0)  # (each parameter cast alone)
    for got, want in zip(joined, run(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_shape_checks_remember_passed_signatures_alone():
    """A signature that passed is answered from memory (its sizes, a copy the caller may change); one that differs in
    a parameter's shape, or in the sizes given, is checked again and fails naming the parameter."""
    from evofuse import _validation

    shapes = dict(w="2c D", b="2c")
    params = dict(w=torch.zeros(6, 4), b=torch.zeros(6))
    first = _validation.check_shapes(params, shapes)
    first["c"] = 99
    assert _validation.check_shapes(params, shapes) == {"c": 3, "D": 4}
    with pytest.raises(ValueError, match="b must have shape"):
        _validation.check_shapes(dict(params, b=torch.zeros(5)), shapes)
    with pytest.raises(ValueError, match="w must have shape"):
        _validation.check_shapes(params, shapes, {"D": 5})


def test_front_binds_as_python_does():
    """A functional form's arguments are bound by name as Python binds them (`front.door.front`): positional and keyword
    calls agree, defaults apply, the documented signature is the public one, and a call Python would refuse raises
    Python's own TypeError naming the argument."""
    import inspect

    from evofuse import functional

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, generator=g)
    w = dict(layer_norm_weight=torch.ones(8), layer_norm_bias=torch.zeros(8), a_weight=torch.randn(16, 8, generator=g),
             a_bias=None, b_weight=torch.randn(16, 8, generator=g), b_bias=None,
             out_weight=torch.randn(8, 16, generator=g), out_bias=None)
    names = list(inspect.signature(functional.transition).parameters)
    assert names[:3] == ["x", "mask", "layer_norm_weight"] and names[-3:] == ["activation", "precision", "impl"]
    want = functional.transition(x, None, *w.values(), activation="swiglu", precision="default", impl="torch")
    torch.testing.assert_close(functional.transition(x=x, mask=None, impl="torch", **w), want, rtol=0, atol=0)
    torch.testing.assert_close(functional.transition(x, None, impl="torch", **w), want, rtol=0, atol=0)
    for call, message in [
        (lambda: functional.transition(x, None, **w, activaton="relu"), "unexpected keyword argument 'activaton'"),
        (lambda: functional.transition(x, **w), "missing a required argument: 'mask'"),
        (lambda: functional.transition(x, None, *w.values(), "relu"), "too many positional arguments"),
        (lambda: functional.transition(x, None, *w.values(), x=x), "multiple values for argument 'x'"),
    ]:
        with pytest.raises(TypeError, match=message):
            call()



def test_form_weights_names_every_part_and_refuses_a_dropped_bias():
    """`Form.weights` maps layers to a form's parameters by part: a layer's weight and bias, a (weight, bias) pair, or
    None for an absent optional part; a part the form lacks, a part left out, and a bias where the form takes none
    are refused, each naming it."""
    from torch import nn

    from evofuse import functional

    form = functional.triangle_attention.form
    norm, bias = nn.LayerNorm(8), nn.Linear(8, 2, bias=False)
    q, k, v, g, o = (nn.Linear(8, 8, bias=name in "go") for name in "qkvgo")
    got = form.weights(layer_norm=norm, linear=bias, query=q, key=k, value=v, gate=(g.weight, None), out=o)
    assert list(got) == list(form.params)
    assert got["layer_norm_bias"] is norm.bias and got["gate_bias"] is None and got["out_bias"] is o.bias
    with pytest.raises(ValueError, match="query has a bias"):
        form.weights(layer_norm=norm, linear=bias, query=nn.Linear(8, 8), key=k, value=v, gate=g, out=o)
    with pytest.raises(TypeError, match="no parameter keys_weight"):
        form.weights(layer_norm=norm, linear=bias, query=q, keys=k, value=v, gate=g, out=o)
    with pytest.raises(TypeError, match="out_weight, out_bias not given"):
        form.weights(layer_norm=norm, linear=bias, query=q, key=k, value=v, gate=g)


def test_a_call_signature_is_checked_once(monkeypatch):
    """`front.door` checks each call signature once (its tensors' types, shapes, dtypes and devices, its options): a
    second call of one runs no check and folds the MSA's leading dimensions as the first did; a call that differs in
    a shape or in a tensor given or not is checked again, and a bad one still fails naming the argument."""
    from evofuse import MSARowAttentionWithPairBias
    from evofuse.front import door

    checked = []
    checks = door._checks
    monkeypatch.setattr(door, "_CHECKED", {})
    monkeypatch.setattr(door, "_checks", lambda form, args: checked.append(form.label) or checks(form, args))
    torch.manual_seed(0)
    att = randomize(MSARowAttentionWithPairBias(msa_dim=8, pair_dim=4, num_heads=2), 1).to(DEVICE)
    m, z = torch.randn(2, 1, 3, 5, 8, device=DEVICE), torch.randn(2, 1, 5, 5, 4, device=DEVICE)
    mask = torch.ones(2, 1, 3, 5, device=DEVICE)
    first = att(m, z, mask, impl="torch")
    again = att(m, z, mask, impl="torch")
    assert len(checked) == 1 and torch.equal(first, again) and again.shape == m.shape
    att(m[:, :, :2], z, mask[:, :, :2], impl="torch")
    att(m, z, None, impl="torch")
    assert len(checked) == 3
    with pytest.raises(ValueError, match="pair_repr"):
        att(m, z[..., :3], mask, impl="torch")
    assert len(checked) == 4
