"""Small facts about where the kernels run, shared by every operation: Triton's interpreter, the dot
precision of a dtype, the multiprocessor count, size buckets. Nothing here touches a GPU at import."""

from __future__ import annotations

import functools
import inspect
import os
import warnings

import torch

PRECISIONS = ("default", "fast")


def interpreting() -> bool:
    """Whether Triton's interpreter runs the kernels (TRITON_INTERPRET=1: CPU tensors, as CI runs them)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def traced(tensor: torch.Tensor) -> bool:
    """Whether a backward runs under tracing (torch.compile or torch.export: fake or functional tensors, or any
    other tensor subclass) rather than eagerly on a plain tensor. Traced, the operations' backwards call their
    nested ops (`*_core_backward`, `layer_norm_backward`, `pair_heads_backward`) through the dispatcher, which the
    compiler keeps opaque; eager, the Python functions behind them, since there the dispatcher adds only host
    time (docs/DESIGN.md)."""
    return torch.compiler.is_compiling() or type(tensor) is not torch.Tensor


def distributed(t: torch.Tensor) -> bool:
    """Whether t is a tensor subclass run eagerly (a DTensor's shards): an operation then takes the composition whose
    parts `evofuse.sharding` places (not the tracers of torch.compile, whose tensors are subclasses too)."""
    return type(t) is not torch.Tensor and not torch.compiler.is_compiling()


def rows_first(t: torch.Tensor) -> tuple[int, ...] | None:
    """The order of t's dimensions that puts first the leading one a distributed tensor is sharded along, so that its
    rows (every dimension but the last, flattened) stay one block a device and a backward's products over every row
    gather nothing; None where there is none to move (a plain tensor, or one sharded along its first or last)."""
    if not distributed(t):
        return None
    dims = [p.dim for p in getattr(t, "placements", ()) if isinstance(getattr(p, "dim", None), int)]
    if not dims or dims[0] in (0, t.dim() - 1):
        return None
    return (dims[0], *(k for k in range(t.dim()) if k != dims[0]))


def permuted(t: torch.Tensor, order: tuple[int, ...] | None, back: bool = False) -> torch.Tensor:
    """t's dimensions in `order` (`rows_first`), or back from it; t itself where order is None."""
    if order is None:
        return t
    return t.permute(sorted(range(len(order)), key=order.__getitem__) if back else order)


def as_rows(t: torch.Tensor, order: tuple[int, ...] | None = None) -> torch.Tensor:
    """t's rows (every dimension but the last flattened), its dimensions first in `order`: a copy for a distributed
    tensor (see `contiguous`), else a view where it can be (a broadcast tensor stays one)."""
    if order is None and not distributed(t):
        return t.reshape(-1, t.shape[-1])
    return contiguous(permuted(t, order)).view(-1, t.shape[-1])


def contiguous(t: torch.Tensor) -> torch.Tensor:
    """t in contiguous memory. A distributed tensor is copied whatever its strides say: a DTensor's transposed
    gradient reports contiguous strides while its shards are transposed, and a view of it then fails on them."""
    if t.is_contiguous() and not distributed(t):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def custom_op(name: str, impl, fake):
    """`evofuse::<name>`, a torch.library custom op of `impl` (its schema from impl's annotations; no argument
    mutated) with `fake` as its fake implementation: a nested op that a traced backward calls (`traced`). Where the
    outputs' shapes or placements follow a flag (a gradient asked for or not, what a forward keeps), an int argument
    comes at or before it (a 0/1 flag typed int): DTensor keys an op's sharding by its tensors and by its arguments
    from the first int on (`register_sharding`), and would otherwise hand a later call an earlier one's."""
    op = torch.library.custom_op(f"evofuse::{name}", mutates_args=())(impl)
    op.register_fake(fake)
    return op


def operation(name: str, forward, fake, setup_context, backward):
    """(op, call): an operation's custom op `evofuse::<name>` of `forward` with its fake and its autograd
    (`setup_context`, `backward`), and the call the functional forms make (`eager_or_dispatched`). Every operation is
    defined through here (docs/DESIGN.md, "Adding an operation"). The backward chooses its gradients by name:
    `backward(ctx, needs, *grads)`, where `needs` maps each of forward's parameters to whether autograd asks its
    gradient, returns a dict of gradients keyed by forward's parameters (those it leaves out get None)."""
    op = custom_op(name, forward, fake)
    positional = by_name(backward, tuple(inspect.signature(forward).parameters))
    op.register_autograd(positional, setup_context=setup_context)
    return op, eager_or_dispatched(op, forward, setup_context, positional)


def by_name(backward, names: tuple[str, ...]):
    """`backward(ctx, needs, *grads) -> {name: gradient}` as autograd calls it: (ctx, *grads) -> one gradient or None
    per input, in the order of `names`."""
    known = frozenset(names)

    def positional(ctx, *grads):
        grads_by_name = backward(ctx, dict(zip(names, ctx.needs_input_grad)), *grads)
        if not grads_by_name.keys() <= known:
            raise TypeError(f"a backward returned gradients of {sorted(grads_by_name.keys() - known)}, not inputs of "
                            f"its op")
        return tuple(grads_by_name.get(name) for name in names)

    return positional


def eager_or_dispatched(op, forward, setup_context, backward):
    """The call of a custom op `op` whose implementation is `forward`, with its autograd's `setup_context` and
    `backward`: through the dispatcher when traced, else eagerly the same three functions under a
    `torch.autograd.Function`, whose host time is about half the custom op's autograd's (docs/DESIGN.md), or,
    where the op's last argument `train` is false (nothing records a gradient), `forward` alone (an `apply` costs
    ~7 us even then). The context is set inside its forward: a separate `setup_context` has every `apply` bind the
    arguments to the forward's signature."""

    class Eager(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            output = forward(*args)
            setup_context(ctx, args, output)
            return output

        @staticmethod
        def backward(ctx, *grads):
            return backward(ctx, *grads)

    def call(*args):
        if traced(args[0]):
            return op(*args)
        return Eager.apply(*args) if args[-1] else forward(*args)

    return call


def keep_for_backward(ctx, saved: list, kept: list, **options) -> None:
    """An op's setup_context: the inputs `saved` and the op's extra outputs `kept` (what its backward needs, marked
    non-differentiable, with no zero-filled gradients made for them) saved, and the non-tensor `options` set on ctx."""
    ctx.save_for_backward(*saved, *kept)
    ctx.mark_non_differentiable(*kept)
    ctx.set_materialize_grads(False)
    for name, value in options.items():
        setattr(ctx, name, value)


def cuda_graph(step, host_free: bool = False):
    """(graph, output): `step()` run once on a side stream (the warm-up `torch.cuda.graph`'s documentation asks
    for), then captured as a CUDA graph (not run: replay it). With `host_free`, a warm-up that waits on the host (an
    .item(), a shape taken from values) raises there, under the sync debug mode "error", rather than breaking the
    capture; a capture that fails at its end leaves its stream current, so the caller's is made current again."""
    stream, debug = torch.cuda.current_stream(), torch.cuda.get_sync_debug_mode()
    side = torch.cuda.Stream()
    side.wait_stream(stream)
    try:
        if host_free:
            with warnings.catch_warnings():  # (torch warns on every call that the debug mode is a prototype)
                warnings.filterwarnings("ignore", "Synchronization debug mode", UserWarning)
                torch.cuda.set_sync_debug_mode("error")
        with torch.cuda.stream(side):
            step()
        torch.cuda.set_sync_debug_mode(debug)
        stream.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = step()
    finally:
        torch.cuda.set_sync_debug_mode(debug)
        torch.cuda.set_stream(stream)
    return graph, output


_AUTOTUNED: dict = {}  # kernel -> its `Tuned` launcher, built on its first launch


class Tuned:
    """A kernel under Triton's autotuner, launched as `tuned[grid](*args, **kwargs)`: through the autotuner until
    its choice for a key (the values of the arguments named in `key`, then every tensor argument's dtype, as Triton's
    autotuner keys its cache) is made, then with the chosen config's arguments straight to the kernel. The
    autotuner's own work on every launch (argument dicts, its key, the config's arguments) is host time a tuned
    bucket does not need (docs/PERFORMANCE.md, "Host cost")."""

    def __init__(self, tuner, key: list[str]):
        self.tuner = tuner
        self.key = [(tuner.arg_names.index(name), name) for name in key if name in tuner.arg_names]
        self.chosen: dict = {}  # key -> (the chosen config's launch arguments, its hook or None)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid, args: tuple, kwargs: dict):
        given = len(args)
        key = (*[args[i] if i < given else kwargs.get(name) for i, name in self.key],
               *[arg.dtype for arg in args if isinstance(arg, torch.Tensor)],
               *[arg.dtype for arg in kwargs.values() if isinstance(arg, torch.Tensor)])
        chosen = self.chosen.get(key)
        if chosen is not None:
            config, hook = chosen
            if hook is not None:  # (a config's hook runs before each of its launches, as the autotuner runs it)
                hook({**dict(zip(self.tuner.arg_names, args)), **kwargs, **config})
            return self.tuner.fn[grid](*args, **kwargs, **config)
        launched = self.tuner[grid](*args, **kwargs)
        self.chosen[key] = self.tuner.best_config.all_kwargs(), self.tuner.best_config.pre_hook
        return launched


def autotuned(kernel, configs, key: list[str], prune, restore_value: tuple[str, ...] = ()) -> Tuned:
    """`kernel` under Triton's autotuner (`Tuned`): the candidates `configs()` (a function: the tables as they are at
    the first launch), pruned for each call by `prune` (through `tuning_candidates`), the choice cached per value of
    the arguments named in `key` (their size buckets) and the dtypes; `restore_value`: pointer arguments that the
    timing runs must leave unchanged. Built once per kernel, on its first launch, and looked up by it after; every
    kernel's autotuning goes through here."""
    tuned = _AUTOTUNED.get(kernel)
    if tuned is None:
        import triton

        tuner = triton.autotune(configs(), key=key, restore_value=list(restore_value),
                                prune_configs_by={"early_config_prune": prune})(kernel)
        tuned = _AUTOTUNED[kernel] = Tuned(tuner, key)
    return tuned


def forget_autotuned() -> None:
    """Drops every kernel's autotuner and its cached choices: the next launch of each builds it again from the tables
    and EVOFUSE_AUTOTUNE as they then are."""
    _AUTOTUNED.clear()


def tuning_candidates(table: list, fits, interpreter_config, fallback: bool = True) -> list:
    """The configs of `table` that Triton's autotuner tries for a call: the interpreter's alone under Triton's
    interpreter; else those for which fits(config) holds (the table's last where none does, unless not `fallback`),
    and of them the first alone where autotuning is off. Every kernel's config choice goes through here."""
    if interpreting():
        return [interpreter_config]
    kept = [config for config in table if fits(config)] or (table[-1:] if fallback else [])
    return kept if autotune_enabled() else kept[:1]


def autotune_enabled() -> bool:
    """EVOFUSE_AUTOTUNE=0 takes each kernel's first fitting config instead of timing the candidates on
    the first call of each size bucket: a faster start, possibly a slower steady state."""
    return os.environ.get("EVOFUSE_AUTOTUNE", "1") != "0"


def dot_precision(dtype: torch.dtype, precision: str) -> str:
    """`input_precision` of tl.dot on operands of `dtype` (the numerics contract): float32 at the default
    precision takes 3xTF32 products (~1e-7 relative, within rel <= 1e-5), at "fast" plain TF32; 16-bit
    operands ignore it (their products are exact in the float32 accumulator)."""
    if dtype == torch.float32 and precision == "default":
        return "tf32x3"
    return "tf32"


# The device model of the tile predicates: shared memory one block may take on sm_90 (compute capability 9.0),
# and what the predicates that count only the pipelined operand tiles allow them, the compiler's own buffers
# (layout conversions, reductions) taking the rest. On another card Triton's autotuner drops a tile that does not fit.
SHARED_BYTES = 227 * 1024
OPERAND_SHARED_BYTES = SHARED_BYTES - 27 * 1024


def multiprocessors(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device, read on first use (a few in the interpreter)."""
    if device.type != "cuda":
        return 3
    return _properties(device).multi_processor_count


def capability(device: torch.device) -> int:
    """A CUDA device's compute capability, its major number (9 for sm_90), read on first use."""
    return _properties(device).major


def l2_cache_bytes(device: torch.device) -> int:
    """The L2 cache of a CUDA device in bytes, read on first use (an H200's 50 MiB in the interpreter)."""
    if device.type != "cuda":
        return 50 * 2**20
    return _properties(device).L2_cache_size


# an inference call runs in row chunks where its working set would take more than this share of the free memory;
# free memory is asked (a driver call) only for working sets of more than SMALL_SHARE of the device's memory
FREE_MEMORY_SHARE = 0.25
SMALL_SHARE = 1 / 64


def rows_that_fit(rows: int, row_bytes: int, device: torch.device, fixed_bytes: int = 0) -> int:
    """Rows an inference call takes at a time, each `row_bytes` of working set beside `fixed_bytes` held for all of
    them: all of them, unless the whole would pass FREE_MEMORY_SHARE of the CUDA device's free memory (its caching
    allocator's free blocks included); then as many as fit that share (at least one). All rows off CUDA, where no
    free memory is known, and where the whole takes at most SMALL_SHARE of the device's memory."""
    if device.type != "cuda" or rows * row_bytes + fixed_bytes <= SMALL_SHARE * memory_bytes(device):
        return max(rows, 1)
    free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(1, min(rows, (int(FREE_MEMORY_SHARE * free) - fixed_bytes) // max(row_bytes, 1)))


def memory_bytes(device: torch.device) -> int:
    """A CUDA device's memory in bytes, read on first use."""
    return _properties(device).total_memory


def _properties(device: torch.device):
    return _device_properties(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _device_properties(index: int):
    return torch.cuda.get_device_properties(index)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def bucket(n: int) -> int:
    """The autotuning key of a size: its power-of-two bucket, so that configs are not retuned for every N."""
    return next_pow2(n)
