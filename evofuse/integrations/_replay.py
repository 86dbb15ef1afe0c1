"""A model's repeated inference call replayed from a CUDA graph: the diffusion module's network, called once a
sampling step with the same conditioning tensors and a new noisy structure, spends most of a step's time in Python
and in kernel launches below a thousand tokens. `Replayed` wraps such a forward: its first inference call at a
layout runs as it is (kernels compile and autotune there); the second, if every argument has the first's layout,
is captured as a CUDA graph (`torch.cuda.graph`) and replayed; later calls of that layout replay it. A tensor
passed again in those two calls (the conditioning) is read in place by the graph, a new one (the noisy
coordinates, the time) is copied into the graph's own input first. Any other call runs as it is."""

from __future__ import annotations

import warnings
import weakref

import torch

from .._runtime import cuda_graph


def layout(value, tensors: list) -> object:
    """The hashable layout of a call's arguments (nested tuples, lists and dicts; every tensor's shape, strides,
    dtype and device; every other leaf's value), its tensors appended to `tensors` in order."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ("tensor", tuple(value.shape), value.stride(), value.dtype, value.device)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(layout(v, tensors) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, layout(v, tensors)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:  # (an unhashable leaf is the same argument only if it is the same object)
        return ("object", id(value))
    return ("value", value)


def rebuilt(value, tensors):
    """`value` with its tensors (in `layout`'s order) taken from the iterator `tensors` instead."""
    if isinstance(value, torch.Tensor):
        return next(tensors)
    if isinstance(value, (tuple, list)):
        return type(value)(rebuilt(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: rebuilt(v, tensors) for k, v in value.items()}
    return value


class Replayed:
    """`forward` (a module's bound forward) replayed from CUDA graphs for inference calls (no gradient recorded,
    `module` in eval mode, CUDA tensors) that repeat a layout; see the module's docstring. A tensor is read in place
    when it is the same tensor (the same object, at the same address) in the call captured and in the call before it
    of that layout, and a graph is replayed only while each such argument is that tensor again; the others are copied
    in. The tensors read in place are not kept alive (weak references): once the caller drops one (a prediction's
    conditioning), the graph is not replayed and goes at its layout's next call. Up to LAYOUTS layouts keep a graph
    (a sampler alternating chunks of samples), the oldest going first. A capture that fails (a forward that
    synchronizes with the host or changes shapes with its values) leaves the module eager, with a warning."""

    LAYOUTS = 4

    def __init__(self, forward, module: torch.nn.Module):
        self.forward, self.module = forward, module
        self.seen: dict = {}  # layout -> each tensor of its last eager call, held weakly
        # layout -> (each tensor read in place, held weakly, or None where copied in; the copies; graph; output)
        self.graphs: dict = {}
        self.broken = False

    def __call__(self, *args, **kwargs):
        if self.broken or self.module.training or torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        tensors: list[torch.Tensor] = []
        # (the graph reads the parameters and buffers where they are: a module moved since is captured anew)
        key = (layout((args, kwargs), tensors), torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
               tuple(t.data_ptr() for t in (*self.module.parameters(), *self.module.buffers())))
        if not tensors or not all(t.is_cuda for t in tensors):
            return self.forward(*args, **kwargs)
        graph = self.graphs.get(key)
        if graph is not None and all(kept is None or _same(kept, now) for kept, now in zip(graph[0], tensors)):
            return _replay(graph, tensors)
        self.graphs.pop(key, None)
        before = self.seen.pop(key, None)
        if before is not None:
            return self._capture(key, args, kwargs, tensors, before)
        _remember(self.seen, key, [_held(t) for t in tensors], self.LAYOUTS)
        return self.forward(*args, **kwargs)

    def _capture(self, key, args, kwargs, tensors, before):
        """Captures the call with the tensors that are not the last eager call's copied into the graph's own, replays
        it once and returns its output."""
        kept = [then if _same(then, now) else None for then, now in zip(before, tensors)]
        copies = [t.clone() for t, same in zip(tensors, kept) if same is None]
        moved = iter(copies)
        static = [t if same is not None else next(moved) for t, same in zip(tensors, kept)]
        call_args, call_kwargs = rebuilt((args, kwargs), iter(static))
        # autocast's cast weights made in the graph, not read from its cache, which its region's end frees
        casts = torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=key[1], cache_enabled=False)

        def step():
            with casts:
                return self.forward(*call_args, **call_kwargs)
        try:
            graph, output = cuda_graph(step, host_free=True)
        except RuntimeError as exc:
            self.broken, self.seen, self.graphs = True, {}, {}
            warnings.warn(f"evofuse: {type(self.module).__name__} runs eagerly: its CUDA graph capture failed "
                          f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})", RuntimeWarning,
                          stacklevel=3)
            return self.forward(*args, **kwargs)
        record = (kept, copies, graph, output)
        _remember(self.graphs, key, record, self.LAYOUTS)
        return _replay(record, tensors)


def _replay(record, tensors: list[torch.Tensor]):
    """A captured call (`Replayed._capture`'s record) replayed with this call's moving tensors copied in."""
    kept, copies, graph, output = record
    for copy, t in zip(copies, (t for t, same in zip(tensors, kept) if same is None)):
        copy.copy_(t)
    graph.replay()
    outs: list[torch.Tensor] = []
    layout(output, outs)
    return rebuilt(output, (t.clone() for t in outs))  # (the graph's output is overwritten by its next replay)


def _remember(table: dict, key, value, limit: int) -> None:
    """table[key] = value, the oldest entries dropped beyond `limit`."""
    table[key] = value
    while len(table) > limit:
        del table[next(iter(table))]


def _held(t: torch.Tensor) -> tuple[weakref.ref, int]:
    return weakref.ref(t), t.data_ptr()


def _same(held: tuple[weakref.ref, int], now: torch.Tensor) -> bool:
    """Whether `now` is the tensor `held` (`_held`) refers to, still at the same address."""
    return held[0]() is now and held[1] == now.data_ptr()
