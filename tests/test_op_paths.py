"""The operations' call paths: what a training call keeps for its backward (no zero-filled gradients, the transition
nothing of its own), the nested ops a backward takes through the dispatcher only when traced, the eager call beside
the custom op, and an exported program loaded after `import evofuse`."""

import pytest
import torch

from evofuse.operations import OPERATIONS
from evofuse.ops.outer_product_mean.op import outer_product_mean_op
from evofuse.ops.row_attention.op import row_attention_op

from .conftest import DEVICE
from .helpers import opm_module
from .test_ops import (
    _apb_args,
    _att_args,
    _col_args,
    _gcol_args,
    _opm_args,
    _pwa_args,
    _trans_args,
    _tri_args,
    _trimul_args,
)


@pytest.mark.no_poison
@pytest.mark.parametrize("op", ["opm", "att", "pwa", "tri", "trimul", "col", "gcol", "apb"])
def test_backward_makes_no_zero_gradients_for_the_kept_outputs(op):
    """The outputs an op keeps for its backward (projections, weighted or gated sums, weights) get no gradient: autograd
    must not fill zeros of their size (at pwa-long ~0.9 GiB and a pass over memory each step). (The transition keeps
    none: `test_transition_keeps_only_its_input`.)"""
    from evofuse.ops.attention_pair_bias.op import attention_pair_bias_op
    from evofuse.ops.msa_column_attention.op import msa_column_attention_op
    from evofuse.ops.msa_column_global_attention.op import msa_column_global_attention_op
    from evofuse.ops.pair_weighted_averaging.op import pair_weighted_averaging_op
    from evofuse.ops.triangle_attention.op import triangle_attention_op
    from evofuse.ops.triangle_multiplication.op import triangle_multiplication_op

    fn, args = {"col": (msa_column_attention_op, _col_args(True)), "opm": (outer_product_mean_op, _opm_args(True)),
                "att": (row_attention_op, _att_args(True)),
                "pwa": (pair_weighted_averaging_op, _pwa_args(True)), "tri": (triangle_attention_op, _tri_args(True)),
                "trimul": (triangle_multiplication_op, _trimul_args(True)),
                "gcol": (msa_column_global_attention_op, _gcol_args(True)),
                "apb": (attention_pair_bias_op, _apb_args(True))}[op]
    outputs = fn(*args)
    kept = {tuple(t.shape) for t in outputs[1:] if t.numel()}
    with torch.profiler.profile(record_shapes=True) as prof:
        outputs[0].sum().backward()
    zeroed = {tuple(e.input_shapes[0]) for e in prof.events() if e.name == "aten::zero_" and e.input_shapes}
    assert kept and not kept & zeroed, kept & zeroed


@pytest.mark.no_poison
def test_transition_keeps_only_its_input():
    """A training call of the transition saves its input and parameters and no tensor of its own for the backward
    (the backward makes a and b again): nothing of the hidden rows' size outlives the forward."""
    from evofuse.ops.transition.op import transition_op

    args = _trans_args(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = transition_op(*args)
    storages = {t.data_ptr() for t in args if isinstance(t, torch.Tensor)}
    assert saved and all(t.data_ptr() in storages for t in saved), [tuple(t.shape) for t in saved]
    out.sum().backward()


def _small_case(op):
    """A registered operation's module (kernels on every device) and inputs (the differentiable ones, then the
    mask) at its first suite case cut to B 1, N 6 (S 3; the pair stack's S = N), made from the registry alone."""
    from dataclasses import replace

    from evofuse.suite import make_inputs, make_module

    first = OPERATIONS[op].cases[0]
    case = replace(first, B=1, N=6, S=6 if first.S == first.N else min(first.S, 3))
    return make_module(case, seed=1, impl="triton").to(DEVICE), make_inputs(case, DEVICE, torch.float32, seed=2)


def _step(mod, inputs):
    """The inputs' and parameters' gradients of a training step of mod (every input but the mask differentiable)."""
    x = [t.clone().requires_grad_(k < len(inputs) - 1) for k, t in enumerate(inputs)]
    mod.zero_grad()
    mod(*x).square().sum().backward()
    return [t.grad for t in x[:-1]] + [p.grad.clone() for p in mod.parameters()]


@pytest.mark.no_poison
@pytest.mark.parametrize("op", list(OPERATIONS))
def test_backward_nested_ops_dispatched_only_when_traced(op):
    """An eager step calls no evofuse op through the dispatcher (the Python functions behind them directly); a traced
    one (torch.compile through AOTAutograd, fake and functional tensors) calls its backward's nested ops
    (`evofuse::*backward`), which it keeps opaque; both give the same gradients."""
    mod, inputs = _small_case(op)

    def dispatched(fn):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            grads = _step(fn, inputs)
        return grads, {e.name for e in prof.events() if e.name.startswith("evofuse::")}

    eager, eager_ops = dispatched(mod)
    assert not eager_ops, eager_ops
    compiled, traced_ops = dispatched(torch.compile(mod, backend="aot_eager", fullgraph=True))
    assert any(name.endswith("backward") for name in traced_ops), traced_ops
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.no_poison
@pytest.mark.parametrize("op", list(OPERATIONS))
def test_eager_call_skips_the_dispatcher(op):
    """Eagerly on plain tensors an operation runs under a torch.autograd.Function (`_runtime.eager_or_dispatched`),
    not through its custom op: its output's gradient node is that Function's (past the views of a transposed
    output), and the gradients match the custom op's own autograd (checked against torch.compile above)."""
    mod, inputs = _small_case(op)
    x = [t.clone().requires_grad_(k < len(inputs) - 1) for k, t in enumerate(inputs)]
    node = mod(*x).grad_fn
    while type(node).__name__ in ("TransposeBackward0", "ViewBackward0", "UnsafeViewBackward0"):
        node = node.next_functions[0][0]
    assert type(node).__name__ == "EagerBackward"
    with torch.no_grad():
        assert mod(*x).grad_fn is None


@pytest.mark.no_poison
def test_exported_program_loads_after_import(tmp_path):
    """A program exported with an evofuse op (torch.export) saves, and loads and runs in a fresh process after
    `import evofuse`, with the exporting process's output."""
    import os
    import subprocess
    import sys

    mod = opm_module(16, 6, 8, seed=1, impl="triton").to(DEVICE)
    x = torch.randn(1, 3, 5, 16, device=DEVICE)
    program = torch.export.export(mod, (x, None))
    assert any("evofuse" in str(node.target) for node in program.graph.nodes)
    path = tmp_path / "opm.pt2"
    torch.export.save(program, str(path))
    torch.save({"x": x.cpu(), "out": mod(x, None).detach().cpu()}, tmp_path / "io.pt")
    code = (f"import torch, evofuse; program = torch.export.load({str(path)!r}); io = torch.load({str(tmp_path / 'io.pt')!r}); "
            f"out = program.module()(io['x'].to({DEVICE!r}), None); "
            "torch.testing.assert_close(out.cpu(), io['out']); print('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert run.stdout.strip().endswith("ok"), run.stderr[-3000:]
