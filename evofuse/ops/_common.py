"""Helpers shared by the Triton launchers: precision choice, autotuning, size buckets."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading

import torch

PRECISIONS = ("default", "fast")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def autotune_enabled() -> bool:
    """EVOFUSE_AUTOTUNE=0 launches each kernel's default config instead of autotuning (fast start-up,
    used by the GPU correctness tests); anything else autotunes on first use of each size bucket."""
    return os.environ.get("EVOFUSE_AUTOTUNE", "1") != "0"


def launch(kernel, tuned, configs, prune, grid, args, consts, interpret_meta):
    """Launches `kernel` on `args` (its runtime arguments) and `consts` (constexprs) over `grid(meta)`: in
    Triton's interpreter with `interpret_meta`; with autotuning off, the first of `configs()` that survives
    `prune`; else the config the autotuned wrapper `tuned()` picks. Both through `cached_launch`."""
    if interpreting():
        _record_launch(None)
        kernel[grid(interpret_meta)](*args, **consts, **interpret_meta)
    elif not autotune_enabled():
        cfg = prune(configs(), {}, **consts)[0]
        cached_launch(kernel)(grid(cfg.kwargs), *args, **consts, **cfg.all_kwargs())
    else:
        tuned_launch(tuned())(grid, args, consts)


class CachedLaunch:
    """Launches a Triton kernel straight through the binary compiled for an earlier call of the same
    key, skipping Triton's per-call binding and specialization of every argument (on the H200's host
    ~30 us a call for ~30 arguments, twice the seed shapes' kernels).

    The key holds what Triton specializes a binary on: the device, the launch options and constexprs,
    each pointer's dtype and address modulo 16, and each integer's value modulo 16, whether it is 1
    and its width (int32, int64 or uint64): two calls with one key take one binary. The first call of a
    key, Triton's interpreter and any launch hook (a profiler's) take Triton's own launch. The kernel's
    constexprs must come last (the binary takes every argument in signature order).

    Call as `launch(grid, *runtime_args, num_warps=4, num_stages=3, **constexprs)` (Triton's defaults),
    grid a tuple of one to three sizes.
    """

    def __init__(self, kernel):
        from triton import knobs
        from triton.runtime.driver import driver

        self.kernel = kernel
        self.binaries = {}
        self._driver, self._runtime_knobs = driver, knobs.runtime  # the active driver is looked up per call
        self.interpreted = type(kernel).__name__ == "InterpretedFunction"  # defined under TRITON_INTERPRET=1
        constexprs = [name for name, p in inspect.signature(kernel.fn).parameters.items()
                      if "constexpr" in str(p.annotation)]  # tl.constexpr, or its name under postponed annotations
        self.constexpr_names = tuple(kernel.arg_names[len(kernel.arg_names) - len(constexprs):])
        self.runtime_names = tuple(kernel.arg_names[:len(kernel.arg_names) - len(constexprs)])
        if list(self.constexpr_names) != constexprs:
            raise ValueError(f"{kernel.fn.__name__}: CachedLaunch takes kernels whose constexprs come last")

    def __call__(self, grid, *args, num_warps=4, num_stages=3, **consts):
        """Launches; returns the (binary, constexprs) it launched, None in the interpreter or when Triton's
        launch returned no binary."""
        if self.interpreted or interpreting():
            _record_launch(None)
            self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **consts)
            return None
        args, consts = self.positional(args, consts)
        device = self._driver.active.get_current_device()
        spec, bound = self.bind(args)
        key = (device, num_warps, num_stages, *consts.values(), *spec)
        entry = self.binaries.get(key)
        if entry is None or self._hooked():
            binary = self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **consts)
            if all(hasattr(binary, name) for name in ("run", "function", "packed_metadata")):
                entry = self.binaries[key] = (binary, tuple(consts[name] for name in self.constexpr_names))
                _record_launch((self, entry, grid, args))
            else:
                _record_launch(None)  # not replayable
            return entry
        self.run(entry, grid, args, bound, device)
        return entry

    @staticmethod
    def bind(args: tuple) -> tuple[list, list]:
        """(What Triton specializes a binary on, per runtime argument: an integer's value modulo 16, whether
        it is 1 and its width; a tensor's dtype and address modulo 16; any other argument's type. The
        arguments as `run` hands them to the binary: each tensor as its address, an integer, so that Triton's
        launcher neither calls its data_ptr nor asks the driver about it (cuPointerGetAttribute, a driver
        call a tensor argument; the arguments' checks and Triton's first launch of the key covered that).)"""
        spec, bound = [], []
        for a in args:
            if type(a) is int:
                spec.append(-1 if a == 1 else a % 16 + (0 if -0x80000000 <= a < 0x80000000 else 16 if a < 1 << 63 else 32))
                bound.append(a)
            elif isinstance(a, torch.Tensor):
                ptr = a.data_ptr()
                spec.append((a.dtype, ptr % 16))
                bound.append(ptr)
            else:
                spec.append(type(a))
                bound.append(a)
        return spec, bound

    def run(self, entry, grid, args: tuple, bound: list, device) -> None:
        """Launches `entry` (binary, constexprs) over `grid` on the runtime arguments `args` as `bind` gave them
        (`bound`), in signature order."""
        binary, constexprs = entry
        binary.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                   self._driver.active.get_current_stream(device), binary.function, binary.packed_metadata, None, None,
                   None, *bound, *constexprs)
        _record_launch((self, entry, grid, args))

    def positional(self, args: tuple, consts: dict) -> tuple[tuple, dict]:
        """Runtime arguments given by name (the last ones) moved into `args`, which the binary takes."""
        if len(args) == len(self.runtime_names):
            return args, consts
        consts = dict(consts)
        return (*args, *[consts.pop(name) for name in self.runtime_names[len(args):]]), consts

    def _hooked(self) -> bool:
        """Whether a launch hook is set (a profiler's; triton 3.9's hooks are chains, possibly empty)."""
        hook = self._runtime_knobs.launch_enter_hook
        return hook is not None and bool(getattr(hook, "calls", True))


class _Recording:
    """The launches `CachedLaunch` made while a call was recorded, and the output of a launcher that
    declared its call one launch (`single_launch_output`)."""

    def __init__(self):
        self.launches, self.out = [], None


# .recording: the _Recording of this thread's call being recorded, if any; .tape: its `_tape` recorder, if any
_THREAD = threading.local()


def _record_launch(launch) -> None:
    """Keeps a recorded call's first launch only: a second makes the call not replayable, and the first's
    arguments are let go at once (kept for the whole call, they held opm-long's float32 projections past
    their `del`: +160 MiB at the peak, measured on the H200). A tape being recorded (`_tape`) gets every
    launch; None, a launch that is not a compiled binary's, makes both not replayable."""
    rec = getattr(_THREAD, "recording", None)
    if rec is not None:
        rec.launches = [launch] if not rec.launches else [None, None]
    tape = getattr(_THREAD, "tape", None)
    if tape is not None:
        tape.launch(launch)


def single_launch_output(out: torch.Tensor) -> None:
    """Declares the current call's whole work one kernel launch (through `CachedLaunch`) into `out`, a
    tensor the launcher allocated with `empty`: such a call may be replayed (`Replays`)."""
    rec = getattr(_THREAD, "recording", None)
    if rec is not None:
        rec.out = out


class _Plan:
    """One recorded single-launch call: the binary, its constexprs and grid, the arguments with the call's
    tensors and output as slots, the output's shape, dtype and device, the launching device's stream, and
    its launcher's hook test."""

    def __init__(self, launcher, entry, grid, args, tensors, out):
        (self.binary, self.constexprs), self.grid = entry, (*grid, 1, 1)[:3]
        self.shape, self.dtype, self.device = tuple(out.shape), out.dtype, out.device
        if len({id(t) for t in tensors if t is not None}) < sum(t is not None for t in tensors):
            raise LookupError("one tensor passed as two arguments: its slots would be ambiguous")
        self.template, self.slots = list(args), []
        for pos, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                k = -1 if a is out else next((k for k, t in enumerate(tensors) if a is t), None)
                if k is None:
                    raise LookupError("an argument is neither an input nor the output")
                self.slots.append((pos, k))
                self.template[pos] = None  # the plan keeps no reference to the recorded call's tensors
        active = launcher._driver.active
        self.stream = functools.partial(active.get_current_stream, active.get_current_device())
        self.hooked = launcher._hooked

    def __call__(self, ptrs):
        """Launches on the inputs at addresses `ptrs` (in the order of the recorded call's tensors) into a
        new output, returned. Pointers go to Triton's launcher as integers: it then neither calls each
        tensor's data_ptr nor asks the driver about the address (cuPointerGetAttribute, a driver call a
        tensor argument), which the recorded call's checks made unnecessary."""
        out = empty(*self.shape, dtype=self.dtype, device=self.device)
        args = self.template.copy()
        for pos, k in self.slots:
            args[pos] = out.data_ptr() if k < 0 else ptrs[k]
        b = self.binary
        b.run(*self.grid, self.stream(), b.function, b.packed_metadata, None, None, None, *args, *self.constexprs)
        return out


class Replays:
    """Calls replayed from a key, skipping their Python path (argument checks, path choice, the launch's
    key): for the single-launch kernels of small problems, whose whole time is that path (on the H200's
    hosts 55-115 us a call against kernels of 14-16 us; replayed, 35-67 us on a host where PyTorch's
    x.add_(1) takes 13-14 us, session 7).

    The caller's key must hold everything the skipped path decides on: each tensor's shape, strides,
    dtype, device and address modulo 16 (what Triton specializes pointers on), the options, the current
    device. `get(key)` is the key's plan (call it with the tensors' addresses), or None: then the call
    runs inside `record(key, tensors)`, which keeps a plan when the launcher declared the call one launch
    (`single_launch_output`) and every tensor argument of that launch is one of `tensors` or the output.
    A launch hook (a profiler's) takes the recorded path, so that it sees every launch. Plans hold what
    the path decided: code that changes the launchers' module settings (tests) clears them (`clear`)."""

    LIMIT = 1024  # plans kept at most (then forgotten, oldest first)

    def __init__(self):
        self.plans: dict = {}

    def get(self, key):
        plan = self.plans.get(key)
        return None if plan is None or plan.hooked() else plan

    def clear(self) -> None:
        self.plans.clear()

    @contextlib.contextmanager
    def record(self, key, tensors):
        if key is None or getattr(_THREAD, "recording", None) is not None:  # not replayable, or inside another
            yield
            return
        _THREAD.recording = rec = _Recording()
        try:
            yield
        finally:
            _THREAD.recording = None
        if rec.out is None or len(rec.launches) != 1 or rec.launches[0] is None:
            return
        try:
            plan = _Plan(*rec.launches[0], tensors, rec.out)
        except LookupError:
            return
        if len(self.plans) >= self.LIMIT:
            del self.plans[next(iter(self.plans))]
        self.plans[key] = plan


_CACHED_LAUNCHES: dict[int, CachedLaunch] = {}
_TUNED_LAUNCHES: dict[int, "TunedLaunch"] = {}


def cached_launch(kernel) -> CachedLaunch:
    """The `CachedLaunch` of a module-level kernel (one per kernel, made on first use)."""
    out = _CACHED_LAUNCHES.get(id(kernel))
    if out is None:
        out = _CACHED_LAUNCHES[id(kernel)] = CachedLaunch(kernel)
    return out


def tuned_launch(tuned) -> "TunedLaunch":
    """The `TunedLaunch` of an autotuned kernel (one per `triton.autotune` wrapper, made on first use)."""
    out = _TUNED_LAUNCHES.get(id(tuned))
    if out is None:
        out = _TUNED_LAUNCHES[id(tuned)] = TunedLaunch(tuned)
    return out


class TunedLaunch:
    """An autotuned kernel's launch. The first call of each autotuning key (the values of the wrapper's
    key arguments and the tensors' dtypes, as Triton's autotuner forms it) goes through the autotuner,
    which benchmarks the candidates once and launches the best; later calls launch that config through
    `CachedLaunch` (under cProfile on the H200's host ~0.26 ms a call through the autotuner and Triton's
    launch, ~0.09 ms this way; 11 such launches a training step of the Outer Product Mean).

    Call as `launch(grid, args, consts)`: grid(meta) of the config's meta-parameters, args the runtime
    arguments, consts the constexprs other than the config's.

    A call whose binary key (`CachedLaunch`'s, with the autotuning key's exact values) was launched before
    takes that binary and config from one lookup, without forming the autotuner's key and the config's
    arguments again (locally 7.6 -> ~3 us a launch)."""

    def __init__(self, tuned):
        self.tuned = tuned
        self.cached = cached_launch(tuned.fn)
        names = tuned.fn.arg_names
        n_runtime = len(names) - len(self.cached.constexpr_names)
        self.arg_keys = [names.index(k) for k in tuned.keys if k in names[:n_runtime]]
        self.const_keys = [k for k in tuned.keys if k in self.cached.constexpr_names]
        self.chosen = {}
        self.launches = {}  # full key -> ((binary, constexprs), config)

    def __call__(self, grid, args, consts):
        cached = self.cached
        positional, named = cached.positional(args, consts)
        device = cached._driver.active.get_current_device()
        spec, bound = cached.bind(positional)
        full = (device, *named.values(), *[positional[i] for i in self.arg_keys], *spec)
        hit = self.launches.get(full)
        if hit is not None and not cached._hooked():
            cached.run(hit[0], grid(hit[1].kwargs), positional, bound, device)
            return
        key = (*[positional[i] for i in self.arg_keys], *[named.get(k) for k in self.const_keys],
               *[a.dtype for a in positional if isinstance(a, torch.Tensor)])
        cfg = self.chosen.get(key)
        if cfg is None:  # the autotuner takes the call as given (its pruning may read arguments given by name)
            _record_launch(None)
            self.tuned[grid](*args, **consts)
            self.chosen[key] = self.tuned.best_config
            return
        entry = cached(grid(cfg.kwargs), *positional, **named, **cfg.all_kwargs())
        if entry is not None:
            self.launches[full] = (entry, cfg)


def dot_precision(dtype: torch.dtype, precision: str) -> str:
    """input_precision for tl.dot on `dtype` operands (SPEC 3).

    float32 at default precision uses 3xTF32 (error ~1e-7, meets rel <= 1e-5); "fast" uses plain TF32.
    16-bit operands ignore it (their products are exact in the fp32 accumulator).
    """
    if dtype == torch.float32 and precision == "default":
        return "tf32x3"
    return "tf32"


def multiprocessors(device: torch.device) -> int:
    """The multiprocessor count of a CUDA device (the current one for an index-less device; queried on
    first use, never at import)."""
    return _multiprocessor_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _multiprocessor_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1), in plain Python: on the launch path, where triton 3.9's
    `triton.next_power_of_2` (a constexpr function) costs microseconds a call."""
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    """Ceiling division in plain Python (see next_pow2)."""
    return -(-int(a) // int(b))


def bucket(n: int) -> int:
    """Power-of-two bucket of a size, the autotuning key (configs are not retuned per N)."""
    return next_pow2(n)


# Tests set this so that every output the kernels should write starts as NaN: an element left
# unwritten shows as NaN instead of passing as whatever the allocator had.
POISON_OUTPUTS = False


def empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.empty for kernel outputs; filled with NaN while POISON_OUTPUTS is set."""
    t = torch.empty(*shape, dtype=dtype, device=device)
    if POISON_OUTPUTS:
        t.fill_(float("nan"))
    return t


@functools.lru_cache(maxsize=None)
def float32_out_products() -> bool:
    """Whether this PyTorch's CUDA products take 16-bit operands with a float32 output (addmm's and
    baddbmm's out_dtype, PyTorch 2.8 and later). Read from the version, not probed: it is also asked
    while torch.compile traces, on fake tensors."""
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 8)


def eager(t: torch.Tensor) -> bool:
    """Whether `t` is a real tensor outside torch.compile's tracing (which passes fake or functional
    tensor subclasses, and decomposes some ops without every overload's arguments)."""
    return type(t) is torch.Tensor and not torch.compiler.is_compiling()


def add_product(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc += a @ b for a, b (2-D, or batched 3-D) and a float32 acc, in one product accumulating in
    float32: cuBLAS with a float32 output for 16-bit operands on CUDA (addmm's / baddbmm's out_dtype,
    PyTorch 2.8 and later; not while torch.compile traces: its addmm decomposition takes out_dtype for
    beta, PyTorch 2.11); elsewhere the 16-bit operands cast to float32 (their products are exact there)."""
    product = torch.addmm if a.dim() == 2 else torch.baddbmm
    if a.dtype != acc.dtype and acc.is_cuda and float32_out_products() and eager(acc):
        product(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        product(acc, a.to(acc.dtype), b.to(acc.dtype), out=acc)


def as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t.to(dtype) without the call where t already has it (a no-op `to` took ~8 us of the lent hosts' time,
    ~15 a training step of the Outer Product Mean; session 14)."""
    return t if t.dtype == dtype else t.to(dtype)


def float32_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (2-D, or batched 3-D) as a new float32 tensor, summed in float32: one cuBLAS call with a float32
    output for 16-bit operands on CUDA (mm's / bmm's out_dtype, PyTorch 2.8 and later; not while torch.compile
    traces), where zeros and `add_product` took two; elsewhere the operands cast to float32 (exact)."""
    product = torch.mm if a.dim() == 2 else torch.bmm
    if a.dtype != torch.float32 and a.is_cuda and float32_out_products() and eager(a):
        return product(a, b, out_dtype=torch.float32)
    return product(a.to(torch.float32), b.to(torch.float32))


SMALL_COLUMN_SUMS = 1 << 20  # elements: below, PyTorch's sum (one launch against the product's three)


def column_sums(x: torch.Tensor) -> torch.Tensor:
    """x (rows, k) summed over its rows in float32: (k,). For 16-bit x on CUDA of SMALL_COLUMN_SUMS
    elements or more, one product with a row of ones accumulating in float32 (cuBLAS reads the rows at
    full bandwidth; PyTorch's reduction over rows into 64-128 outputs took 0.19 ms for 63 MB on the
    H200, ~10x the read); otherwise PyTorch's sum (float32 products could run as TF32 under a global
    setting)."""
    if not (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)) or x.numel() < SMALL_COLUMN_SUMS:
        return x.sum(0, dtype=torch.float32)
    acc = torch.zeros(1, x.shape[1], dtype=torch.float32, device=x.device)
    add_product(acc, torch.ones(1, x.shape[0], dtype=x.dtype, device=x.device), x)
    return acc[0]


@contextlib.contextmanager
def ieee_fp32_matmul():
    """float32 matrix products in IEEE precision inside the block, whatever the caller set globally."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
