"""Tapes: an eager call's PyTorch ops and Triton launches, recorded once per key and replayed without the call's
Python path.

A training step's host time on the lent H200 hosts is of the order of its device time: the Outer Product Mean's
bf16 backward at opm-af2-main spends ~1.7 ms of host time (~50 PyTorch calls, 6 launches and the Python that
decides them) on ~1.2 ms of kernels (session 19), so that a slow host, not the kernels, sets the step's time. What
the backward does depends only on its tensors' shapes, strides, dtypes and addresses modulo 16, its options and a
few global settings: `Tapes.call` records the ops and launches of a call under a `TorchDispatchMode` and replays
them for later calls of the same key, each op through its ATen overload, each launch straight into the binary.

Recording is refused (the call runs as it is, and is tried again on a later call, a few times at most) when the
call does anything a replay would not repeat: a Triton launch that is not a `CachedLaunch` of a compiled binary (a
first launch, the autotuner, the interpreter; a Gluon kernel's launcher is repeated whole, `taped_whole`), an op
whose result the host reads (`.item()`, comparisons returning Python values) or whose shape depends on the values
(`nonzero`), a random op, or a tensor argument that is neither an input of the call nor made by one of its
recorded ops. A replay runs without gradient recording and outside autocast, as recording
did; it keeps the setting of float32 products (TF32 or not) that each op was recorded under. Tensors are
tracked by weak reference, so recording holds no memory the call would have freed, and a replay lets each
intermediate go after its last use.
"""

from __future__ import annotations

import functools
import os
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from . import _common

ATTEMPTS = 3  # recordings tried for a key before it is left to run as it is

_aten = torch.ops.aten
# ops that only allocate: replayed as torch.empty_strided of the recorded shape, strides, dtype and device
_EMPTIES = {_aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default,
            _aten.new_empty.default, _aten.new_empty_strided.default}


class _Slot:
    """A tensor argument: the index of a tensor of the tape (the call's inputs first, then the ops' results)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class _View:
    """A tensor argument that is a view of slot `root`: `nbytes` bytes past its first element, with its own sizes
    and strides (in elements of the root's dtype). A launch takes its address; an op, the view made by as_strided
    (one call, where the ATen view op's overload took ~20 us of the lent hosts' time)."""

    __slots__ = ("root", "nbytes", "size", "stride", "itemsize")

    def __init__(self, root, nbytes, size, stride, itemsize):
        self.root, self.nbytes, self.size, self.stride, self.itemsize = root, nbytes, size, stride, itemsize

    def tensor(self, vals):
        base = vals[self.root]
        return base.as_strided(self.size, self.stride, base.storage_offset() + self.nbytes // self.itemsize)


class _Refused(Exception):
    pass


def _fill(template, vals):
    """An op's argument (or a list of them) with its tensors taken from `vals`."""
    kind = type(template)
    if kind is _Slot:
        return vals[template.index]
    if kind is _View:
        return template.tensor(vals)
    if kind in (list, tuple):
        return kind(_fill(t, vals) for t in template)
    return template


def _is_view(func) -> bool:
    """Whether the op returns views of its input and writes nothing (each return aliased, read only)."""
    schema = func._schema
    return (bool(schema.returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
            and not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments))


class Tape:
    """A recorded call: `tape(tensors)` repeats it on new inputs (the call's tensors, None where it had None) and
    returns its result (a tensor, None, or a tuple of them)."""

    def __init__(self, steps, width, result, launcher):
        """steps: (op, a, b, c, d, slots released after it): an ATen overload's call (op, args, kwargs, its TF32
        setting, its results' slots: an int, or a tuple of them, -1 for a view's), an allocation (op "empty", a:
        (shape, strides, dtype, device), d: its slot), a `taped_whole` launcher's call (op "call", a: the
        launcher, b: its arguments) or a launch (op None, a: CachedLaunch, b: (binary,
        constexprs), c: grid, d: runtime arguments with slots); width: the tensors the call makes; result: the
        slot, view or tuple of them (None for None) returned."""
        self.steps, self.width, self.result, self.launcher = steps, width, result, launcher

    def hooked(self) -> bool:
        """Whether a launch hook (a profiler's) is set: then the call runs as it is, so that it sees each launch."""
        return self.launcher is not None and self.launcher._hooked()

    def __call__(self, tensors):
        vals = list(tensors)
        vals.extend([None] * self.width)
        tf32 = saved = torch.backends.cuda.matmul.allow_tf32
        stream = None
        empty_strided = torch.empty_strided
        try:
            with torch.no_grad():
                for op, a, b, c, d, release in self.steps:
                    if op == "empty":
                        vals[d] = empty_strided(a[0], a[1], dtype=a[2], device=a[3])
                    elif op == "call":
                        a(*[_fill(t, vals) for t in b])
                    elif op is not None:
                        if c != tf32:
                            torch.backends.cuda.matmul.allow_tf32 = tf32 = c
                        out = op(*[_fill(t, vals) for t in a], **{k: _fill(t, vals) for k, t in b.items()})
                        if type(d) is int:
                            if d >= 0:
                                vals[d] = out
                        else:
                            for k, t in zip(d, out):
                                if k >= 0:
                                    vals[k] = t
                            t = None
                        out = None  # (held here, a result released below would outlive its last use)
                    else:
                        if stream is None:
                            active = a._driver.active
                            stream = active.get_current_stream(active.get_current_device())
                        binary, constexprs = b
                        args = [vals[t.index].data_ptr() if type(t) is _Slot
                                else vals[t.root].data_ptr() + t.nbytes if type(t) is _View else t for t in d]
                        binary.run(*c, stream, binary.function, binary.packed_metadata, None, None, None, *args,
                                   *constexprs)
                    for k in release:
                        vals[k] = None
        finally:
            if tf32 != saved:
                torch.backends.cuda.matmul.allow_tf32 = saved
        if type(self.result) is tuple:
            return tuple(None if k is None else _fill(k, vals) for k in self.result)
        return None if self.result is None else _fill(self.result, vals)


class _Recorder(TorchDispatchMode):
    """Records the ops of a call (the dispatch mode) and its launches (`launch`, from `_common._record_launch`)."""

    def __init__(self, tensors):
        super().__init__()
        self.known = {}  # id(tensor) -> (weak reference, its slot or _View)
        self.ptrs = {}  # slot -> (its tensor's address, its storage's, its dtype)
        self.count = 0
        self.steps = []  # (op, a, b, c, d, slots used, slots made)
        self.launcher = None
        self.refused = None
        for t in tensors:
            if t is not None:
                self._add(t, _Slot(self.count))
                self.ptrs[self.count] = (t.data_ptr(), t.untyped_storage().data_ptr(), t.dtype)
            self.count += 1
        self.inputs = self.count

    def _add(self, t, ref):
        self.known[id(t)] = (weakref.ref(t), ref)

    def _ref(self, t):
        hit = self.known.get(id(t))
        if hit is None or hit[0]() is not t:
            raise _Refused(f"a tensor argument ({tuple(t.shape)}, {t.dtype}) the call's ops did not make")
        return hit[1]

    def _template(self, x, used):
        if isinstance(x, torch.Tensor):
            ref = self._ref(x)
            used.append(ref.index if type(ref) is _Slot else ref.root)
            return ref
        if type(x) in (list, tuple):
            return type(x)(self._template(t, used) for t in x)
        return x

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.refused is not None:
            return func(*args, **kwargs)
        try:
            tags = func.tags
            if torch.Tag.nondeterministic_seeded in tags:
                raise _Refused(f"a random op ({func})")
            if torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags:
                raise _Refused(f"an op whose result depends on the values ({func})")
            used = []
            b = tuple(self._template(x, used) for x in args)
            c = {k: self._template(x, used) for k, x in kwargs.items()}
        except _Refused as e:
            self.refuse(str(e))
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if func in _EMPTIES and type(out) is torch.Tensor:
            index = self._new(out)
            self.steps.append(("empty", (tuple(out.shape), out.stride(), out.dtype, out.device), None, None, index,
                               used, (index,)))
            return out
        outs = [out] if isinstance(out, torch.Tensor) else out
        if not (type(out) in (list, tuple) or isinstance(out, torch.Tensor)) or not all(
                isinstance(t, torch.Tensor) for t in outs):
            self.refuse(f"{func} returns {type(out).__name__} to the host")
            return out
        if _is_view(func) and self._views(outs, b):
            return out  # nothing to replay: the views are addresses and as_strided calls where used
        results = tuple(self._result(t) for t in outs)
        made = tuple(k for k in results if k >= 0)
        self.steps.append((func, b, c, torch.backends.cuda.matmul.allow_tf32,
                           results[0] if isinstance(out, torch.Tensor) else results, used, made))
        return out

    def _new(self, t) -> int:
        index = self.count
        self._add(t, _Slot(index))
        self.ptrs[index] = (t.data_ptr(), t.untyped_storage().data_ptr(), t.dtype)
        self.count += 1
        return index

    def _result(self, t) -> int:
        """The slot of an op's result: its own when written in place (out=, an in-place op), -1 for a view's."""
        hit = self.known.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1].index if type(hit[1]) is _Slot else -1
        return self._new(t)

    def _views(self, outs, args) -> bool:
        """Registers a view op's results as views of its first tensor argument's root slot; False where one is
        not a view of it (a composite op that copied) or has another dtype (then the op is replayed)."""
        first = next((x for x in args if type(x) in (_Slot, _View)), None)
        if first is None:
            return False
        root = first.index if type(first) is _Slot else first.root
        base_ptr, storage, dtype = self.ptrs[root]
        if not all(t.untyped_storage().data_ptr() == storage and t.dtype == dtype for t in outs):
            return False
        for t in outs:
            self._add(t, _View(root, t.data_ptr() - base_ptr, tuple(t.shape), t.stride(), t.element_size()))
        return True

    def call(self, fn, args) -> bool:
        """A `taped_whole` launcher's call: recorded as one step (its tensor arguments as slots); False when one
        is not the call's."""
        if self.refused is not None:
            return False
        try:
            used = []
            b = tuple(self._template(x, used) for x in args)
        except _Refused as e:
            self.refuse(str(e))
            return False
        self.steps.append(("call", fn, b, None, None, used, ()))
        return True

    def launch(self, launch) -> None:
        """A Triton launch of the recorded call: (CachedLaunch, (binary, constexprs), grid, runtime args), or
        None for a launch that cannot be repeated from the binary."""
        if self.refused is not None:
            return
        if launch is None:
            self.refuse("a launch that is not a compiled binary's (a first launch, autotuning, the interpreter)")
            return
        launcher, entry, grid, args = launch
        try:
            used = []
            d = [self._template(a, used) if isinstance(a, torch.Tensor) else a for a in args]
        except _Refused as e:
            self.refuse(str(e))
            return
        self.launcher = launcher
        self.steps.append((None, launcher, entry, tuple((*grid, 1, 1)[:3]), d, used, ()))

    def tape(self, result) -> Tape:
        if type(result) is tuple:
            refs = tuple(None if t is None else self._ref(t) for t in result)
        else:
            refs = None if result is None else self._ref(result)
        roots = {r.index if type(r) is _Slot else r.root for r in (refs if type(refs) is tuple else (refs,))
                 if r is not None}
        kept = set(range(self.inputs)) | roots
        last = {}
        for n, step in enumerate(self.steps):
            for k in (*step[5], *step[6]):
                last[k] = n
        release = [[] for _ in self.steps]
        for k, n in last.items():
            if k not in kept:
                release[n].append(k)
        steps = [(*step[:5], tuple(rel)) for step, rel in zip(self.steps, release)]
        return Tape(steps, self.count - self.inputs, refs, self.launcher)


def taped_whole(fn):
    """Marks a launcher whose launch is not a `CachedLaunch`'s (Triton's own, with tensor descriptors): a tape
    records its call as one step and repeats the call, not its insides. It may only write into tensors it is
    given, and returns None or one of them."""
    @functools.wraps(fn)
    def launcher(*args):
        rec = getattr(_common._THREAD, "tape", None)
        if rec is None or not rec.call(fn, args):
            return fn(*args)
        _common._THREAD.tape = None  # its ops and launch are the step's
        try:
            with _disable_current_modes():
                return fn(*args)
        finally:
            _common._THREAD.tape = rec
    return launcher


def record(fn, tensors):
    """fn(*tensors) run under a recorder: (its result, the Tape of the call or None, why not)."""
    if getattr(_common._THREAD, "tape", None) is not None:  # inside another recording: that one records it
        return fn(*tensors), None, "inside another recording"
    rec = _Recorder(tensors)
    _common._THREAD.tape = rec
    try:
        with rec:
            result = fn(*tensors)
    finally:
        _common._THREAD.tape = None
    if rec.refused is None:
        try:
            return result, rec.tape(result), None
        except _Refused as e:
            rec.refuse(str(e))
    return result, None, rec.refused


class Tapes:
    """Tapes by key. `call(options, fn, tensors)` is fn(*tensors): replayed from the key's tape when there is
    one, else recorded (a tape kept when the call allows one). The key holds `options` (everything else the call
    decides on, given by the caller), each tensor's shape, strides, dtype, device and address modulo 16, the
    current device, the float32 product settings, the launchers' environment (EVOFUSE_AUTOTUNE, poisoned
    outputs). Calls under torch.compile's tracing, with gradient recording or autocast on, or on CPU tensors run
    as they are. Tests that change the launchers' module settings clear the tapes (`clear`)."""

    LIMIT = 256  # keys kept at most (then forgotten, oldest first)

    def __init__(self):
        self.tapes: dict = {}

    def clear(self) -> None:
        self.tapes.clear()

    def key(self, options: tuple, tensors) -> tuple | None:
        first = tensors[0]
        if (type(first) is not torch.Tensor or not first.is_cuda or torch.compiler.is_compiling()
                or torch.is_grad_enabled() or torch.is_autocast_enabled("cuda") or _common.interpreting()):
            return None
        return (options, torch.cuda.current_device(), torch.backends.cuda.matmul.allow_tf32,
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                os.environ.get("EVOFUSE_AUTOTUNE"), _common.POISON_OUTPUTS,
                *[None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)
                  for t in tensors])

    def call(self, options: tuple, fn, tensors):
        key = self.key(options, tensors)
        if key is None:
            return fn(*tensors)
        tape = self.tapes.get(key)
        if type(tape) is Tape:
            return fn(*tensors) if tape.hooked() else tape(tensors)
        if tape is not None and tape >= ATTEMPTS:
            return fn(*tensors)
        result, new, _ = record(fn, tensors)
        if new is None:
            new = (tape or 0) + 1
        elif len(self.tapes) >= self.LIMIT:
            del self.tapes[next(iter(self.tapes))]
        self.tapes[key] = new
        return result


TAPES = Tapes()
