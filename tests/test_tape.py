"""Tapes (`evofuse.ops._tape`): a call's ops and launches recorded once and replayed. Here on CPU tensors with a
stand-in kernel whose binary computes on the addresses it is given (the gpu tests replay the real backward)."""

import ctypes

import pytest
import torch

from evofuse.ops import _common, _tape
from evofuse.ops._common import CachedLaunch

from .helpers import stand_in_launcher


class _ScaleBinary:
    """x[:n] *= factor on the float32 memory at the address given, as `_scale_kernel`'s binary would."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        ptr, n, factor = args[9:12]
        self.log.append(("binary", args))
        values = (ctypes.c_float * n).from_address(ptr)
        for k in range(n):
            values[k] = values[k] * factor


class _ScaleKernel:
    """Triton's launch of the stand-in kernel: computes, logs, returns its binary (as `JITFunction.run` does)."""

    arg_names = ["x_ptr", "n", "factor", "BLOCK"]

    def __init__(self):
        self.log = []

    @staticmethod
    def fn(x_ptr, n, factor, BLOCK: "tl.constexpr"):  # noqa: F821 (CachedLaunch reads the annotation's text)
        pass

    def __getitem__(self, grid):
        def launch(x, n, factor, **kwargs):
            self.log.append(("triton", grid))
            x.view(-1)[:n] *= factor
            return _ScaleBinary(self.log)
        return launch


@pytest.fixture
def scale(monkeypatch):
    return stand_in_launcher(_ScaleKernel(), monkeypatch)


def _call(scale, calls, x, w, mask):
    """Views, ops writing out= and in place, a split and a cat, launches on an input's view and on an op's
    result, a result that is None, one that is a view, a view of another dtype."""
    calls.append(1)
    y = _common.empty(4, 3, dtype=torch.float32, device=x.device)
    torch.mm(x, w, out=y)
    scale((1,), y, 6, 0.5, BLOCK=16)  # the first two rows, through the binary
    z = (x * 2).t().contiguous()
    first, second = z.split([2, 3])
    second.add_(first[:1])
    scale((1,), x[1:], 3, 4.0, BLOCK=16)  # an input's view, scaled in place
    both = torch.cat([first, second * mask], dim=0)
    bits = (y.view(torch.int32) & 1).sum()  # a view of another dtype: replayed as the op
    return y, None, both.sum(0, dtype=torch.float64), first[1], bits


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 5, generator=g), torch.randn(5, 3, generator=g), torch.rand(3, 4, generator=g)]


def test_a_replay_computes_what_the_call_computes_without_its_python(scale):
    calls = []
    _call(scale, calls, *_inputs(0))  # compiles the stand-in's binary (Triton's launch: not taped)
    out, tape, why = _tape.record(lambda *t: _call(scale, calls, *t), _inputs(1))
    assert why is None and tape is not None
    fresh, direct = _inputs(2), _inputs(2)
    replayed = tape(fresh)
    launched = [entry for entry in scale.kernel.log if entry[0] == "binary"][-2:]
    expected = _call(scale, calls, *direct)
    assert len(calls) == 3  # the replay did not run _call
    assert replayed[1] is None
    for got, want in zip(replayed[:1] + replayed[2:], expected[:1] + expected[2:]):
        assert got.dtype == want.dtype and got.stride() == want.stride() and torch.equal(got, want)
    assert replayed[3]._base is not None  # a view returned as a view
    assert torch.equal(fresh[0], direct[0])  # the in-place launch on the input's view, at the new input's address
    assert launched[1][1][9] == fresh[0].data_ptr() + 5 * 4
    assert launched[0][1][:9] == (1, 1, 1, 1234, "function", "metadata", None, None, None)


def test_intermediates_go_after_their_last_use_and_results_stay(scale):
    calls = []
    _call(scale, calls, *_inputs(0))
    _, tape, _ = _tape.record(lambda *t: _call(scale, calls, *t), _inputs(1))
    released = [k for *_, rel in tape.steps for k in rel]
    assert len(released) == len(set(released))
    assert not set(released) & {k for k in tape.result if k is not None}
    assert not set(released) & set(range(3))  # inputs stay the caller's
    made = tape.width
    assert len(released) == made - 4  # every tensor the ops made but the results' (first[1]'s root z)


@pytest.mark.parametrize("act", ["item", "nonzero", "random", "constant", "interpreter"])
def test_calls_a_replay_could_not_repeat_are_not_taped(scale, act, monkeypatch):
    constant = torch.ones(3)
    x, w, _ = _inputs(0)

    def fn(x, w):
        y = x @ w
        if act == "item":
            y = y * float(y.abs().max())
        elif act == "nonzero":  # (a shape that depends on the values)
            y = y[:, :2] + torch.nonzero(y > 0).shape[0]
        elif act == "random":
            y = y + torch.rand_like(y)
        elif act == "constant":
            y = y + constant
        else:
            monkeypatch.setattr(_common, "interpreting", lambda: True)
            scale((1,), y, 6, 0.5, BLOCK=16)
        return y

    out, tape, why = _tape.record(fn, [x, w])
    assert tape is None
    assert {"item": "values", "nonzero": "values", "random": "random", "constant": "did not make",
            "interpreter": "compiled binary"}[act] in why
    assert out.shape[0] == 4


def test_a_whole_launcher_is_one_step_repeated_on_the_new_tensors():
    """`taped_whole`: its call is one step (the ops inside it are not steps of their own), repeated with the
    replay's tensors; what it returns (one of its arguments) is usable after it."""
    seen = []

    @_tape.taped_whole
    def launcher(x, out, factor):
        seen.append((x.data_ptr(), out.data_ptr(), factor))
        torch.mul(x, factor, out=out)
        _common._record_launch(None)  # (Triton's own launch: not the tape's concern inside the step)
        return out

    def fn(x):
        out = torch.empty_like(x)
        y = launcher(x[1:], out[1:], 3.0)
        return out, y + 1

    _, tape, why = _tape.record(fn, [torch.ones(4)])
    assert why is None and [step[0] for step in tape.steps] == ["empty", "call", torch.ops.aten.add.Tensor]
    x = torch.arange(4.0)
    out, y = tape([x])
    assert torch.equal(out[1:], x[1:] * 3) and torch.equal(y, x[1:] * 3 + 1)
    assert seen[-1] == (x[1:].data_ptr(), out[1:].data_ptr(), 3.0)


def test_tf32_setting_of_each_op_is_kept(scale):
    seen = []

    def fn(x):
        with _common.ieee_fp32_matmul():
            y = x + 1
        return y * 2

    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        _, tape, _ = _tape.record(fn, [torch.ones(2)])
        seen = [step[3] for step in tape.steps]
        assert seen == [False, True]
        assert torch.equal(tape([torch.zeros(2)]), torch.full((2,), 2.0))
        assert torch.backends.cuda.matmul.allow_tf32 is True  # restored after the replay
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_tapes_record_a_few_times_then_replay_or_give_up(scale, monkeypatch):
    monkeypatch.setattr(_tape.Tapes, "key", lambda self, options, tensors: (options, *[t.shape for t in tensors]))
    tapes = _tape.Tapes()
    calls = []
    fails = {"n": 2}

    def fn(x, w, mask):
        if fails["n"]:
            fails["n"] -= 1
            _common._record_launch(None)  # a first launch: not taped
        return _call(scale, calls, x, w, mask)

    for _ in range(4):
        tapes.call(("a",), fn, _inputs(0))
    shapes = tuple(t.shape for t in _inputs(0))
    assert len(calls) == 3 and type(tapes.tapes[(("a",), *shapes)]) is _tape.Tape
    fails["n"] = 10 ** 6
    for _ in range(_tape.ATTEMPTS + 2):
        tapes.call(("b",), fn, _inputs(0))
    assert tapes.tapes[(("b",), *shapes)] == _tape.ATTEMPTS  # given up: runs as it is
    monkeypatch.setattr(CachedLaunch, "_hooked", lambda self: True)  # a profiler's hook: the call as it is
    before = len(calls)
    tapes.call(("a",), fn, _inputs(0))
    assert len(calls) == before + 1


def test_no_key_off_the_gpu_while_recording_gradients_or_in_autocast():
    tapes = _tape.Tapes()
    x = torch.ones(2)
    with torch.no_grad():
        assert tapes.key((), [x]) is None  # a CPU tensor
    assert tapes.key((), [x]) is None


def _training_calls(mod, x, mask, g, calls):
    """`calls` training steps on the same inputs: each step's output and gradients (msa_repr's, then the
    parameters'), and the device memory peak of each backward beyond what was allocated before it."""
    results, peaks = [], []
    for _ in range(calls):
        for t in (x, *mod.parameters()):
            t.grad = None
        out = mod(x, mask, impl="triton")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out.backward(g)
        torch.cuda.synchronize()
        peaks.append((torch.cuda.max_memory_allocated() - base) / 2**20)
        results.append([out.detach().clone()] + [None if t.grad is None else t.grad.clone()
                                                 for t in (x, *mod.parameters())])
    return results, peaks


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("normalization, mask_kind, msa_grad", [("seed", "rows", True), ("af2", "none", False),
                                                                 ("boltz", "random", True)])
def test_opm_training_replays_from_tapes_bit_for_bit(dtype, normalization, mask_kind, msa_grad, monkeypatch):
    """The eager 16-bit training step of the Outer Product Mean: its forward and backward taped after their
    first calls, then replayed (the Python path not run: patched to fail) with outputs and gradients equal bit
    for bit to the first, untaped call's; the backward's memory peak no higher replayed. The backward in
    three row blocks, the multi-pass forward or on Hopper the Gluon one (the single-launch kernels switched off)."""
    from evofuse import _backward, _library
    from evofuse.ops import outer_product_mean
    from evofuse.ops.outer_product_mean import outer_product_mean_wgmma

    from .helpers import opm_module, random_mask

    B, S, N, D, c, R = 2, 37, 75, 24, 32, 19
    monkeypatch.setattr(_backward, "BLOCK_BYTES", B * 25 * N * c * c * 2)  # 3 blocks of 25 rows
    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    mod = opm_module(D, R, c, seed=5, normalization=normalization).cuda().to(dtype)
    x = torch.randn(B, S, N, D, device="cuda", dtype=dtype).requires_grad_(msa_grad)
    mask = random_mask(B, S, N, mask_kind, 7)
    mask = None if mask is None else mask.cuda()
    g = torch.randn(B, N, N, R, device="cuda", dtype=dtype)
    results, peaks = _training_calls(mod, x, mask, g, 3)
    tapes = {k[0][0]: t for k, t in _tape.TAPES.tapes.items()}
    assert sorted(tapes) == ["opm-backward", "opm-forward"]
    assert all(type(t) is _tape.Tape for t in tapes.values()), _tape.TAPES.tapes
    # on Hopper the forward's Gluon kernel is one step of the tape (its launcher's call)
    hopper = outer_product_mean_wgmma.supported(x, c, R) if outer_product_mean_wgmma is not None else False
    assert any(step[0] == "call" for step in tapes["opm-forward"].steps) == hopper

    def fail(*args, **kwargs):
        raise AssertionError("the Python path ran")

    monkeypatch.setattr(_library, "outer_product_mean_backward", fail)
    monkeypatch.setattr(outer_product_mean, "outer_product_mean_triton", fail)
    replayed, replayed_peaks = _training_calls(mod, x, mask, g, 2)
    for got in results[1:] + replayed:
        for a, b in zip(results[0], got):
            assert (a is None and b is None) or torch.equal(a, b)
    assert (results[0][1] is None) == (not msa_grad)
    assert max(replayed_peaks) <= peaks[0] + 1, (peaks, replayed_peaks)
