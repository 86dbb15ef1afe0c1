"""CachedLaunch and TunedLaunch: the launch path around Triton's per-call argument binding (and its
autotuner's). Here with a stand-in kernel, autotuner and driver (the gpu tests launch the real binaries)."""

import pytest
import torch
import triton
import triton.language as tl

from evofuse.ops import _common
from evofuse.ops._common import CachedLaunch, TunedLaunch

from .helpers import StandInDriver, stand_in_launcher


@triton.jit
def _scale_kernel(x_ptr, n, factor, BLOCK: tl.constexpr, DOUBLE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * factor * (2.0 if DOUBLE else 1.0), mask=offs < n)


class _Binary:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("binary", args))


class _Kernel:
    """Triton's launch: logs the call and returns a binary, as `JITFunction.run` does."""

    arg_names = _scale_kernel.arg_names
    fn = _scale_kernel.fn

    def __init__(self):
        self.log = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("triton", grid, args, kwargs))
            return _Binary(self.log)
        return launch


@pytest.fixture
def launcher(monkeypatch):
    return stand_in_launcher(_Kernel(), monkeypatch)


def test_the_first_call_of_a_key_compiles_the_next_launch_the_binary(launcher):
    x = torch.zeros(4)
    launcher((1, 1, 1), x, 4, 0.5, num_warps=4, num_stages=1, DOUBLE=True, BLOCK=16)
    launcher((3, 2, 1), x, 20, 0.25, num_warps=4, num_stages=1, DOUBLE=True, BLOCK=16)
    log = launcher.kernel.log
    assert [entry[0] for entry in log] == ["triton", "binary"]
    assert log[0][2:] == ((x, 4, 0.5), dict(num_warps=4, num_stages=1, DOUBLE=True, BLOCK=16))
    # grid, stream, function, metadata, no launch metadata or hooks, then every argument in signature order,
    # the tensor as its address
    assert log[1][1] == (3, 2, 1, 1234, "function", "metadata", None, None, None, x.data_ptr(), 20, 0.25, 16, True)


@pytest.mark.parametrize("change", ["dtype", "alignment", "int64", "one", "divisibility", "constexpr", "warps",
                                    "hook"])
def test_what_triton_specializes_on_makes_a_new_key(launcher, change, monkeypatch):
    x = torch.zeros(8)
    launcher((1, 1, 1), x, 4, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
    args, kwargs = [x, 4, 0.5], dict(num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
    if change == "dtype":
        args[0] = x.double()
    elif change == "alignment":
        args[0] = x[1:]  # 4 bytes past a 16-byte boundary
    elif change == "int64":
        args[1] = 2**31 + 4
    elif change == "one":  # Triton compiles an integer 1 as a constant
        args[1] = 1
    elif change == "divisibility":  # and marks multiples of 16
        args[1] = 32
    elif change == "constexpr":
        kwargs["BLOCK"] = 32
    elif change == "warps":
        kwargs["num_warps"] = 8
    else:  # a profiler's launch hook sees every launch: Triton's path
        monkeypatch.setattr(launcher, "_runtime_knobs", type("Knobs", (), {"launch_enter_hook": print}))
    launcher((1, 1, 1), *args, **kwargs)
    assert [entry[0] for entry in launcher.kernel.log] == ["triton", "triton"]


def test_what_triton_does_not_specialize_on_shares_the_binary(launcher):
    x, y = torch.zeros(64), torch.ones(64)
    launcher((1, 1, 1), x, 4, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
    launcher((1, 1, 1), y[16:], 20, 2.0, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)  # 64 bytes in
    assert [entry[0] for entry in launcher.kernel.log] == ["triton", "binary"]


def test_kernels_with_constexprs_before_runtime_arguments_are_refused():
    @triton.jit
    def constexpr_first(BLOCK: tl.constexpr, x_ptr):
        pass

    with pytest.raises(ValueError, match="constexprs come last"):
        CachedLaunch(constexpr_first)


def test_in_the_interpreter_it_is_triton_s_launch():
    if not _common.interpreting():
        pytest.skip("Triton's interpreter only")
    x = torch.arange(20, dtype=torch.float32)
    launch = CachedLaunch(_scale_kernel)
    launch((2, 1, 1), x, 20, 0.25, num_warps=1, num_stages=1, BLOCK=16, DOUBLE=True)
    torch.testing.assert_close(x, torch.arange(20, dtype=torch.float32) / 2)
    assert launch.binaries == {}


class _Config:
    kwargs = {"BLOCK": 16}

    def all_kwargs(self):
        return {"BLOCK": 16, "num_warps": 8, "num_stages": 2}


class _Tuner:
    """Triton's autotuner: launches (logged) and records the config it picked."""

    keys = ["n", "DOUBLE"]

    def __init__(self):
        self.fn = _Kernel()
        self.best_config = None

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.fn.log.append(("tuner", grid, args, kwargs))
            self.best_config = _Config()
        return run


def test_tuned_launch_tunes_each_key_once_then_launches_its_config(monkeypatch):
    monkeypatch.setattr(_common, "interpreting", lambda: False)
    tuned = _Tuner()
    launch = TunedLaunch(tuned)
    launch.cached._driver = StandInDriver()
    x = torch.zeros(4)

    def grid(meta):
        return (meta["BLOCK"] // 8,)

    for n in (20, 20, 20, 36):  # 36: another value of the autotuning key n (the same binary key as 20)
        launch(grid, (x, n), {"DOUBLE": True, "factor": 0.5})  # a runtime argument by name: the binary's in order
    log = tuned.fn.log
    assert [entry[0] for entry in log] == ["tuner", "triton", "binary", "tuner"]
    assert log[0][2:] == ((x, 20), {"DOUBLE": True, "factor": 0.5})  # as given: pruning may read names
    assert log[1][1:] == ((2,), (x, 20, 0.5), dict(DOUBLE=True, BLOCK=16, num_warps=8, num_stages=2))
    assert log[2][1] == (2, 1, 1, 1234, "function", "metadata", None, None, None, x.data_ptr(), 20, 0.5, 16, True)


def test_tuned_launch_takes_a_launched_key_s_binary_from_one_lookup_and_only_that_key_s(monkeypatch):
    """After a key's binary launched, its calls launch it straight (no tuner, no Triton); a tensor at another
    alignment (another binary key, the same autotuning key) compiles through Triton with the config picked,
    and a profiler's hook takes Triton's launch."""
    monkeypatch.setattr(_common, "interpreting", lambda: False)
    tuned = _Tuner()
    launch = TunedLaunch(tuned)
    launch.cached._driver = StandInDriver()
    x = torch.zeros(8)

    def grid(meta):
        return (meta["BLOCK"] // 8,)

    shifted = x[1:]
    for t in (x, x, x, x, shifted):
        launch(grid, (t, 20), {"DOUBLE": True, "factor": 0.5})
    log = tuned.fn.log
    assert [entry[0] for entry in log] == ["tuner", "triton", "binary", "binary", "triton"]
    assert log[3][1] == (2, 1, 1, 1234, "function", "metadata", None, None, None, x.data_ptr(), 20, 0.5, 16, True)
    assert log[4][1:] == ((2,), (shifted, 20, 0.5), dict(DOUBLE=True, BLOCK=16, num_warps=8, num_stages=2))
    monkeypatch.setattr(_common.CachedLaunch, "_hooked", lambda self: True)
    launch(grid, (x, 20), {"DOUBLE": True, "factor": 0.5})
    assert log[-1][0] == "triton"


def _replayable_call(launcher, replays, x, y, factor=0.5, single=True, target="out"):
    """A launcher as the single-launch paths and functional.py use `Replays`: the key holds every tensor's
    shape, strides, dtype and address modulo 16 and the options; the launch is x's and y's."""
    tensors = (x, y)
    key = (factor, single, *[(t.shape, t.stride(), t.dtype, t.data_ptr() % 16) for t in tensors])
    plan = replays.get(key)
    if plan is not None:
        return plan([t.data_ptr() for t in tensors])
    with replays.record(key, tensors):
        out = _common.empty(*x.shape, dtype=x.dtype, device=x.device)
        launcher((2,), x, x.numel(), factor, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        launcher((2,), y if single else y.clone(), y.numel(), factor, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        t = {"out": out, "x": x, "y": y}[target]
        launcher((3,), t, t.numel(), factor, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        if single:
            _common.single_launch_output(out)
        return out


@pytest.fixture
def one_launch(launcher):
    """The stand-in launcher as a single launch: only the output's launch is recorded (the others run
    before the recording would see them in a real launcher; here they are folded into one)."""
    real = launcher.__call__

    class One:
        kernel, _driver = launcher.kernel, launcher._driver

        def __call__(self, grid, *args, **kwargs):
            if grid == (3,):
                real(grid, *args, **kwargs)

    return One()


@pytest.mark.parametrize("target", ["out", "y"])
def test_a_single_launch_call_is_replayed_with_the_new_call_s_tensors(one_launch, monkeypatch, target):
    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)
    first = _replayable_call(one_launch, replays, x, y, target=target)
    monkeypatch.setattr(type(one_launch), "__call__", lambda *a, **k: pytest.fail("the Python path ran"))
    x2, y2 = torch.full((8,), 2.0), torch.full((8,), 3.0)
    second = _replayable_call(one_launch, replays, x2, y2, target=target)
    log = one_launch.kernel.log
    assert [entry[0] for entry in log] == ["triton", "binary"] and len(replays.plans) == 1
    assert log[0][2] == ({"out": first, "y": y}[target], 8, 0.5)
    # replayed: the binary with the new call's tensor (a new output, or its y) in the slot, as an address,
    # the grid and the constexprs as recorded
    launched = {"out": second, "y": y2}[target].data_ptr()
    assert log[1][1] == (3, 1, 1, 1234, "function", "metadata", None, None, None, launched, 8, 0.5, 16, False)
    assert second is not first and second.shape == (8,)
    (plan,) = replays.plans.values()
    assert not any(isinstance(a, torch.Tensor) for a in plan.template)  # no reference to the first call's tensors


def test_calls_that_are_not_one_declared_launch_are_not_replayed(launcher, one_launch):
    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)
    for _ in range(2):  # three launches, declared single: not replayable
        _replayable_call(launcher, replays, x, y)
    for _ in range(2):  # one launch, not declared
        _replayable_call(one_launch, replays, x, y, single=False)
    assert replays.plans == {}
    assert "binary" in [entry[0] for entry in launcher.kernel.log]  # CachedLaunch's own reuse still works


def test_a_recording_lets_go_of_the_first_launch_s_tensors_at_the_second(launcher):
    """A call of several launches is not replayable: its launches' tensors are not kept to the call's end
    (a launcher's `del` of a large intermediate frees it)."""
    import gc
    import weakref

    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)
    launcher((3,), x, 8, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)  # compiled: the binary's path next
    with replays.record(("k",), (x, y)):
        big = x * 2
        freed = weakref.ref(big)
        launcher((3,), big, 8, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        launcher((3,), y, 8, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        del big
        launcher.kernel.log.clear()  # the stand-in binary's log of its arguments (a real one keeps none)
        gc.collect()
        assert freed() is None
    assert replays.plans == {}


def test_a_launch_of_a_tensor_the_call_made_is_not_replayed(launcher):
    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)
    with replays.record(("k",), (x, y)):
        out = _common.empty(8, dtype=x.dtype, device=x.device)
        launcher((3,), out * 2, 8, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        _common.single_launch_output(out)
    assert replays.plans == {}


def test_a_recorded_call_with_one_tensor_in_two_slots_is_not_kept(one_launch):
    """Its plan could not tell the slots apart for a later call with two different tensors."""
    replays = _common.Replays()
    x = torch.zeros(8)
    _replayable_call(one_launch, replays, x, x)
    assert replays.plans == {}


def test_a_profiler_s_launch_hook_takes_the_recorded_path(one_launch, monkeypatch):
    from triton import knobs

    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)
    _replayable_call(one_launch, replays, x, y)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", print)
    assert replays.get(next(iter(replays.plans))) is None


def test_replays_forget_the_oldest_plan_past_their_limit(one_launch, monkeypatch):
    replays = _common.Replays()
    monkeypatch.setattr(replays, "LIMIT", 2)
    for factor in (0.5, 0.25, 0.125):
        _replayable_call(one_launch, replays, torch.zeros(8), torch.ones(8), factor=factor)
    assert [key[0] for key in replays.plans] == [0.25, 0.125]


def test_a_recording_sees_only_its_own_thread_s_launches(launcher):
    import threading

    replays = _common.Replays()
    x, y = torch.zeros(8), torch.ones(8)

    def other_call():  # another thread's declared single launch, while this thread records
        out = _common.empty(8, dtype=x.dtype, device=x.device)
        launcher((3,), out, 8, 0.5, num_warps=4, num_stages=1, BLOCK=16, DOUBLE=False)
        _common.single_launch_output(out)

    with replays.record(("k",), (x, y)):
        thread = threading.Thread(target=other_call)
        thread.start()
        thread.join()
    assert replays.plans == {} and [entry[0] for entry in launcher.kernel.log] == ["triton"]
