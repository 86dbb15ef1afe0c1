"""EVOFUSE_IMPL and the per-call / per-module override choose the path."""

import pytest
import torch

import evofuse.ops.outer_product_mean.op as opm_op
from evofuse._dispatch import resolve_impl

from .conftest import DEVICE
from .helpers import opm_module


def test_auto_takes_the_reference_on_cpu():
    assert resolve_impl(None, torch.zeros(1)) == "torch"
    assert resolve_impl("auto", torch.zeros(1)) == "torch"


@pytest.mark.gpu
def test_auto_takes_triton_on_cuda():
    assert resolve_impl(None, torch.zeros(1, device="cuda")) == "triton"


def test_environment_variable_and_override(monkeypatch):
    x = torch.zeros(1, device=DEVICE)
    monkeypatch.setenv("EVOFUSE_IMPL", "torch")
    assert resolve_impl(None, x) == "torch"
    assert resolve_impl("triton", x) == "triton"  # the override wins
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")
    assert resolve_impl(None, x) == "triton"
    assert resolve_impl("torch", x) == "torch"
    monkeypatch.setenv("EVOFUSE_IMPL", "cuda")
    with pytest.raises(ValueError, match="EVOFUSE_IMPL"):
        resolve_impl(None, x)


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        resolve_impl("triton", torch.zeros(1))


def test_module_override_and_call_override_reach_the_kernel(monkeypatch):
    calls = []
    real = opm_op.outer_product_mean
    monkeypatch.setattr(opm_op, "outer_product_mean", lambda *a, **k: calls.append(1) or real(*a, **k))
    mod = opm_module(8, 4, 8, impl="triton").to(DEVICE)
    x = torch.randn(1, 2, 3, 8, device=DEVICE)
    mod(x, None)
    assert calls == [1]
    mod(x, None, impl="torch")  # a per-call override beats the module's
    assert calls == [1]
    monkeypatch.setenv("EVOFUSE_IMPL", "torch")
    mod.impl = None
    mod(x, None)
    assert calls == [1]
    monkeypatch.setenv("EVOFUSE_IMPL", "triton")
    mod(x, None)
    assert calls == [1, 1]


def _defined_ops() -> list[str]:
    """Every custom op the package's source defines: `_runtime.operation("name", ...)` and `custom_op("name", ...)`."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "evofuse"
    found = {name for path in root.rglob("*.py")
             for name in re.findall(r'(?:operation|custom_op)\(\s*"(\w+)"', path.read_text())}
    assert len(found) >= 19, sorted(found)  # (the pattern still finds the operations and their backwards)
    return sorted(found)


def test_import_registers_every_op_and_needs_no_gpu(tmp_path):
    """`import evofuse` registers every custom op the source defines, without a GPU, initializing no CUDA and
    compiling no kernel (Triton's cache stays empty)."""
    import subprocess
    import sys

    code = ("import torch, evofuse; assert not torch.cuda.is_initialized(); "
            f"missing = [n for n in {_defined_ops()!r} if not hasattr(torch.ops.evofuse, n)]; assert not missing, missing; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "", "TRITON_CACHE_DIR": str(tmp_path)})
    assert out.stdout.strip() == "ok", out.stderr
    assert not any(tmp_path.iterdir())



def test_every_operation_runs_without_triton():
    """Where Triton is not installed, `import evofuse` still works and every registered operation's module runs its
    reference on the CPU (no op is asked anything: the kernels' limits only where they could run)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None\n"
            "from dataclasses import replace\n"
            "import torch, evofuse\n"
            "from evofuse.operations import OPERATIONS\n"
            "from evofuse.suite import make_inputs, make_module\n"
            "for op in OPERATIONS.values():\n"
            "    case = replace(op.cases[0], B=1, N=6, S=6 if op.cases[0].S == op.cases[0].N else 3)\n"
            "    out = make_module(case)(*make_inputs(case, 'cpu', torch.float32))\n"
            "    assert torch.isfinite(out).all(), op.key\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]

def test_modules_read_parametrized_and_replaced_weights():
    """A parametrized weight (torch.nn.utils.parametrize) and a replaced Parameter both reach the kernel."""
    from torch.nn.utils import parametrize

    from .helpers import att_module

    class Doubled(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    for mod, inputs in ((opm_module(8, 4, 8, seed=1), (torch.randn(1, 2, 5, 8),)),
                        (att_module(16, 4, 2, seed=2), (torch.randn(1, 2, 5, 16), torch.randn(1, 5, 5, 4)))):
        mod = mod.to(DEVICE)
        inputs = tuple(t.to(DEVICE) for t in inputs) + (None,)
        parametrize.register_parametrization(mod.out_proj, "weight", Doubled())
        mod.layer_norm.bias = torch.nn.Parameter(torch.full_like(mod.layer_norm.bias, 0.3))
        with torch.no_grad():
            torch.testing.assert_close(mod(*inputs, impl="triton"), mod(*inputs, impl="torch"), rtol=1e-4, atol=1e-5)
            plain = mod(*inputs, impl="torch")
            parametrize.remove_parametrizations(mod.out_proj, "weight", leave_parametrized=False)
            assert not torch.allclose(mod(*inputs, impl="torch"), plain)  # the parametrization mattered


def test_fused_calls_launch_on_the_inputs_gpu(monkeypatch):
    """Triton launches on the current device: an eager fused call makes its input's GPU current; under
    torch.compile the graph guards devices itself; CPU tensors (Triton's interpreter) ask CUDA nothing."""
    from evofuse.front import common as F

    entered = []
    monkeypatch.setattr(torch.cuda, "device", lambda d: entered.append(d) or "guard")

    class OnGpu:  # a stand-in for a CUDA tensor (none on a machine without a GPU)
        is_cuda = True
        device = torch.device("cuda", 1)

    assert F.on_device(OnGpu()) == "guard" and entered == [torch.device("cuda", 1)]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    F.on_device(OnGpu())
    assert len(entered) == 1
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    F.on_device(torch.zeros(1))
    assert len(entered) == 1


def _doubling_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def doubling_kernel(x_ptr, out_ptr, n, N_BUCKET: tl.constexpr, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        tl.store(out_ptr + offsets, x * SCALE, mask=offsets < n)

    return doubling_kernel


@pytest.mark.parametrize("hook", [False, True])
def test_tuned_launches_skip_the_autotuner_once_chosen(hook):
    """A kernel's launcher goes through Triton's autotuner once per key (the key arguments' values and the dtypes) and
    straight to the kernel after, with the chosen config's arguments; a chosen config's pre-hook run before each of its
    launches (the descriptor pass's hook sets its descriptors' blocks)."""
    import triton

    from evofuse._runtime import autotuned, cdiv

    hooked = []
    config = triton.Config({"BLOCK": 16}, num_warps=1, pre_hook=(lambda nargs: hooked.append(1)) if hook else None)
    tuned = autotuned(_doubling_kernel(), lambda: [config], ["N_BUCKET"], lambda configs, nargs, **_: configs)
    tuner_runs = []
    run = tuned.tuner.run
    tuned.tuner.run = lambda *args, **kwargs: tuner_runs.append(1) or run(*args, **kwargs)

    def launch(n, dtype, bucket, scale=2.0):
        x = torch.arange(n, device=DEVICE).to(dtype)
        out = torch.empty_like(x)
        tuned[lambda meta: (cdiv(n, meta["BLOCK"]),)](x, out, n, bucket, SCALE=scale)
        torch.testing.assert_close(out, x * scale)

    launch(37, torch.float32, 64)
    launch(50, torch.float32, 64)  # (same key: the autotuner's choice reused)
    launch(50, torch.float32, 64, scale=3.0)  # (a constexpr outside the key: a new specialization, same choice)
    assert len(tuner_runs) == 1
    launch(50, torch.float16, 64)  # another dtype and another bucket: the autotuner again
    launch(70, torch.float32, 128)
    assert len(tuner_runs) == 3
    assert len(hooked) == (5 if hook else 0)


def test_transition_runs_the_original_where_its_hidden_rows_are_small():
    """On a CUDA device a patched transition runs the original where the original's hidden rows (three of rows x
    hidden in the compute dtype) take at most `HIDDEN_SHARE` of the device's memory: Boltz-2's pair transition at N 384
    (147456 rows, hidden 512, bf16) on an 80 GiB card does, at N 4096 it does not; the single representation's at any
    length does."""
    from evofuse.integrations._adapters import FusedTransition

    card = 80 * 2**30
    assert FusedTransition.small_hidden(384 * 384, 512, torch.bfloat16, card)
    assert not FusedTransition.small_hidden(4096 * 4096, 512, torch.bfloat16, card)
    assert not FusedTransition.small_hidden(1024 * 1024, 512, torch.float32, card)
    assert FusedTransition.small_hidden(6000, 1536, torch.float32, card)


def test_crossover_by_gradient_mode_and_never_when_traced(monkeypatch):
    """A replacement runs its original below its operation's crossover, the column of the call's gradient mode; a
    call traced by torch.compile (or captured into a CUDA graph) takes the fused kernels at any size."""
    from evofuse.integrations import _crossover

    monkeypatch.setitem(_crossover.CROSSOVERS, "triangle_attention", (100, 1000))
    replacement = _crossover.RunsOriginal()
    replacement.OPERATION = "triangle_attention"
    x = torch.zeros(1)
    with torch.no_grad():
        assert replacement.small(99, x) and not replacement.small(100, x)
    assert replacement.small(999, x) and not replacement.small(1000, x)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not replacement.small(1, x)
    assert _crossover.rows_of(torch.zeros(2, 5, 5, 3)) == 50 and _crossover.scores(torch.zeros(2, 7, 3)) == 98
